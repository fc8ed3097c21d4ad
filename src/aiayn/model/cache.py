"""Incremental decoding state: an explicit value passed into `Transformer.step` and returned.

Per decoder layer it holds the self-attention keys/values of the positions decoded so far and
the cross-attention keys/values of the encoder output, computed once per source sentence by
`Transformer.init_cache`.

Rows vs. sources: the decoder batch may hold G rows per source sentence (G = beam size).
`reorder(rows)` picks decoder rows (beam search keeps the best continuations); `keep(sources)`
drops whole sentences that have finished, so the batch shrinks.

Continuous batching (aiayn.decode.continuous) lets sentences join a batch that is already decoding.
Layout: every row writes its newest position into the same buffer column, `length`, so `append`
stays one column write for the whole batch; a row that joined when the batch had decoded j
positions has `start` j, its target position p sits in column j + p, and the columns before j
hold zeros. `Transformer.step` then gives row r the position `length - start[r]` and masks the
keys before `start[r]` (zeros, not garbage: a masked key has probability 0, but 0 x NaN is NaN in
P V). Left padding of the self-attention cache, so to speak; the cross-attention keys/values of
sources of different lengths are right-padded with zeros to the longest and masked by `src_mask`,
as in any padded batch. `joined` appends the rows of a fresh cache, `trimmed` drops the columns
no row reads any more (before the earliest start) and source columns past the longest source.
`start` None means every row started at column 0 (the searches of aiayn.decode.search).

Speed: self-attention keys/values live in buffers preallocated along time, so a step writes one
column instead of concatenating (copying) the whole history, and `reorder`/`keep` gather into a
second, reused buffer instead of allocating. The price of reuse: a cache value may be extended
(by `step`) or reordered once; keep working with the value returned. Using a spent value raises
instead of silently reading overwritten keys. The cache is for inference: no autograd through it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import Tensor

KV = tuple[Tensor, Tensor]  # keys, values: (B, h, S, d_k) each


@dataclass
class DecoderCache:
    cross_kv: list[KV]  # per layer: (sources, h, S, d_k) keys and values
    src_mask: Tensor  # (sources, 1, 1, S)
    length: int = 0  # target positions decoded so far = position offset of the next input
    capacity: int = 64  # time steps the buffers are first allocated for (they double when full)
    self_k: list[Tensor | None] = field(default_factory=list)  # per layer (rows, h, capacity, d_k)
    self_v: list[Tensor | None] = field(default_factory=list)
    _spare: list[Tensor | None] = field(default_factory=list, repr=False)  # reused by reorder/keep
    # Shared by every value over the same buffers: how many positions they hold (-1: reordered away).
    _written: list[int] = field(default_factory=lambda: [0], repr=False)
    start: Tensor | None = None  # (rows,) buffer column of each row's first position (see above); None: 0

    def __post_init__(self) -> None:
        n = len(self.self_k) or len(self.cross_kv)  # a decoder-only model has layers but no cross K/V
        for name in ("self_k", "self_v"):
            if not getattr(self, name):
                setattr(self, name, [None] * n)
        if not self._spare:
            self._spare = [None] * (2 * n)

    @classmethod
    def self_only(cls, batch: int, layers: int, device: torch.device | None = None, capacity: int = 64) -> DecoderCache:
        """The cache of a decoder-only model: self-attention keys/values only, one row per sequence."""
        return cls(
            [],
            torch.ones(batch, 1, 1, 0, dtype=torch.bool, device=device),
            capacity=capacity,
            self_k=[None] * layers,
            self_v=[None] * layers,
        )

    @property
    def sources(self) -> int:
        return self.src_mask.size(0)

    @property
    def rows(self) -> int | None:
        k = self.self_k[0]
        return None if k is None else k.size(0)

    def check_fresh(self) -> None:
        """Raise unless this value is the newest over its buffers (not yet extended or reordered)."""
        if self._written[0] != self.length:
            raise RuntimeError(
                "this DecoderCache value was already extended or reordered, so its buffers "
                "have moved on; use the cache returned by step/reorder/keep"
            )

    def append(self, layer: int, k: Tensor, v: Tensor) -> KV:
        """Store new keys/values (rows, h, T, d_k) at positions [length, length+T) of `layer`;
        return the keys/values of all positions so far, (rows, h, length+T, d_k) views."""
        start, end = self.length, self.length + k.size(2)
        buf_k, buf_v = self.self_k[layer], self.self_v[layer]
        if buf_k is None or end > buf_k.size(2):
            cap = max(end, self.capacity, 2 * (0 if buf_k is None else buf_k.size(2)))
            grown_k = k.new_empty(k.size(0), k.size(1), cap, k.size(3))  # (rows, h, cap, d_k)
            grown_v = v.new_empty(v.size(0), v.size(1), cap, v.size(3))  # (rows, h, cap, d_v)
            if start:  # positions written before: the buffers exist
                assert buf_k is not None and buf_v is not None
                grown_k[:, :, :start], grown_v[:, :, :start] = buf_k[:, :, :start], buf_v[:, :, :start]
            buf_k, buf_v = self.self_k[layer], self.self_v[layer] = grown_k, grown_v
            self._spare[2 * layer] = self._spare[2 * layer + 1] = None
        assert buf_v is not None  # allocated together with buf_k
        buf_k[:, :, start:end], buf_v[:, :, start:end] = k, v
        return buf_k[:, :, :end], buf_v[:, :, :end]

    def advanced(self, steps: int) -> DecoderCache:
        """The value after a decode step wrote `steps` positions (this one is spent from now on)."""
        self._written[0] = self.length + steps
        return dataclasses.replace(self, length=self.length + steps)

    def reorder(self, rows: Tensor) -> DecoderCache:
        """Keep decoder rows `rows` (a LongTensor); each must stay in its source's group."""
        start = None if self.start is None else self.start.index_select(0, rows)
        if self.length == 0:
            return self if start is None else dataclasses.replace(self, start=start)
        self.check_fresh()
        new_k: list[Tensor | None] = []
        new_v: list[Tensor | None] = []
        spare: list[Tensor | None] = []
        for i, (k, v) in enumerate(zip(self.self_k, self.self_v)):
            assert k is not None and v is not None  # length > 0: every layer has written
            out = []
            for buf, j in ((k, 2 * i), (v, 2 * i + 1)):
                dst = self._spare[j]
                if dst is None or dst.size(0) < rows.numel() or dst.size(2) != buf.size(2):
                    dst = buf.new_empty(rows.numel(), *buf.shape[1:])
                dst = dst[: rows.numel()]
                torch.index_select(buf[:, :, : self.length], 0, rows, out=dst[:, :, : self.length])
                out.append(dst)
                spare.append(buf)  # the old buffer becomes the next reorder's destination
            new_k.append(out[0])
            new_v.append(out[1])
        self._written[0] = -1  # this value (and older ones over these buffers) is spent
        return dataclasses.replace(self, self_k=new_k, self_v=new_v, _spare=spare, _written=[self.length], start=start)

    def keep(self, sources: Tensor) -> DecoderCache:
        """Keep only the source sentences `sources` (and all their rows)."""
        group = 1 if self.rows is None else self.rows // self.sources
        rows = (sources[:, None] * group + torch.arange(group, device=sources.device)).reshape(-1)
        cache = self.reorder(rows)
        cross = [(k.index_select(0, sources), v.index_select(0, sources)) for k, v in self.cross_kv]
        return dataclasses.replace(cache, cross_kv=cross, src_mask=self.src_mask.index_select(0, sources))

    def joined(self, fresh: DecoderCache) -> DecoderCache:
        """This cache's rows, then those of `fresh` (from `init_cache`, nothing decoded yet): sentences
        joining a running batch at its current `length` (continuous batching, see above). One row
        per source (greedy). This value is spent afterwards."""
        if fresh.length or (self.rows or self.sources) != self.sources:
            raise ValueError("joined: a fresh cache, into a cache with one row per source")
        self.check_fresh()
        n, m, dev = self.sources, fresh.sources, self.src_mask.device
        S = max(self.src_mask.size(-1), fresh.src_mask.size(-1))

        def pad_s(x: Tensor, value: float | bool) -> Tensor:  # right-pad dim 2 (sources' positions) to S
            if x.size(2) == S:
                return x
            shape = list(x.shape)
            shape[2] = S - x.size(2)
            return torch.cat([x, x.new_full(shape, value)], dim=2)

        def pad_mask(x: Tensor) -> Tensor:  # (B, 1, 1, S')
            return x if x.size(-1) == S else torch.cat([x, x.new_zeros(*x.shape[:-1], S - x.size(-1))], dim=-1)

        cross = [
            (torch.cat([pad_s(k, 0.0), pad_s(fk, 0.0)]), torch.cat([pad_s(v, 0.0), pad_s(fv, 0.0)]))
            for (k, v), (fk, fv) in zip(self.cross_kv, fresh.cross_kv)
        ]
        self_k: list[Tensor | None] = []
        self_v: list[Tensor | None] = []
        for buf_k, buf_v in zip(self.self_k, self.self_v):
            if buf_k is None or buf_v is None or self.length == 0:
                self_k.append(None)
                self_v.append(None)
                continue
            for buf, out in ((buf_k, self_k), (buf_v, self_v)):
                grown = buf.new_zeros(n + m, *buf.shape[1:])  # new rows: zeros before their start
                grown[:n, :, : self.length] = buf[:, :, : self.length]
                out.append(grown)
        start = self.start if self.start is not None else torch.zeros(n, dtype=torch.long, device=dev)
        start = torch.cat([start, torch.full((m,), self.length, dtype=torch.long, device=dev)])
        self._written[0] = -1
        return dataclasses.replace(
            self,
            cross_kv=cross,
            src_mask=torch.cat([pad_mask(self.src_mask), pad_mask(fresh.src_mask)]),
            capacity=max(self.capacity, self.length + fresh.capacity),
            self_k=self_k,
            self_v=self_v,
            _spare=[None] * len(self._spare),
            _written=[self.length],
            start=start,
        )

    def trimmed(self) -> DecoderCache:
        """The same rows without the buffer columns before the earliest `start` and the source columns
        after the longest source (what rows that left the batch needed). Returns self when there are
        none; otherwise this value is spent."""
        cut = int(self.start.min()) if self.start is not None and self.start.numel() else 0
        real = self.src_mask.reshape(self.sources, -1).any(0).nonzero()
        S = int(real.max()) + 1 if real.numel() else self.src_mask.size(-1)
        if cut == 0 and S == self.src_mask.size(-1):
            return self
        self.check_fresh()
        cross = self.cross_kv
        if S < self.src_mask.size(-1):
            cross = [(k[:, :, :S].contiguous(), v[:, :, :S].contiguous()) for k, v in self.cross_kv]
        self_k, self_v = self.self_k, self.self_v
        length = self.length - cut
        if cut:
            self_k, self_v = [], []
            for buf_k, buf_v in zip(self.self_k, self.self_v):
                for buf, out in ((buf_k, self_k), (buf_v, self_v)):
                    if buf is None:
                        out.append(None)
                        continue
                    moved = buf.new_zeros(buf.size(0), buf.size(1), max(buf.size(2) - cut, length + 1), buf.size(3))
                    moved[:, :, :length] = buf[:, :, cut : self.length]
                    out.append(moved)
        self._written[0] = -1
        return dataclasses.replace(
            self,
            cross_kv=cross,
            src_mask=self.src_mask[..., :S],
            length=length,
            self_k=self_k,
            self_v=self_v,
            _spare=[None] * len(self._spare),
            _written=[length],
            start=None if self.start is None else self.start - cut,
        )
