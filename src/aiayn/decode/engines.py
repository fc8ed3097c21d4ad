"""The engines behind `Translator`: our PyTorch search (aiayn.decode.search) or CTranslate2.

Translator cleans, tokenizes and cuts the input lines, answers empty ones, batches by `decode.max_tokens`
and detokenizes; an engine only searches: source ids (pieces, no EOS) -> per sentence the n-best
(ids without BOS/EOS, score), best first, with the search settings of one `DecodeConfig`. The server
(aiayn.serve.engines) decodes through a Translator too, so both engines live here once.

`choose_engine` decides which one decodes a run (`engine="auto"`): CTranslate2 on the CPU when it is
installed and runs the model (one encoder-decoder model, full attention, d_v = d_k), else torch, with
the reason in words. CTranslate2 decodes the run's export (aiayn.export.cached_export), written once into
the run directory and reused.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from aiayn.config import DecodeConfig, ModelConfig
from aiayn.decode.search import Constraint, Sample, beam_search, greedy_search
from aiayn.devices import cpu_cores, resolve_device, shape_free_attention
from aiayn.errors import AiaynError
from aiayn.model.int8 import is_int8

Hypotheses = list[list[tuple[list[int], float]]]  # per sentence: n-best (ids, score), best first
ALIGN_TOKENS = 4096  # padded source + target tokens in one forward of TorchEngine.cross_attention
ALIGN_LAYERS: tuple[int, ...] = (-1,)  # the decoder layers (from the top) whose encoder-decoder attention links words
ENGINES = ("auto", "torch", "ctranslate2")


class SearchEngine(Protocol):
    name: str
    config: ModelConfig  # special ids and max_positions (bounds inputs and outputs)
    device: torch.device

    def search(self, sources: Sequence[list[int]], d: DecodeConfig, n_best: int) -> Hypotheses: ...

    def cross_attention(self, sources: Sequence[list[int]], targets: Sequence[list[int]]) -> list[Any]: ...


class TorchEngine:
    """Our batched greedy and beam search (aiayn.decode.search) on a PyTorch model or `Ensemble`."""

    name = "torch"

    def __init__(
        self, model: Any, device: str | torch.device | None = None, constraint: Constraint | None = None
    ) -> None:
        on = next(model.parameters()).device
        # device=None: keep a model already on an accelerator; else CUDA when present.
        self.device = on if device is None and on.type != "cpu" else resolve_device(device)
        shape_free_attention(self.device)  # a model already on CUDA skips resolve_device
        self.model = model.to(self.device)
        self.config: ModelConfig = model.config  # type: ignore[assignment]
        self.constraint = constraint  # which tokens each hypothesis may write next (aiayn.decode.search)
        self._draws: torch.Generator | None = None  # the sampling's random stream (reseed)
        self.align_layers: tuple[int, ...] = ALIGN_LAYERS  # the decoder layers whose attention links words

    def search(self, sources: Sequence[list[int]], d: DecodeConfig, n_best: int) -> Hypotheses:
        eos, pad = self.config.eos_id, self.config.pad_id
        S = max(len(ids) for ids in sources) + 1
        src = torch.full((len(sources), S), pad, dtype=torch.long)  # (B, S) pieces + EOS, right-padded
        for r, ids in enumerate(sources):
            src[r, : len(ids) + 1] = torch.tensor(ids + [eos])
        src = src.to(self.device)
        was_training = self.model.training
        self.model.eval()  # the trainer validates with its live model: restore its mode after
        try:
            c = self.constraint
            if d.sampling_topk != 1:  # one draw a sentence
                if self._draws is None:
                    self.reseed(d.sampling_seed)
                assert self._draws is not None
                sample = Sample(d.sampling_topk, d.sampling_temperature, self._draws)
                drawn = greedy_search(self.model, src, d.max_len_a, d.max_len_b, c, sample)
                return [[(ids, float("nan"))] for ids in drawn]
            if d.beam == 1 and n_best == 1:
                return [[(ids, float("nan"))] for ids in greedy_search(self.model, src, d.max_len_a, d.max_len_b, c)]
            return beam_search(
                self.model, src, d.beam, d.length_penalty, d.max_len_a, d.max_len_b, n_best, d.patience, c
            )
        finally:
            self.model.train(was_training)

    def reseed(self, seed: int) -> None:
        """Start the sampling's draws afresh from `seed` (Translator does, at every call that samples:
        the same lines and seed then give the same draws, whatever came before)."""
        self._draws = torch.Generator(self.device).manual_seed(seed)

    def cross_attention(self, sources: Sequence[list[int]], targets: Sequence[list[int]]) -> list[Any]:
        """Per (source, target) pair of ids (no BOS/EOS), the last decoder layer's encoder-decoder attention
        averaged over heads while the model reads the target by teacher forcing: a (T, S) tensor, row j as
        it writes target piece j, one column per source piece (EOS's left out). None for an empty side or
        a model that reports none (an ensemble). Pairs of like length are read together, right-padded, up
        to ALIGN_TOKENS padded tokens a forward: padded keys are masked and padded queries come after the
        real ones (causal), so each row is its pair's alone. An int8 model reads one pair at a time: its
        activations are scaled per call, which would make a sentence's links depend on its neighbours."""
        out: list[Any] = [None] * len(sources)
        if not hasattr(self.model, "attention_weights"):
            return out
        c = self.config
        pairs = sorted((i for i, (s, t) in enumerate(zip(sources, targets)) if s and t), key=lambda i: len(sources[i]))
        budget = 0 if is_int8(self.model) else ALIGN_TOKENS
        groups: list[list[int]] = []
        S = T = 0  # the last group's padded widths
        for i in pairs:
            s_i, t_i = len(sources[i]) + 1, len(targets[i]) + 1
            if groups and (len(groups[-1]) + 1) * (max(S, s_i) + max(T, t_i)) <= budget:
                groups[-1].append(i)
                S, T = max(S, s_i), max(T, t_i)
            else:
                groups.append([i])
                S, T = s_i, t_i
        was_training = self.model.training
        self.model.eval()
        try:
            for group in groups:
                S, T = max(len(sources[i]) for i in group) + 1, max(len(targets[i]) for i in group) + 1
                src = torch.full((len(group), S), c.pad_id, dtype=torch.long)  # (B, S) pieces + EOS
                tgt_in = torch.full((len(group), T), c.pad_id, dtype=torch.long)  # (B, T) BOS + pieces
                for r, i in enumerate(group):
                    src[r, : len(sources[i]) + 1] = torch.tensor(sources[i] + [c.eos_id])
                    tgt_in[r, : len(targets[i]) + 1] = torch.tensor([c.bos_id] + targets[i])
                cross = self.model.attention_weights(src.to(self.device), tgt_in.to(self.device))["cross"]
                layers = [cross[k] for k in self.align_layers]  # each (B, h, T, S)
                mean = torch.stack([w.float() for w in layers]).mean((0, 2)).cpu()  # (B, T, S): heads averaged
                for r, i in enumerate(group):
                    out[i] = mean[r, : len(targets[i]), : len(sources[i])]
        finally:
            self.model.train(was_training)
        return out


class CTranslate2Engine:
    """A CTranslate2 model directory (`aiayn export --ctranslate2`, or a run's cached export) searched
    with our settings.

    What each setting means here, against aiayn.decode.search:
    - max length: floor(max_len_a * (pieces + EOS) + max_len_b) pieces before EOS, capped by the
      positions. Greedy: one call decodes to the batch's longest limit + EOS and each output is cut to
      its own limit, which is our greedy output token for token (argmax decoding is prefix-stable, and
      our forced EOS ends the same prefix). Beam: one call to the batch's longest limit; a sentence whose
      search may have run past its own limit (fewer than beam x patience hypotheses finished within it) is
      searched again alone with its own.
    - pad and BOS are never generated (suppressed, as our searches do).
    - beam search: CTranslate2's keeps the best k non-EOS of the 2k best candidates and finishes the EOS
      candidates ranked within the top k, as ours does, so both see the same finished hypotheses. Its
      length penalty is another formula (sum log p / |Y|^alpha): it is asked for every hypothesis that
      finishes until beam x patience have (the same stop as ours, `DecodeConfig.patience`), their sum of
      log-probs is recovered from its score (|Y| counts EOS in both) and they are re-ranked by ours,
      GNMT's sum log p / ((5 + |Y|) / 6)^alpha. Hypotheses that reach the limit without EOS, which our
      search ends with a forced EOS, are scored exactly (EOS included) by CTranslate2's teacher-forced
      `score_batch`.
      Reproduced, not promised identical: ours also stops as soon as no live beam can still win (which
      changes nothing); at the limit CTranslate2 ends only the live beams within its top k; near-ties can
      fall either way (float sums differ in the last bits), and CTranslate2's beam scores run slightly
      above the exact sum of log-probs (tests/test_export.py). On the quickstart model (Multi30k test,
      1,000 sentences, beam 4, patience 1) the outputs differed on 2 lines at length penalty 1 and on
      none at 0.6 (docs/benchmarks.md).
    - scores: as ours, sum log p / lp(|Y|) (greedy: nan).
    """

    name = "ctranslate2"
    # Translator hands it every sentence at once: CTranslate2 batches by tokens itself, in one call, faster
    # than one call per Translator batch.
    batches_itself = True

    def __init__(
        self,
        model_dir: str | os.PathLike,
        device: str = "cpu",
        compute_type: str = "default",
        threads: int = 0,
        replicas: int = 1,
    ) -> None:
        """`threads`: intra-op threads per replica (0: CTranslate2's default); `replicas`: batches it decodes
        at once, from as many calling threads (its inter_threads)."""
        import ctranslate2

        d = Path(model_dir)
        meta = d / "aiayn_model.json"
        if not meta.is_file():
            raise AiaynError(f"{d} has no aiayn_model.json: export it with `aiayn export --ctranslate2`")
        self.model_dir = d
        self.config = ModelConfig.from_dict(json.loads(meta.read_text()))
        self.vocabulary: list[str] = json.loads((d / "shared_vocabulary.json").read_text())
        self.ids = {p: i for i, p in enumerate(self.vocabulary)}
        self.device = torch.device(device)
        self.compute_type = compute_type
        self.translator = ctranslate2.Translator(
            str(d), device=device, compute_type=compute_type, intra_threads=threads, inter_threads=replicas
        )
        self.threads, self.replicas = threads, replicas
        c = self.config
        self._banned = [[self.vocabulary[c.pad_id]], [self.vocabulary[c.bos_id]]]

    def _sample(self, pieces: list[list[str]], limits: list[int], d: DecodeConfig) -> Hypotheses:
        """CTranslate2's own sampling: one draw a sentence (seeded by `reseed`), cut to its limit."""
        res = self.translator.translate_batch(
            pieces,
            max_batch_size=max(1, d.max_tokens),
            batch_type="tokens",
            beam_size=1,
            sampling_topk=d.sampling_topk,
            sampling_temperature=d.sampling_temperature,
            max_decoding_length=max(limits) + 1,
            max_input_length=0,
            suppress_sequences=self._banned,
        )
        return [[([self.ids[p] for p in r.hypotheses[0]][:lim], math.nan)] for r, lim in zip(res, limits)]

    def reseed(self, seed: int) -> None:
        """Start CTranslate2's draws afresh from `seed` (its random generator is the process's)."""
        import ctranslate2

        ctranslate2.set_random_seed(seed)

    def limits(self, sources: Sequence[Sequence[Any]], max_len_a: float, max_len_b: float) -> list[int]:
        """aiayn.decode.search.max_lengths: floor(a * (pieces + EOS) + b), capped by the positions."""
        cap = self.config.max_positions - 1
        return [min(max(math.floor(max_len_a * (len(s) + 1) + max_len_b), 0), cap) for s in sources]

    def search(self, sources: Sequence[list[int]], d: DecodeConfig, n_best: int) -> Hypotheses:
        pieces = [[self.vocabulary[i] for i in ids] for ids in sources]
        limits = self.limits(sources, d.max_len_a, d.max_len_b)
        if d.sampling_topk != 1:
            return self._sample(pieces, limits, d)
        if d.beam == 1 and n_best == 1:  # one call to the longest limit + EOS, each output cut to its own
            res = self.translator.translate_batch(
                pieces,
                max_batch_size=max(1, d.max_tokens),
                batch_type="tokens",
                beam_size=1,
                max_decoding_length=max(limits) + 1,
                max_input_length=0,  # Translator has cut the inputs to the positions
                suppress_sequences=self._banned,
            )
            return [[([self.ids[p] for p in r.hypotheses[0]][:lim], math.nan)] for r, lim in zip(res, limits)]
        if not math.isfinite(d.patience):
            raise AiaynError("patience inf (the exact stop) is a torch engine setting: use --engine torch")
        alpha, eos = d.length_penalty, self.config.eos_id
        want = max(n_best, math.ceil(d.beam * d.patience))  # every hypothesis that finishes, to re-rank
        out: Hypotheses = [[] for _ in sources]
        unscored: list[tuple[int, int]] = []  # (sentence, hypothesis) that reached the limit without EOS

        def call(group: list[int], limit: int) -> list[Any]:
            return self.translator.translate_batch(
                [pieces[i] for i in group],
                max_batch_size=max(1, d.max_tokens // d.beam),
                batch_type="tokens",
                beam_size=d.beam,
                num_hypotheses=want,
                patience=d.patience,
                length_penalty=alpha,
                max_decoding_length=limit,
                max_input_length=0,  # Translator has cut the inputs to the positions
                suppress_sequences=self._banned,
                return_end_token=True,
                return_scores=True,
            )

        def ended_early(r: Any, lim: int) -> bool:
            # All `want` hypotheses finished with EOS before the sentence's own limit: its search stopped
            # before that limit, so the batch's longer one changed nothing for it.
            end = self.vocabulary[eos]
            return len(r.hypotheses) == want and all(h and h[-1] == end and len(h) <= lim for h in r.hypotheses)

        live = [i for i, lim in enumerate(limits) if lim > 0]
        results: dict[int, Any] = {}
        if live:  # one call to the longest limit; a sentence it may have searched past its own, alone again
            for i, r in zip(live, call(live, max(limits[i] for i in live))):
                results[i] = r if ended_early(r, limits[i]) else call([i], limits[i])[0]
        for i, lim in enumerate(limits):
            if lim == 0:  # nothing but the forced EOS
                unscored.append((i, 0))
                out[i].append(([], math.nan))
                continue
            for h, hyp in enumerate(results[i].hypotheses):
                ids = [self.ids[p] for p in hyp]
                if ids and ids[-1] == eos:  # its score divides by (pieces + EOS)^alpha
                    out[i].append((ids[:-1], float(results[i].scores[h]) * len(ids) ** alpha))
                else:  # at the limit: our search ends it with EOS, which it scores
                    unscored.append((i, len(out[i])))
                    out[i].append((ids, math.nan))
        if unscored:
            exact = self.translator.score_batch(
                [pieces[i] for i, _ in unscored],
                [[self.vocabulary[t] for t in out[i][h][0]] for i, h in unscored],
                max_input_length=0,
            )
            for (i, h), sc in zip(unscored, exact):
                out[i][h] = (out[i][h][0], float(sum(sc.log_probs)))
        for i, hyps in enumerate(out):  # our length penalty: GNMT's, |Y| counting EOS
            ranked = sorted(((logp / ((5.0 + len(ids) + 1) / 6.0) ** alpha, ids) for ids, logp in hyps), reverse=True)
            out[i] = [(ids, score) for score, ids in ranked[:n_best]]
        return out

    def cross_attention(self, sources: Sequence[list[int]], targets: Sequence[list[int]]) -> list[Any]:
        """TorchEngine.cross_attention from CTranslate2's attention output: the export's alignment, the last
        decoder layer's heads averaged (aiayn.export), read with the target forced as the prefix (a prefix's
        attention rows are those of decoding it freely)."""
        pairs = [i for i, (s, t) in enumerate(zip(sources, targets)) if s and t]
        out: list[Any] = [None] * len(sources)
        if not pairs:
            return out
        res = self.translator.translate_batch(
            [[self.vocabulary[x] for x in sources[i]] for i in pairs],
            target_prefix=[[self.vocabulary[x] for x in targets[i]] for i in pairs],
            beam_size=1,
            max_batch_size=64,
            max_decoding_length=max(len(targets[i]) for i in pairs) + 1,
            max_input_length=0,
            return_attention=True,
        )
        for i, r in zip(pairs, res):
            att = torch.tensor(r.attention[0])  # (generated, S + 1): the prefix's rows first
            out[i] = att[: len(targets[i]), : len(sources[i])] if att.shape[0] >= len(targets[i]) else None
        return out


def ctranslate2_layout(device: str, threads: int = 0, replicas: int = 0) -> tuple[int, int]:
    """CTranslate2's (intra-op threads per replica, replicas): the given ones; on the CPU with neither
    given, one single-threaded replica per core (devices.cpu_cores), and with only replicas given, the
    cores shared among them. At the sizes aiayn trains on a CPU, a second thread speeds one batch up by
    far less than a second batch beside it gains (docs/benchmarks.md), and CTranslate2 spreads one
    call's token batches over its replicas, which share the weights. Off the CPU: one replica, and
    CTranslate2's own threads unless given."""
    if threads < 0 or replicas < 0:
        raise AiaynError(f"threads and replicas (workers) must be >= 0 (0: chosen here), got {threads} and {replicas}")
    if replicas:
        if device == "cpu" and threads == 0:
            return max(1, cpu_cores() // replicas), replicas
        return threads, replicas
    if device == "cpu" and threads == 0:
        return 1, cpu_cores()
    return threads, 1


def ctranslate2_version() -> str | None:
    """The installed ctranslate2's version, None when it is not importable."""
    if importlib.util.find_spec("ctranslate2") is None:
        return None
    try:
        return importlib.metadata.version("ctranslate2")
    except importlib.metadata.PackageNotFoundError:
        return "?"


def is_ctranslate2_export(path: str | os.PathLike) -> bool:
    return (Path(path) / "model.bin").is_file() and (Path(path) / "aiayn_model.json").is_file()


def _model_config(path: str | os.PathLike) -> ModelConfig:
    from aiayn.checkpoint import resolve_weights, weights_config

    if is_ctranslate2_export(path):
        return ModelConfig.from_dict(json.loads((Path(path) / "aiayn_model.json").read_text()))
    return weights_config(resolve_weights(path))


def ctranslate2_obstacle(
    path: str | os.PathLike,
    *,
    device: str | torch.device | None = None,
    ensemble: Sequence[str | os.PathLike] = (),
    on_cuda_too: bool = False,
    exact: bool = False,
    kind: str = "encoder-decoder",
) -> str | None:
    """Why CTranslate2 cannot (or, for `auto`, should not) decode this run, in words; None when it can.
    `exact`: the search settings ask for the exact stop (decode.patience inf). `kind`: the model kind the
    caller decodes (encoder-decoder: translation; decoder-only: generation)."""
    if ctranslate2_version() is None:
        return "ctranslate2 is not installed"
    if exact:
        return "decode.patience inf (the exact stop) is a torch engine setting"
    if ensemble:
        return f"an ensemble of {len(ensemble) + 1} models: CTranslate2 decodes one model"
    if not on_cuda_too and resolve_device(device).type != "cpu":
        return f"{resolve_device(device)} device: the CTranslate2 engine decodes on the CPU"
    c = _model_config(path)
    if c.kind != kind:
        return f"a {c.kind} model: this CTranslate2 engine decodes {kind} models"
    if c.attention_window is not None:
        return f"restricted self-attention (attention_window {c.attention_window}): CTranslate2 has none"
    if c.value_dim != c.head_dim:
        return f"d_v = {c.value_dim} unlike d_k = {c.head_dim}: CTranslate2 needs them equal"
    return None


def choose_engine(
    engine: str,
    path: str | os.PathLike,
    *,
    device: str | torch.device | None = None,
    ensemble: Sequence[str | os.PathLike] = (),
    exact: bool = False,
    kind: str = "encoder-decoder",
) -> tuple[str, str]:
    """(the engine that decodes `path`, why): `engine` is auto, torch or ctranslate2. auto: CTranslate2
    on the CPU when nothing stands in its way (`ctranslate2_obstacle`), else torch; an engine named
    that cannot decode the run is an error."""
    if engine not in ENGINES:
        raise AiaynError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if is_ctranslate2_export(path):
        if engine == "torch":
            raise AiaynError(f"{path} is a CTranslate2 export: the torch engine needs a run directory or weights file")
        if ctranslate2_version() is None:
            raise AiaynError(f"{path} is a CTranslate2 export and ctranslate2 is not installed")
        return "ctranslate2", "a CTranslate2 export"
    if engine == "torch":
        return "torch", "asked for"
    why = ctranslate2_obstacle(
        path,
        device=device,
        ensemble=ensemble,
        on_cuda_too=engine == "ctranslate2",
        exact=exact,
        kind=kind,
    )
    if engine == "ctranslate2":
        if why is not None:
            raise AiaynError(f"the ctranslate2 engine cannot decode {path}: {why}")
        return "ctranslate2", "asked for"
    if why is not None:
        return "torch", why
    where = resolve_device(device).type.upper()
    return "ctranslate2", f"{where}, ctranslate2 {ctranslate2_version()} installed"
