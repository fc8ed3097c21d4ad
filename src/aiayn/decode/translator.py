"""Text in, text out: load a model once and translate lists of lines (paper §6.1 settings by default).

    from aiayn import Translator
    t = Translator.load("run/")                  # run dir or weights file; spm.model found alongside
    t = Translator.load("hf://user/model@v1")    # a model on the Hugging Face Hub (aiayn push), at a revision
    t = Translator.load("a/", ensemble=["b/"], average_last=10)   # two runs' averages, decoded together
    t.translate(["Ein Hund rennt."])             # -> ["A dog runs."], the run's decode settings
    t.translate(["Ein Hund rennt."], beam=1)     # one setting overridden for this call (greedy)
    t = Translator.load("run/", int8=True)       # CPU, int8 weights (CTranslate2's; torch: aiayn.model.int8)
    t = Translator.load("run/", engine="torch")  # our PyTorch search, not CTranslate2 (engine="auto")
    t.engine, t.engine_reason                    # -> "ctranslate2", "CPU, ctranslate2 4.8.5 installed"
    t.weights                                    # -> "run/best.safetensors (step 3000; the best by validation)"

Two engines search (aiayn.decode.engines): `auto` (the default) decodes with CTranslate2 on the CPU
when it is installed and runs the model, from the run's cached export (aiayn.export.cached_export),
and with our PyTorch search otherwise (a GPU, restricted attention, an ensemble);
`engine_reason` says why, in words. The engines agree token for token on greedy search; beam search
is CTranslate2's, re-ranked with our length penalty (see CTranslate2Engine).

Search settings come from one `DecodeConfig` held by the Translator (`t.decode`): the run's config.yaml
`decode` section with `load`, else DecodeConfig()'s defaults (paper §6.1); a keyword given to
`translate` overrides one field for that call.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from aiayn.checkpoint import describe_weights, find_in_run
from aiayn.config import Config, DecodeConfig
from aiayn.data.tokenizer import Tokenizer, replace_lone_surrogates
from aiayn.decode.align import word_links
from aiayn.decode.engines import (
    CTranslate2Engine,
    SearchEngine,
    TorchEngine,
    choose_engine,
    ctranslate2_layout,
    is_ctranslate2_export,
)
from aiayn.decode.ensemble import load_members
from aiayn.decode.search import Constraint
from aiayn.devices import resolve_device
from aiayn.errors import AiaynError
from aiayn.hub import resolve_run
from aiayn.model.int8 import quantize_int8


def run_decode_config(path: str | os.PathLike) -> DecodeConfig:
    """The `decode` section of the config.yaml of the run at `path` (a run directory or a weights file
    in one, or hf://user/model), else DecodeConfig()'s defaults."""
    found = find_in_run(resolve_run(path), "config.yaml")
    return Config.load(str(found)).decode if found else DecodeConfig()


def describe_members(paths: Sequence[str | os.PathLike], average_last: int = 0) -> str:
    """What `Translator.load` decodes with, in one line: each member's weights file and why that one
    (a run directory's default, aiayn.checkpoint.which_weights), an average, or an export."""

    def one(p: str | os.PathLike) -> str:
        if is_ctranslate2_export(p):
            return f"{p} (a CTranslate2 export)"
        if average_last:
            return f"the average of the last {average_last} checkpoints of {p}"
        return describe_weights(p)

    return " + ".join(one(p) for p in paths)


class Translator:
    """A model + its tokenizer + the search settings it decodes with (`decode`; its `max_tokens` bounds
    a batch: padded source tokens x beam). `max_tokens`, when given, overrides `decode.max_tokens`.
    `model`: a PyTorch model (or Ensemble), decoded by our search, or a `SearchEngine`.
    `engine` / `engine_reason`: which engine decodes and why, in words (nothing is printed); `weights`:
    which weights, in words (`describe_members`).
    `constraint`: which tokens each hypothesis may write next (aiayn.decode.search.Constraint; torch)."""

    def __init__(
        self,
        model: torch.nn.Module | SearchEngine,
        tokenizer: Tokenizer,
        device: str | torch.device | None = None,
        max_tokens: int | None = None,
        max_input_len: int | None = None,
        decode: DecodeConfig | None = None,
        engine_reason: str = "",
        constraint: Constraint | None = None,
        weights: str = "",
    ) -> None:
        if isinstance(model, torch.nn.Module):
            self.searcher: SearchEngine = TorchEngine(model, device, constraint)
        elif constraint is not None:
            raise AiaynError(f"the {model.name} engine cannot constrain its search (the torch engine can)")
        else:
            self.searcher = model
        self.engine: str = self.searcher.name
        self.engine_reason = engine_reason or "a model given to Translator"
        self.weights = weights or "a model given to Translator"
        self.device = self.searcher.device
        self.tokenizer = tokenizer
        config = self.searcher.config
        if tokenizer.vocab_size > config.vocab_size:
            raise AiaynError(
                f"tokenizer has {tokenizer.vocab_size} pieces but the model only "
                f"{config.vocab_size}: wrong spm.model for this checkpoint?"
            )
        decode = decode or DecodeConfig()
        self.decode = decode if max_tokens is None else dataclasses.replace(decode, max_tokens=max_tokens)
        # Source pieces + EOS must fit the model's positions.
        limit = config.max_positions
        self.max_input_len = min(max_input_len or limit, limit)

    @property
    def model(self) -> Any:
        """The PyTorch model the torch engine decodes (attention maps, continuous batching need it)."""
        if not isinstance(self.searcher, TorchEngine):
            raise AiaynError(
                f"this Translator decodes with {self.engine}, which holds no PyTorch model: load it with engine='torch'"
            )
        return self.searcher.model

    @property
    def max_tokens(self) -> int:
        return self.decode.max_tokens

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        device: str | torch.device | None = None,
        *,
        ensemble: Sequence[str | os.PathLike] = (),
        average_last: int = 0,
        int8: bool = False,
        decode: DecodeConfig | None = None,
        engine: str = "auto",
        threads: int = 0,
        replicas: int = 0,
        **kw,
    ) -> Translator:
        """From a run directory (its default weights: the file its weights.json names, else
        best.safetensors, else the newest checkpoint; aiayn.checkpoint.which_weights), a weights file, a
        CTranslate2 export (`aiayn export --ctranslate2`), or a model on the Hugging Face Hub,
        `hf://user/model[@REVISION]` (aiayn.hub.resolve_run: downloaded once into the HF cache).
        `decode`: the search settings; None reads the run's config.yaml `decode` section (DecodeConfig()
        when there is none). `ensemble`: more runs/weights decoded together with `path`
        (decode.ensemble); `average_last` K: each run's last K step checkpoints averaged (§6.1) instead
        of its default weights. `int8`: decode with int8 weights, one scale per output row
        (aiayn.model.int8, or CTranslate2's int8); CPU only, so device=None means the CPU then. `engine`: auto,
        torch or ctranslate2
        (aiayn.decode.engines.choose_engine). `threads`, `replicas`: CTranslate2's intra-op threads per
        replica and batches decoded at once (aiayn.decode.engines.ctranslate2_layout; 0: chosen there)."""
        path = resolve_run(path)
        ensemble = [resolve_run(p) for p in ensemble]
        if int8 and device is None:
            device = "cpu"
        if decode is None:
            decode = run_decode_config(path)
        exact = not math.isfinite(decode.patience)
        weights = describe_members([path, *ensemble], average_last)
        name, reason = choose_engine(engine, path, device=device, ensemble=ensemble, exact=exact)
        if name == "ctranslate2":
            pushed = Path(path) / "ctranslate2"  # from the Hub: the export `aiayn push --ctranslate2` made
            if is_ctranslate2_export(path):
                model_dir = Path(path)
            elif is_ctranslate2_export(pushed) and not average_last and not int8:
                model_dir = pushed
            else:
                from aiayn.export import cached_export

                model_dir, _ = cached_export(path, average_last=average_last, quantization="int8" if int8 else None)
            where = "cpu" if device is None or str(device) == "auto" else str(device)
            threads, replicas = ctranslate2_layout(where, threads, replicas)
            searcher = CTranslate2Engine(
                model_dir, where, compute_type="int8" if int8 else "default", threads=threads, replicas=replicas
            )
            spm = model_dir / "spm.model"
            return cls(searcher, Tokenizer(spm), decode=decode, engine_reason=reason, weights=weights, **kw)
        dev = resolve_device(device)
        model, spm = load_members([path, *ensemble], dev, average_last)
        if int8:
            model = quantize_int8(model)  # after averaging/ensembling: each member's final weights
        return cls(model, Tokenizer(spm), dev, decode=decode, engine_reason=reason, weights=weights, **kw)

    def search_config(
        self,
        beam: int | None = None,
        length_penalty: float | None = None,
        max_len_a: float | None = None,
        max_len_b: float | None = None,
        **more: Any,
    ) -> DecodeConfig:
        """`decode` with the given (not None) settings replacing its own (`more`: other DecodeConfig
        fields, such as sampling_topk)."""
        given: dict[str, Any] = dict(beam=beam, length_penalty=length_penalty, max_len_a=max_len_a, max_len_b=max_len_b)
        return dataclasses.replace(self.decode, **{k: v for k, v in {**given, **more}.items() if v is not None})

    def translate(
        self,
        lines: Sequence[str],
        beam: int | None = None,
        length_penalty: float | None = None,
        max_len_a: float | None = None,
        max_len_b: float | None = None,
        n_best: int = 1,
        **more: Any,
    ) -> list:
        """Translate lines, input order kept; empty line -> "". beam=1 is greedy search. A setting left
        None is the Translator's own (`decode`); `more`: other DecodeConfig fields (sampling_topk,
        sampling_seed, ...).

        Returns list[str], or with n_best > 1 a list of n-best lists of strings.
        """
        nbest = self.translate_scored(lines, beam, length_penalty, max_len_a, max_len_b, n_best, **more)
        if n_best == 1:
            return [h[0][0] if h else "" for h in nbest]
        return [[text for text, _ in h] for h in nbest]

    def translate_scored(
        self,
        lines: Sequence[str],
        beam: int | None = None,
        length_penalty: float | None = None,
        max_len_a: float | None = None,
        max_len_b: float | None = None,
        n_best: int = 1,
        first_line: int = 1,
        **more: Any,
    ) -> list[list[tuple[str, float]]]:
        """Like `translate`, with each hypothesis' score (sum log p / lp; greedy and sampling: nan).
        `first_line`: the number of lines[0] in the user's input, for warnings (a stream is translated in
        chunks)."""
        d = self.search_config(beam, length_penalty, max_len_a, max_len_b, **more)
        if d.sampling_topk != 1 and hasattr(self.searcher, "reseed"):  # each call's draws from its own seed
            self.searcher.reseed(d.sampling_seed)
        texts = [replace_lone_surrogates(line) for line in lines]
        encoded = self.tokenizer.encode_batch(texts) if texts else []
        limit = self.max_input_len - 1  # room for EOS
        for i, ids in enumerate(encoded):
            if len(ids) > limit:
                print(
                    f"aiayn: warning: input line {first_line + i} has {len(ids)} pieces; truncated to {limit}",
                    file=sys.stderr,
                    flush=True,
                )
                encoded[i] = ids[:limit]
        results: list[list[tuple[str, float]]] = [[("", float("nan"))] for _ in texts]
        order = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: len(encoded[i]))
        if getattr(self.searcher, "batches_itself", False):  # CTranslate2: one call, its own token batches
            if order:
                self._run(order, encoded, results, d, n_best)
            return results
        batch: list[int] = []
        for i in order:  # ascending length: the newest line is the longest of its batch
            if batch and (len(batch) + 1) * (len(encoded[i]) + 1) * d.beam > d.max_tokens:
                self._run(batch, encoded, results, d, n_best)
                batch = []
            batch.append(i)
        if batch:
            self._run(batch, encoded, results, d, n_best)
        return results

    def align(self, sources: Sequence[str], targets: Sequence[str]) -> list[list[frozenset[int]] | None]:
        """Each source sentence's words linked to its translation's (aiayn.decode.align: from the model's
        encoder-decoder attention as it reads the translation): per source word (str.split), the target
        words it maps to; None where none can be read (an ensemble, an input past the positions, an empty
        side). Each word is encoded on its own, so every piece's word is known exactly."""
        texts = [replace_lone_surrogates(x).split() for x in [*sources, *targets]]
        flat = [w for words in texts for w in words]
        encoded = iter(self.tokenizer.encode_batch(flat) if flat else [])
        ids: list[list[int]] = []
        owner: list[list[int]] = []  # per text, the word of each of its pieces
        for words in texts:
            pieces = [next(encoded) for _ in words]
            ids.append([i for p in pieces for i in p])
            owner.append([k for k, p in enumerate(pieces) for _ in p])
        n = len(sources)
        fits = [i for i in range(n) if len(ids[i]) < self.max_input_len and len(ids[n + i]) < self.max_input_len]
        out: list[list[frozenset[int]] | None] = [None] * n
        attention = self.searcher.cross_attention([ids[i] for i in fits], [ids[n + i] for i in fits]) if fits else []
        for i, att in zip(fits, attention):
            if att is not None:
                out[i] = word_links(owner[i], len(texts[i]), owner[n + i], att)
        return out

    def _run(
        self,
        batch: list[int],
        encoded: list[list[int]],
        results: list[list[tuple[str, float]]],
        d: DecodeConfig,
        n_best: int,
    ) -> None:
        hyps = self.searcher.search([encoded[i] for i in batch], d, n_best)
        for i, nbest in zip(batch, hyps):
            results[i] = [(line_breaks_to_spaces(self.tokenizer.decode(ids)), score) for ids, score in nbest]


def line_breaks_to_spaces(text: str) -> str:
    """Decoded text with its line breaks as spaces: byte pieces can spell them, and one input line must
    give one output line (what `Translator` does to every translation; `aiayn serve` too)."""
    return text.replace("\r", " ").replace("\n", " ") if ("\n" in text or "\r" in text) else text
