"""Incremental decoding state: an explicit value passed into `Transformer.decode` and returned.

Per decoder layer it holds the self-attention keys/values of the positions decoded so far
(they grow by one column per step) and the cross-attention keys/values of the encoder output,
computed once per source sentence by `Transformer.init_cache`.

Rows vs. sources: the decoder batch may hold G rows per source sentence (G = beam size).
`reorder(rows)` picks decoder rows (beam search keeps the best continuations); `keep(sources)`
drops whole sentences that have finished, so the batch shrinks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from aiayn.model.attention import KV


@dataclass
class DecoderCache:
    self_kv: list[KV | None]  # per layer: (rows, h, t, d_k) keys and values
    cross_kv: list[KV]  # per layer: (sources, h, S, d_k) keys and values
    src_mask: Tensor  # (sources, 1, 1, S)

    @property
    def length(self) -> int:
        """Number of target positions already decoded (the position offset of the next input)."""
        kv = self.self_kv[0]
        return 0 if kv is None else kv[0].size(2)

    @property
    def sources(self) -> int:
        return self.src_mask.size(0)

    def reorder(self, rows: Tensor) -> "DecoderCache":
        """Keep decoder rows `rows` (a LongTensor); each must stay in its source's group."""
        self_kv = [None if kv is None else (kv[0].index_select(0, rows), kv[1].index_select(0, rows))
                   for kv in self.self_kv]
        return DecoderCache(self_kv, self.cross_kv, self.src_mask)

    def keep(self, sources: Tensor) -> "DecoderCache":
        """Keep only the source sentences `sources` (and all their rows)."""
        group = self._group()
        rows = (sources[:, None] * group + torch.arange(group, device=sources.device)).reshape(-1)
        cache = self.reorder(rows) if self.length else self
        cross = [(k.index_select(0, sources), v.index_select(0, sources)) for k, v in self.cross_kv]
        return DecoderCache(cache.self_kv, cross, self.src_mask.index_select(0, sources))

    def _group(self) -> int:
        kv = self.self_kv[0]
        return 1 if kv is None else kv[0].size(0) // self.sources
