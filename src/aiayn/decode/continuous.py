"""Continuous (iteration-level) greedy decoding, as in Orca, vLLM and TGI: sentences join and leave a
running decoder batch at step boundaries instead of waiting for a whole batch to finish.

    stream = GreedyStream(model)
    stream.add([[5, 9, 2], [7, 2]], keys=["a", "b"])   # sources (pieces + EOS), any time between steps
    while stream.rows:
        for key, ids in stream.step():                 # one decoder step for every running row
            ...                                        # sentences that produced EOS (or hit their limit)

Each row's result is what `greedy_search` gives for that source decoded alone: the same per-row
maximum length (`max_lengths`), forced EOS, pad/BOS never generated and the same argmax; a row
only sees its own keys (`DecoderCache.start`, the layout is explained in aiayn.model.cache) and its
own source (padding masked), at its own positions. As with any padded batch, the float sums run
over different lengths, so logits may differ from the lone decoding in the last bits; the argmax
does not change unless two logits tie to that precision. Transformer only (not an ensemble).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from aiayn.config import DecodeConfig
from aiayn.decode.search import argmax, max_lengths
from aiayn.model.cache import DecoderCache
from aiayn.model.masks import padding_mask
from aiayn.model.transformer import Transformer


class GreedyStream:
    """A running greedy decoder batch over `model`; `add` sentences, `step` until `rows` is 0."""

    def __init__(self, model: Transformer) -> None:
        self.model = model.eval()
        self._reset()

    def _reset(self) -> None:
        self.cache: DecoderCache | None = None
        self.keys: list[Hashable] = []  # per row: the caller's key
        self.tokens: list[list[int]] = []  # per row: the ids generated so far
        self.src_lens: list[int] = []  # per row: source length
        self.max_len = torch.empty(0, dtype=torch.long)  # (rows,) tokens before the forced EOS
        self.done = torch.empty(0, dtype=torch.long)  # (rows,) tokens generated so far
        self.ids = torch.empty(0, 1, dtype=torch.long)  # (rows, 1) the next decoder input
        # Rows of `cache` still running (None: all): the cache drops the others at the next `add` or
        # `step`, in the same copy as the rows joining then (DecoderCache.rebatched).
        self.kept: Tensor | None = None

    @property
    def rows(self) -> int:
        return len(self.keys)

    @property
    def source_len(self) -> int:
        """The longest source (EOS included) of the running rows: their padded source length."""
        return max(self.src_lens, default=0)

    def compact(self, fresh: DecoderCache | None = None) -> None:
        """Drop the finished rows from the cache (and append `fresh`'s)."""
        if self.cache is None or (self.kept is None and fresh is None):
            self.cache = self.cache or fresh
            return
        rows = self.kept if self.kept is not None else torch.arange(self.cache.sources, device=self.ids.device)
        self.cache, self.kept = self.cache.rebatched(rows, fresh), None

    @torch.inference_mode()
    def add(
        self,
        sources: Sequence[Sequence[int]],
        keys: Sequence[Hashable],
        max_len_a: float = DecodeConfig.max_len_a,
        max_len_b: float = DecodeConfig.max_len_b,
    ) -> None:
        """Sources (non-empty id lists, EOS included) join the batch before the next step."""
        if not sources:
            return
        cfg, dev = self.model.config, next(self.model.parameters()).device
        if self.model.training:  # Translator restores the mode it found; `attention` sets eval
            self.model.eval()
        src = torch.full((len(sources), max(map(len, sources))), cfg.pad_id, dtype=torch.long)
        for r, ids in enumerate(sources):
            src[r, : len(ids)] = torch.tensor(list(ids))
        src = src.to(dev)
        max_len = max_lengths(self.model, src, max_len_a, max_len_b)  # (n,)
        memory = self.model.encode(src)
        fresh = self.model.init_cache(memory, padding_mask(src, cfg.pad_id), capacity=int(max_len.max()) + 1)
        self.compact(fresh)
        self.keys += list(keys)
        self.tokens += [[] for _ in sources]
        self.src_lens += [len(ids) for ids in sources]
        self.max_len = torch.cat([self.max_len.to(dev), max_len])
        self.done = torch.cat([self.done.to(dev), torch.zeros(len(sources), dtype=torch.long, device=dev)])
        bos = torch.full((len(sources), 1), cfg.bos_id, dtype=torch.long, device=dev)
        self.ids = torch.cat([self.ids.to(dev), bos])

    @torch.inference_mode()
    def step(self) -> list[tuple[Hashable, list[int]]]:
        """One decoder step for every row -> (key, ids without BOS/EOS) of the rows that finished,
        which leave the batch."""
        if not self.keys:
            return []
        self.compact()
        assert self.cache is not None
        if self.model.training:
            self.model.eval()
        cfg = self.model.config
        logits, self.cache = self.model.step(self.ids, self.cache)  # (n, 1, V)
        logits = logits[:, -1].float()
        logits[:, [cfg.pad_id, cfg.bos_id]] = float("-inf")  # never generated
        nxt = argmax(logits)  # (n,)
        nxt = torch.where(self.max_len <= self.done, torch.full_like(nxt, cfg.eos_id), nxt)  # forced end
        self.done = self.done + 1
        finished: list[tuple[Hashable, list[int]]] = []
        running: list[int] = []
        for r, tok in enumerate(nxt.tolist()):
            if tok == cfg.eos_id:
                finished.append((self.keys[r], self.tokens[r]))
            else:
                self.tokens[r].append(tok)
                running.append(r)
        if not running:
            self._reset()
        elif finished:
            keep = torch.tensor(running, device=nxt.device)
            self.kept = keep
            self.keys = [self.keys[r] for r in running]
            self.tokens = [self.tokens[r] for r in running]
            self.src_lens = [self.src_lens[r] for r in running]
            self.max_len, self.done, nxt = self.max_len[keep], self.done[keep], nxt[keep]
        if running:
            self.ids = nxt[:, None]
        return finished

    def clear(self) -> list[Hashable]:
        """Drop every row (after a failure) -> their keys."""
        keys = self.keys
        self._reset()
        return keys
