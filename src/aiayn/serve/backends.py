"""What `aiayn serve` decodes with: the PyTorch model (Translator) or a CTranslate2 export.

Both offer `count_tokens`, `translate` (n-best with scores and target piece counts) and
`attention` (encoder-decoder attention of one sentence's translation, for the web page).
They are called from the batcher's single worker thread only.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiayn.errors import AiaynError
from aiayn.serve.batcher import Hypothesis, SearchOptions


def _labels(pieces: Sequence[str]) -> list[str]:
    # The page shows words, not sentencepiece's U+2581 word-start marks.
    return [p.replace("\u2581", " ").strip() or p for p in pieces]


class TorchBackend:
    """The PyTorch model through `Translator`: what `aiayn translate` computes, batch for batch."""

    name = "torch"

    def __init__(
        self, run: str | os.PathLike, device: str | None = None, max_tokens: int | None = None, threads: int = 0
    ) -> None:
        """`max_tokens` None: the run's decode.max_tokens (Translator.load reads the run's DecodeConfig)."""
        import torch

        from aiayn.decode.translator import Translator

        n = threads if threads > 0 else torch.get_num_threads()  # the batcher thread's intra-op pool size
        # Loaded on one intra-op thread. A thread that has run a parallel torch op keeps an OpenMP thread
        # pool for as long as it lives, and with two pools on the same cores libgomp stops spin-waiting:
        # every small op of the batcher's worker thread would then pay a thread wake-up (docs/serving.md).
        # So only the worker runs parallel ops.
        torch.set_num_threads(1)
        try:
            self.translator = Translator.load(run, device=device, max_tokens=max_tokens)
        finally:
            torch.set_num_threads(n)
        self.tokenizer = self.translator.tokenizer
        self.config = self.translator.model.config

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        limit = self.translator.max_input_len
        return [min(len(ids) + 1, limit) for ids in self.tokenizer.encode_batch([_clean(t) for t in texts])]

    def translate(self, texts: Sequence[str], opts: SearchOptions) -> list[list[Hypothesis]]:
        nbest = self.translator.translate_scored(
            texts,
            beam=opts.beam,
            length_penalty=opts.length_penalty,
            max_len_a=opts.max_len_a,
            max_len_b=opts.max_len_b,
            n_best=opts.n_best,
        )
        # Target piece counts (for tokens/s) by re-encoding: Translator returns text, and the
        # pieces of decoded text are the generated pieces up to rare normalisation differences.
        return [
            [(text, score, len(self.tokenizer.encode(text)) + 1 if text else 0) for text, score in h] for h in nbest
        ]

    def stream(self) -> TorchStream | None:
        """A continuous greedy batch over the model (None for an ensemble: the batcher then decodes
        whole batches only)."""
        from aiayn.model.transformer import Transformer

        return TorchStream(self) if isinstance(self.translator.model, Transformer) else None

    def attention(self, sentence: str, opts: SearchOptions) -> dict[str, Any]:
        """Translate one sentence (opts' search) and read its encoder-decoder attention by teacher
        forcing the result (viz.attention_map): per layer, the mean over heads."""
        import torch

        from aiayn.decode.search import beam_search, greedy_search
        from aiayn.viz import attention_map

        model, tok, c = self.translator.model, self.tokenizer, self.config
        text = _clean(sentence)
        ids = tok.encode(text)
        if len(ids) > self.translator.max_input_len - 1:  # cut as Translator cuts
            ids = ids[: self.translator.max_input_len - 1]
            text = tok.decode(ids)
        src = torch.tensor([ids + [c.eos_id]], device=self.translator.device)  # (1, S)
        model.eval()
        if opts.beam == 1:
            target = greedy_search(model, src, opts.max_len_a, opts.max_len_b)[0]
        else:
            target = beam_search(model, src, opts.beam, opts.length_penalty, opts.max_len_a, opts.max_len_b)[0][0][0]
        amap = attention_map(model, tok, text, target_ids=target)
        layers = [w.mean(0).round(4).tolist() for w in amap.weights["cross"]]  # per layer (T_q, T_k)
        return {
            "translation": amap.translation,
            "source_tokens": _labels(amap.src_labels[:-1]) + ["</s>"],
            "target_tokens": _labels(amap.out_labels[:-1]) + ["</s>"],
            "layers": layers,
            "layer_names": [f"layer {i + 1} (mean of heads)" for i in range(len(layers))],
        }

    def close(self) -> None:
        pass


class TorchStream:
    """Continuous batching of greedy searches (aiayn.decode.continuous) for the batcher: texts join
    between decoder steps, finished ones come back from `step`, each as `TorchBackend.translate`
    gives it for the text alone."""

    def __init__(self, backend: TorchBackend) -> None:
        from aiayn.decode.continuous import GreedyStream
        from aiayn.decode.translator import _one_line

        self.one_line = _one_line  # what Translator does to decoded text
        self.backend = backend
        self.engine = GreedyStream(backend.translator.model)

    @property
    def rows(self) -> int:
        return self.engine.rows

    @property
    def source_len(self) -> int:
        return self.engine.source_len

    def add(self, texts: Sequence[str], opts: SearchOptions, keys: Sequence[Any]) -> list[tuple[Any, list[Hypothesis]]]:
        """Greedy searches (opts.beam 1, n_best 1) join the batch -> the empty texts, answered now."""
        limit = self.backend.translator.max_input_len - 1  # room for EOS, cut as Translator cuts
        eos = self.backend.config.eos_id
        encoded = self.backend.tokenizer.encode_batch([_clean(t) for t in texts])
        now = [(key, [("", math.nan, 0)]) for key, ids in zip(keys, encoded) if not ids]
        join = [(key, ids[:limit] + [eos]) for key, ids in zip(keys, encoded) if ids]
        if join:
            self.engine.add([ids for _, ids in join], [key for key, _ in join], opts.max_len_a, opts.max_len_b)
        return list(now)

    def step(self) -> list[tuple[Any, list[Hypothesis]]]:
        out = []
        for key, ids in self.engine.step():
            text = self.one_line(self.backend.tokenizer.decode(ids))
            out.append((key, [(text, math.nan, len(ids) + 1 if text else 0)]))
        return out

    def clear(self) -> None:
        self.engine.clear()


class CTranslate2Backend:
    """A CTranslate2 model directory (from `aiayn export --ctranslate2`), or a run exported on the fly.

    Greedy output equals the PyTorch backend's token for token: CTranslate2 gets one batch-wide
    decoding limit, so it decodes up to the longest per-sentence limit + EOS and each hypothesis is
    cut to its own limit, which is what our greedy search's forced EOS gives (argmax decoding is
    prefix-stable). Beam search agrees on well-trained models but is not promised identical.
    """

    name = "ctranslate2"

    def __init__(self, path: str | os.PathLike, device: str = "cpu", threads: int = 0) -> None:
        try:
            import ctranslate2
        except ImportError:
            raise AiaynError("--backend ctranslate2 needs ctranslate2: pip install 'aiayn[serve]'") from None
        from aiayn.data.tokenizer import Tokenizer

        path = Path(path)
        self._tmp: str | None = None
        if not (path / "model.bin").is_file():  # a run directory or weights file: export it now
            from aiayn.export import export_ctranslate2

            self._tmp = tempfile.mkdtemp(prefix="aiayn-ct2-")
            path = export_ctranslate2(path, Path(self._tmp) / "model")
        if not (path / "spm.model").is_file():
            raise AiaynError(f"no spm.model in {path}: export with `aiayn export --ctranslate2`")
        self.tokenizer = Tokenizer(path / "spm.model")
        self.translator = ctranslate2.Translator(str(path), device=device, intra_threads=threads)
        import json

        cfg = json.loads((path / "config.json").read_text())
        self.eos = cfg.get("eos_token", "</s>")
        # The same input/output limits as the PyTorch model: its positions (export writes them).
        meta = path / "aiayn_model.json"
        self.max_input_len = int(json.loads(meta.read_text())["max_positions"]) if meta.is_file() else 1024

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        ids = self.tokenizer.encode_batch([_clean(t) for t in texts])
        return [min(len(i) + 1, self.max_input_len) for i in ids]

    def _pieces(self, texts: Sequence[str]) -> list[list[str]]:
        sp = self.tokenizer.sp
        return [
            [sp.id_to_piece(i) for i in ids[: self.max_input_len - 1]]
            for ids in self.tokenizer.encode_batch([_clean(t) for t in texts])
        ]

    def _limits(self, sources: list[list[str]], opts: SearchOptions) -> list[int]:
        # aiayn.decode.search.max_lengths: floor(a * (pieces + EOS) + b), capped by the positions.
        return [
            min(max(int(math.floor(opts.max_len_a * (len(s) + 1) + opts.max_len_b)), 0), self.max_input_len - 1)
            for s in sources
        ]

    def translate(self, texts: Sequence[str], opts: SearchOptions) -> list[list[Hypothesis]]:
        sources = self._pieces(texts)
        out: list[list[Hypothesis]] = [[("", float("nan"), 0)] for _ in texts]
        idx = [i for i, s in enumerate(sources) if s]
        if not idx:
            return out
        limits = self._limits([sources[i] for i in idx], opts)
        res = self.translator.translate_batch(
            [sources[i] for i in idx],
            beam_size=opts.beam,
            length_penalty=opts.length_penalty,
            num_hypotheses=opts.n_best,
            max_decoding_length=max(limits) + 1,
            return_scores=opts.beam > 1,
        )
        for i, lim, r in zip(idx, limits, res):
            hyps = []
            for h, pieces in enumerate(r.hypotheses):
                pieces = [p for p in pieces if p != self.eos][:lim]
                score = float(r.scores[h]) if opts.beam > 1 and r.scores else float("nan")
                text = self.tokenizer.sp.decode_pieces(pieces).replace("\n", " ").replace("\r", " ")
                hyps.append((text, score, len(pieces) + 1))
            out[i] = hyps
        return out

    def attention(self, sentence: str, opts: SearchOptions) -> dict[str, Any]:
        """CTranslate2's own attention output (its alignment: averaged heads of the last layer)."""
        src = self._pieces([sentence])[0]
        lim = self._limits([src], opts)[0]
        r = self.translator.translate_batch(
            [src],
            beam_size=opts.beam,
            length_penalty=opts.length_penalty,
            max_decoding_length=lim + 1,
            return_attention=True,
        )[0]
        pieces = [p for p in r.hypotheses[0] if p != self.eos][:lim]
        att = [[round(float(x), 4) for x in row] for row in r.attention[0][: len(pieces) + 1]]
        # CTranslate2 reports a row per generated piece, with or without the EOS step by version.
        tgt = (_labels(pieces) + ["</s>"])[: len(att)]
        return {
            "translation": self.tokenizer.sp.decode_pieces(pieces),
            "source_tokens": _labels(src + ["</s>"]),
            "target_tokens": tgt,
            "layers": [att],
            "layer_names": ["CTranslate2 alignment (last layer)"],
        }

    def close(self) -> None:
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)


def _clean(line: str) -> str:
    # As Translator does: lone surrogates crash sentencepiece.
    return str(line).encode("utf-8", "replace").decode("utf-8")


def load_backend(kind: str, run: str | os.PathLike, device: str | None = None, threads: int = 0) -> Any:
    """`torch` or `ctranslate2` serving the run (or exported directory) at `run`."""
    if kind == "torch":
        return TorchBackend(run, device=device, threads=threads)
    if kind == "ctranslate2":
        return CTranslate2Backend(run, device=device if device not in (None, "auto") else "cpu", threads=threads)
    raise AiaynError(f"--backend must be torch or ctranslate2, not {kind!r}")
