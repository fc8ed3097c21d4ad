"""The engines `aiayn serve` decodes with (aiayn.serve.batcher's `Engine`): a Translator on either of
aiayn.decode.engines' searches, PyTorch or CTranslate2.

Both offer `count_tokens`, `translate` (n-best with scores and target piece counts), `align` (word
links, for HTML tags) and `attention` (encoder-decoder attention of one sentence's translation, for the
web page); the PyTorch one also `stream` (continuous batching). The PyTorch one is called from the
batcher's single worker thread only; the CTranslate2 one from one worker thread per replica
(`concurrent`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from aiayn.data.tokenizer import replace_lone_surrogates
from aiayn.errors import AiaynError
from aiayn.serve.batcher import Engine, Hypothesis, SearchOptions


def _labels(pieces: Sequence[str]) -> list[str]:
    # The page shows words, not sentencepiece's U+2581 word-start marks.
    return [p.replace("\u2581", " ").strip() or p for p in pieces]


class ServeEngine(Engine):
    """What both engines do alike: a `Translator` (aiayn.decode.translator) decodes, so the answers are
    what `aiayn translate` computes with that engine, batch for batch."""

    translator: Any
    tokenizer: Any

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        limit = self.translator.max_input_len
        encoded = self.tokenizer.encode_batch([replace_lone_surrogates(t) for t in texts])
        return [min(len(ids) + 1, limit) for ids in encoded]

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
            [Hypothesis(text, score, len(self.tokenizer.encode(text)) + 1 if text else 0) for text, score in h]
            for h in nbest
        ]

    def align(self, sources: Sequence[str], targets: Sequence[str]) -> list[list[frozenset[int]] | None]:
        return self.translator.align(sources, targets)

    def best_ids(self, sentence: str, opts: SearchOptions) -> tuple[list[int], list[int]]:
        """(source ids, cut as Translator cuts; the best hypothesis' target ids) from the very search
        `translate` runs for the sentence, so the attention page draws the translation /translate and
        /v1/translate answer (issue #47: CTranslate2's own beam once drew another one)."""
        t = self.translator
        ids = self.tokenizer.encode(replace_lone_surrogates(sentence))[: t.max_input_len - 1]
        if not ids:
            return ids, []
        d = t.search_config(opts.beam, opts.length_penalty, opts.max_len_a, opts.max_len_b)
        target = list(t.searcher.search([ids], d, 1)[0][0][0])
        return ids, target


class TorchServeEngine(ServeEngine):
    """The PyTorch model through `Translator`'s torch engine (continuous batching, attention maps)."""

    name = "torch"
    workers = 1  # one batch at a time: the batcher's worker owns the model

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
            self.translator = Translator.load(run, device=device, max_tokens=max_tokens, engine="torch")
        finally:
            torch.set_num_threads(n)
        self.tokenizer = self.translator.tokenizer
        self.config = self.translator.model.config

    def stream(self) -> TorchStream | None:
        """A continuous greedy batch over the model (None for an ensemble: the batcher then decodes
        whole batches only)."""
        from aiayn.model.transformer import Transformer

        return TorchStream(self) if isinstance(self.translator.model, Transformer) else None

    def attention(self, sentence: str, opts: SearchOptions) -> dict[str, Any]:
        """Translate one sentence with the search `translate` runs (best_ids) and read its
        encoder-decoder attention by teacher forcing that output (viz.attention_map): per layer, the
        mean over heads."""
        from aiayn.decode.translator import line_breaks_to_spaces  # what Translator does to every output
        from aiayn.viz import attention_map

        ids, target = self.best_ids(sentence, opts)
        text = self.tokenizer.decode(ids)  # the source as the model reads it (cut as Translator cuts)
        amap = attention_map(self.translator.model, self.tokenizer, text, target_ids=target)
        layers = [w.mean(0).round(4).tolist() for w in amap.weights["cross"]]  # per layer (T_q, T_k)
        return {
            "translation": line_breaks_to_spaces(amap.translation),
            "source_tokens": _labels(amap.src_labels[:-1]) + ["</s>"],
            "target_tokens": _labels(amap.out_labels[:-1]) + ["</s>"],
            "layers": layers,
            "layer_names": [f"layer {i + 1} (mean of heads)" for i in range(len(layers))],
        }


class TorchStream:
    """Continuous batching of greedy searches (aiayn.decode.continuous) for the batcher: texts join
    between decoder steps, finished ones come back from `step`, each as `TorchServeEngine.translate`
    gives it for the text alone."""

    def __init__(self, engine: TorchServeEngine) -> None:
        from aiayn.decode.continuous import GreedyStream
        from aiayn.decode.translator import line_breaks_to_spaces

        self.one_line = line_breaks_to_spaces  # what Translator does to decoded text
        self.engine = engine
        self.greedy = GreedyStream(engine.translator.model)

    @property
    def rows(self) -> int:
        return self.greedy.rows

    @property
    def source_len(self) -> int:
        return self.greedy.source_len

    def add(self, texts: Sequence[str], opts: SearchOptions, keys: Sequence[Any]) -> list[tuple[Any, list[Hypothesis]]]:
        """Greedy searches (opts.beam 1, n_best 1) join the batch -> the empty texts, answered now."""
        limit = self.engine.translator.max_input_len - 1  # room for EOS, cut as Translator cuts
        eos = self.engine.config.eos_id
        encoded = self.engine.tokenizer.encode_batch([replace_lone_surrogates(t) for t in texts])
        now = [(key, [Hypothesis("", math.nan, 0)]) for key, ids in zip(keys, encoded) if not ids]
        join = [(key, ids[:limit] + [eos]) for key, ids in zip(keys, encoded) if ids]
        if join:
            self.greedy.add([ids for _, ids in join], [key for key, _ in join], opts.max_len_a, opts.max_len_b)
        return list(now)

    def step(self) -> list[tuple[Any, list[Hypothesis]]]:
        out = []
        for key, ids in self.greedy.step():
            text = self.one_line(self.engine.tokenizer.decode(ids))
            out.append((key, [Hypothesis(text, math.nan, len(ids) + 1 if text else 0)]))
        return out

    def clear(self) -> None:
        self.greedy.clear()


class CTranslate2ServeEngine(ServeEngine):
    """The CTranslate2 engine through `Translator` (aiayn.decode.engines.CTranslate2Engine): a run
    directory or weights file (its cached export, aiayn.export.cached_export) or an exported directory.
    Greedy output equals the PyTorch engine's token for token; beam search re-ranks CTranslate2's
    hypotheses with our length penalty (see CTranslate2Engine)."""

    name = "ctranslate2"
    concurrent = True  # CTranslate2 decodes a batch per replica at once, called from as many threads

    def __init__(
        self, path: str | os.PathLike, device: str = "cpu", threads: int = 0, reason: str = "", workers: int = 0
    ) -> None:
        """`workers`: batches decoded at once (CTranslate2 replicas, one per batcher worker), each on
        `threads` intra-op threads (0 and 0: aiayn.decode.engines.ctranslate2_layout chooses)."""
        from aiayn.decode.engines import ctranslate2_version
        from aiayn.decode.translator import Translator

        if ctranslate2_version() is None:
            raise AiaynError("the ctranslate2 engine needs ctranslate2: pip install ctranslate2")
        self.translator = Translator.load(path, device=device, engine="ctranslate2", threads=threads, replicas=workers)
        self.workers: int = self.translator.searcher.replicas  # 0 above: the layout Translator.load chose
        if reason:
            self.translator.engine_reason = reason
        self.tokenizer = self.translator.tokenizer
        self.config = self.translator.searcher.config

    def attention(self, sentence: str, opts: SearchOptions) -> dict[str, Any]:
        """CTranslate2's attention output (its alignment: the last layer's heads averaged) for the
        translation `translate` gives (best_ids: our search settings and re-ranking), read by forcing
        that output as the target prefix: a prefix's attention rows are those of decoding it freely."""
        from aiayn.decode.translator import line_breaks_to_spaces  # what Translator does to every output

        searcher = self.translator.searcher
        ids, target = self.best_ids(sentence, opts)
        src = [searcher.vocabulary[i] for i in ids]
        pieces = [searcher.vocabulary[i] for i in target]
        r = searcher.translator.translate_batch(
            [src],
            target_prefix=[pieces],
            beam_size=1,
            max_decoding_length=len(pieces) + 1,
            max_input_length=0,
            return_attention=True,
        )[0]
        att = [[round(float(x), 4) for x in row] for row in r.attention[0][: len(pieces) + 1]]
        # CTranslate2 reports a row per generated piece, with or without the EOS step by version.
        tgt = (_labels(pieces) + ["</s>"])[: len(att)]
        return {
            "translation": line_breaks_to_spaces(self.tokenizer.decode(target)),
            "source_tokens": _labels(src + ["</s>"]),
            "target_tokens": tgt,
            "layers": [att],
            "layer_names": ["CTranslate2 alignment (last layer)"],
        }


def load_engine(
    kind: str, run: str | os.PathLike, device: str | None = None, threads: int = 0, workers: int = 0
) -> ServeEngine:
    """The engine serving the run (or exported directory) at `run`: `kind` is an engine, auto, torch
    or ctranslate2 (aiayn.decode.engines.choose_engine); its `translator.engine_reason` says why.

    `workers`: batches decoded at once, each by a CTranslate2 replica on `threads` intra-op threads
    (0 and 0: aiayn.decode.engines.ctranslate2_layout chooses, one single-threaded replica per core on
    the CPU). The torch engine decodes one batch at a time."""
    from aiayn.decode.engines import choose_engine

    engine, reason = choose_engine(kind, run, device=device)
    if workers < 0 or threads < 0:
        raise AiaynError(f"--workers and --threads must be >= 0 (0: chosen for you), got {workers} and {threads}")
    if engine == "torch":
        if workers > 1:
            raise AiaynError("the torch engine decodes one batch at a time: --workers 1 (or --engine ctranslate2)")
        served = TorchServeEngine(run, device=device, threads=threads)
        served.translator.engine_reason = reason
        return served
    where = device if device not in (None, "auto") else "cpu"
    return CTranslate2ServeEngine(run, device=where, threads=threads, reason=reason, workers=workers)
