"""Continuous (iteration-level) greedy decoding, as in Orca, vLLM and TGI: sentences join and leave a
running decoder batch at step boundaries instead of waiting for a whole batch to finish.

    stream = GreedyStream(model)
    stream.add([[5, 9, 2], [7, 2]], keys=["a", "b"])   # sources (pieces + EOS), any time between steps
    while stream.rows:
        for key, ids in stream.step():                 # one decoder step for every running row
            ...                                        # sentences that produced EOS (or hit their limit)

Each row's result is what `greedy_search` gives for that source decoded alone: the same per-row
maximum length (`max_lengths`) and the same choice of token (`greedy_next`: forced EOS, pad/BOS
never generated, the argmax); a row
only sees its own keys (`DecoderCache.start`, the layout is explained in aiayn.model.cache) and its
own source (padding masked), at its own positions. As with any padded batch, the float sums run
over different lengths, so logits may differ from the lone decoding in the last bits; the argmax
does not change unless two logits tie to that precision. Transformer only (not an ensemble).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from aiayn.config import DecodeConfig
from aiayn.decode.search import greedy_next, max_lengths
from aiayn.model.cache import DecoderCache
from aiayn.model.masks import padding_mask
from aiayn.model.transformer import Transformer


class GreedyStream:
    """A running greedy decoder batch over `model`; `add` sentences, `step` until `rows` is 0.

    The decoder batch has slots: a finished sentence frees its slot, which a joining sentence takes
    over in place (`DecoderCache.refill`), so the running rows are not copied at every step where
    sentences end and begin. Free slots are still computed (their outputs ignored, their position
    kept at 0); `compact` drops them, and the buffer columns no running row reads any more, in one
    copy (`DecoderCache.rebatched`) when they make up a quarter of the slots or half the columns.
    """

    def __init__(self, model: Transformer) -> None:
        self.model = model.eval()
        self._reset()

    def _reset(self) -> None:
        self.cache: DecoderCache | None = None
        self.keys: list[Hashable | None] = []  # per slot: the caller's key; None: free
        self.tokens: list[list[int]] = []  # per slot: the ids generated so far
        self.src_lens: list[int] = []  # per slot: source length (0: free)
        self.max_len = torch.empty(0, dtype=torch.long)  # (slots,) tokens before the forced EOS
        self.done = torch.empty(0, dtype=torch.long)  # (slots,) tokens generated so far
        self.ids = torch.empty(0, 1, dtype=torch.long)  # (slots, 1) the next decoder input
        self.live = 0

    @property
    def rows(self) -> int:
        """Sentences decoding now."""
        return self.live

    @property
    def source_len(self) -> int:
        """The longest source (EOS included) of the running rows."""
        return max(self.src_lens, default=0)

    def _take(self, idx: list[int]) -> None:  # per-slot state of slots `idx`, in that order
        keep = torch.tensor(idx, dtype=torch.long, device=self.ids.device)
        self.keys = [self.keys[r] for r in idx]
        self.tokens = [self.tokens[r] for r in idx]
        self.src_lens = [self.src_lens[r] for r in idx]
        self.max_len, self.done, self.ids = self.max_len[keep], self.done[keep], self.ids[keep]

    @torch.inference_mode()
    def compact(self, fresh: DecoderCache | None = None) -> None:
        """Drop the free slots and the buffer columns no running row reads (and append `fresh`'s
        sources), in one copy of the cache."""
        if self.cache is None:
            self.cache = fresh
            return
        live = [r for r, k in enumerate(self.keys) if k is not None]
        self.cache = self.cache.rebatched(torch.tensor(live, dtype=torch.long, device=self.ids.device), fresh)
        self._take(live)

    @torch.inference_mode()
    def add(
        self,
        sources: Sequence[Sequence[int]],
        keys: Sequence[Hashable],
        max_len_a: float = DecodeConfig.max_len_a,
        max_len_b: float = DecodeConfig.max_len_b,
    ) -> None:
        """Sources (non-empty id lists, EOS included) join the batch before the next step."""
        if len(keys) != len(sources) or any(k is None for k in keys) or not all(len(s) for s in sources):
            raise ValueError("add: one key (not None) per source, and every source non-empty (EOS at least)")
        if not sources:
            return
        cfg, dev = self.model.config, next(self.model.parameters()).device
        if self.model.training:  # Translator restores the mode it found; `attention` sets eval
            self.model.eval()
        n = len(sources)
        src = torch.full((n, max(map(len, sources))), cfg.pad_id, dtype=torch.long)
        for r, ids in enumerate(sources):
            src[r, : len(ids)] = torch.tensor(list(ids))
        src = src.to(dev)
        max_len = max_lengths(self.model, src, max_len_a, max_len_b)  # (n,)
        memory = self.model.encode(src)
        fresh = self.model.init_cache(memory, padding_mask(src, cfg.pad_id), capacity=int(max_len.max()) + 1)
        free = [r for r, k in enumerate(self.keys) if k is None]
        if self.cache is not None and len(free) >= n:  # into free slots, in place
            slots = free[:n]
            self.cache = self.cache.refill(torch.tensor(slots, dtype=torch.long, device=dev), fresh)
        else:  # the running rows and the new ones, in one copy
            self.compact(fresh)
            slots = list(range(len(self.keys), len(self.keys) + n))
            grow = torch.zeros(n, dtype=torch.long, device=dev)
            self.keys += [None] * n
            self.tokens += [[] for _ in range(n)]
            self.src_lens += [0] * n
            self.max_len, self.done = torch.cat([self.max_len.to(dev), grow]), torch.cat([self.done.to(dev), grow])
            self.ids = torch.cat([self.ids.to(dev), grow[:, None]])
        idx = torch.tensor(slots, dtype=torch.long, device=dev)
        for r, key, ids in zip(slots, keys, sources):
            self.keys[r], self.tokens[r], self.src_lens[r] = key, [], len(ids)
        self.max_len[idx], self.done[idx], self.ids[idx] = max_len, 0, cfg.bos_id
        self.live += n

    @torch.inference_mode()
    def step(self) -> list[tuple[Hashable, list[int]]]:
        """One decoder step for every row -> (key, ids without BOS/EOS) of the rows that finished,
        which leave the batch."""
        if not self.live:
            return []
        if self.model.training:
            self.model.eval()
        cache = self.cache
        assert cache is not None  # live rows
        cut = 0 if cache.start is None else int(cache.start.min())  # free slots start at `length`
        if 4 * (len(self.keys) - self.live) > len(self.keys) or (cut and 2 * cut >= cache.length):
            self.compact()
        cfg = self.model.config
        assert self.cache is not None
        logits, self.cache = self.model.step(self.ids, self.cache)  # (slots, 1, V)
        nxt = greedy_next(logits, cfg, self.max_len <= self.done)  # (slots,) as greedy_search chooses
        self.done += 1
        finished: list[tuple[Hashable, list[int]]] = []
        for r, tok in enumerate(nxt.tolist()):
            key = self.keys[r]
            if key is None:
                continue
            if tok == cfg.eos_id:
                finished.append((key, self.tokens[r]))
                self.keys[r], self.src_lens[r] = None, 0
            else:
                self.tokens[r].append(tok)
        self.live -= len(finished)
        if not self.live:
            self._reset()
            return finished
        self.ids = nxt[:, None]
        if self.live < len(self.keys):  # free slots: position 0 again at the next step, input EOS
            free = torch.tensor([k is None for k in self.keys], device=nxt.device)
            start = self.cache.start if self.cache.start is not None else torch.zeros_like(nxt)
            self.cache.start = start.masked_fill(free, self.cache.length)
            self.ids.masked_fill_(free[:, None], cfg.eos_id)
        return finished

    def clear(self) -> None:
        """Drop every sentence (after a failure)."""
        self._reset()
