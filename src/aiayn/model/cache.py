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
as in any padded batch. `refill` restarts rows whose sentences have finished with new sources, in
place; `rebatched` drops rows, the columns no row reads any more (before the earliest start) and
the source columns past the longest source, and appends the rows of a fresh cache, in one copy.
`start` None means every row started at column 0 (the searches of aiayn.decode.search).

Speed: self-attention keys/values live in buffers preallocated along time, so a step writes one
column instead of concatenating (copying) the whole history, and `reorder`/`keep` gather into a
second, reused buffer instead of allocating; a reorder that leaves most rows in place copies only
the others, in place. The price of reuse: a cache value may be extended (by `step`) or reordered
once; keep working with the value returned. Using a spent value raises instead of silently reading
overwritten keys. The cache is for inference: no autograd through it.

Padded reads: `append(..., min_keys=m)` returns at least m key/value columns, for a caller that masks the
ones past the positions written; there the values hold finite stale values or zeros, never uninitialised
memory (keys may: masking a score replaces whatever it was):
self-attention on the CPU reads 16 keys rather than fewer, where torch's batched matrix product is
several times faster (aiayn.model.attention.MIN_KEYS). Every value buffer's first `FINITE` columns are
zeroed when it is allocated for that reason.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

KV = tuple[Tensor, Tensor]  # keys, values: (B, h, S, d_k) each
FINITE = 16  # leading value-buffer columns zeroed on allocation: readable past `length` (see append)


def _buffer(like: Tensor, rows: int, cap: int, values: bool) -> Tensor:
    """An uninitialised (rows, h, cap, d) buffer; for values, the first FINITE columns are zeros. Keys read
    past `length` may hold anything: their scores are masked, and masking replaces even a NaN, while a
    probability of 0 times a NaN value would still be NaN."""
    buf = like.new_empty(rows, like.size(1), cap, like.size(3))
    if values:
        buf[:, :, :FINITE].zero_()
    return buf


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

    def append(self, layer: int, k: Tensor, v: Tensor, min_keys: int = 0) -> KV:
        """Store new keys/values (rows, h, T, d_k) at positions [length, length+T) of `layer`;
        return the keys/values of all positions so far, (rows, h, length+T, d_k) views, or of
        min(min_keys, FINITE) columns when that is more (see the module's docstring: mask the rest)."""
        start, end = self.length, self.length + k.size(2)
        buf_k, buf_v = self.self_k[layer], self.self_v[layer]
        if buf_k is None or end > buf_k.size(2):
            cap = max(end, self.capacity, FINITE, 2 * (0 if buf_k is None else buf_k.size(2)))
            grown_k = _buffer(k, k.size(0), cap, values=False)  # (rows, h, cap, d_k)
            grown_v = _buffer(v, v.size(0), cap, values=True)  # (rows, h, cap, d_v)
            if start:  # positions written before: the buffers exist
                assert buf_k is not None and buf_v is not None
                grown_k[:, :, :start], grown_v[:, :, :start] = buf_k[:, :, :start], buf_v[:, :, :start]
            buf_k, buf_v = self.self_k[layer], self.self_v[layer] = grown_k, grown_v
            self._spare[2 * layer] = self._spare[2 * layer + 1] = None
        assert buf_v is not None  # allocated together with buf_k
        buf_k[:, :, start:end], buf_v[:, :, start:end] = k, v
        read = min(max(end, min(min_keys, FINITE)), buf_k.size(2))  # (past `end`: masked by the caller)
        return buf_k[:, :, :read], buf_v[:, :, :read]

    def advanced(self, steps: int) -> DecoderCache:
        """The value after a decode step wrote `steps` positions (this one is spent from now on)."""
        self._written[0] = self.length + steps
        return dataclasses.replace(self, length=self.length + steps)

    def reorder(self, rows: Tensor) -> DecoderCache:
        """Keep decoder rows `rows` (a LongTensor); each must stay in its source's group.

        Where most rows keep their place (rows[i] == i, as beam search arranges: a beam's first
        continuation stays in its parent's row), only the rows that change are copied, in place."""
        start = None if self.start is None else self.start.index_select(0, rows)
        if self.length == 0:
            return self if start is None else dataclasses.replace(self, start=start)
        self.check_fresh()
        if rows.numel() == self.rows:
            moved = (rows != torch.arange(rows.numel(), device=rows.device)).nonzero().squeeze(1)  # (m,)
            if 2 * moved.numel() <= rows.numel():  # two copies of m rows beat one of all rows
                if moved.numel():
                    sources = rows.index_select(0, moved)
                    for buf in (*self.self_k, *self.self_v):
                        assert buf is not None  # length > 0: every layer has written
                        live = buf[:, :, : self.length]  # (rows, h, length, d)
                        live.index_copy_(0, moved, live.index_select(0, sources))  # gathered first: no overlap
                self._written[0] = -1  # the buffers changed in place: older values are spent
                return dataclasses.replace(self, _written=[self.length], start=start)
        new_k: list[Tensor | None] = []
        new_v: list[Tensor | None] = []
        spare: list[Tensor | None] = []
        for i, (k, v) in enumerate(zip(self.self_k, self.self_v)):
            assert k is not None and v is not None  # length > 0: every layer has written
            out = []
            for buf, j in ((k, 2 * i), (v, 2 * i + 1)):
                dst = self._spare[j]
                if dst is None or dst.size(0) < rows.numel() or dst.size(2) != buf.size(2):
                    dst = _buffer(buf, rows.numel(), buf.size(2), values=j % 2 == 1)
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

    def refill(self, slots: Tensor, fresh: DecoderCache) -> DecoderCache:
        """Continuous batching (see above), without copying the running rows: rows `slots` (a
        LongTensor; their sentences have finished) restart with the sources of `fresh` (from
        `init_cache`, nothing decoded yet, one row per slot) at the current `length`. Writes the
        buffers in place; this value is spent afterwards."""
        if fresh.length or fresh.sources != slots.numel() or (self.rows or self.sources) != self.sources:
            raise ValueError("refill: a fresh cache with one source per slot, into one row per source")
        self.check_fresh()
        S, S_f = self.src_mask.size(-1), fresh.src_mask.size(-1)
        cross, src_mask = self.cross_kv, self.src_mask
        if S_f > S:  # longer sources join: right-pad every row's keys/values (zeros) and mask
            cross = [(F.pad(k, (0, 0, 0, S_f - S)), F.pad(v, (0, 0, 0, S_f - S))) for k, v in cross]
            src_mask, S = F.pad(src_mask, (0, S_f - S), value=False), S_f
        for (k, v), (fk, fv) in zip(cross, fresh.cross_kv):
            k[slots] = F.pad(fk, (0, 0, 0, S - S_f))  # zeros at padding: finite in P V
            v[slots] = F.pad(fv, (0, 0, 0, S - S_f))
        src_mask[slots] = F.pad(fresh.src_mask, (0, S - S_f), value=False)
        if self.length:
            for buf in (*self.self_k, *self.self_v):
                if buf is not None:  # the columns before the new start: zeros (then masked)
                    buf[:, :, : self.length].index_fill_(0, slots, 0.0)
        start = self.start.clone() if self.start is not None else slots.new_zeros(self.sources)
        start[slots] = self.length
        self._written[0] = -1
        return dataclasses.replace(
            self,
            cross_kv=cross,
            src_mask=src_mask,
            capacity=max(self.capacity, self.length + fresh.capacity),
            _written=[self.length],
            start=start,
        )

    def rebatched(self, rows: Tensor, fresh: DecoderCache | None = None) -> DecoderCache:
        """Continuous batching (see above), in one copy of the buffers: keep `rows` (a LongTensor; one
        row per source), drop the buffer columns before the earliest start among them and the source
        columns past their longest source, then append the rows of `fresh` (from `init_cache`,
        nothing decoded yet), which join at the new `length`. This value is spent afterwards."""
        if (self.rows or self.sources) != self.sources or (fresh is not None and fresh.length):
            raise ValueError("rebatched: one row per source, and a fresh cache to join")
        self.check_fresh()
        dev, n, m = self.src_mask.device, rows.numel(), 0 if fresh is None else fresh.sources
        start = self.start.index_select(0, rows) if self.start is not None else torch.zeros_like(rows)
        cut = int(start.min()) if n else self.length
        length = self.length - cut
        kept_mask = self.src_mask.index_select(0, rows)  # (n, 1, 1, S)
        real = kept_mask.flatten(1).any(0).nonzero()
        S_old = int(real.max()) + 1 if real.numel() else 0
        S = max(S_old, 0 if fresh is None else fresh.src_mask.size(-1))

        src_mask = torch.zeros(n + m, 1, 1, S, dtype=torch.bool, device=dev)
        src_mask[:n, ..., :S_old] = kept_mask[..., :S_old]
        cross: list[KV] = []
        for i, (k, v) in enumerate(self.cross_kv):
            pair = []
            for j, x in enumerate((k, v)):
                out = x.new_zeros(n + m, x.size(1), S, x.size(3))  # zeros at padding: finite in P V
                out[:n, :, :S_old] = x[:, :, :S_old].index_select(0, rows)
                if fresh is not None:
                    f = fresh.cross_kv[i][j]
                    out[n:, :, : f.size(2)] = f
                pair.append(out)
            cross.append((pair[0], pair[1]))
        if fresh is not None:
            src_mask[n:, ..., : fresh.src_mask.size(-1)] = fresh.src_mask

        self_k: list[Tensor | None] = []
        self_v: list[Tensor | None] = []
        for buf_k, buf_v in zip(self.self_k, self.self_v):
            for buf, out_list in ((buf_k, self_k), (buf_v, self_v)):
                if buf is None or length == 0:
                    out_list.append(None)
                    continue
                # Columns from `length` on are written before they are read: only the joining rows'
                # columns before their start need zeros (zeroing the whole buffer would cost more).
                cap = max(buf.size(2) - cut, length + (1 if fresh is None else fresh.capacity))
                out = _buffer(buf, n + m, cap, values=out_list is self_v)
                out[:n, :, :length] = buf[:, :, cut : self.length].index_select(0, rows)
                out[n:, :, :length] = 0
                out_list.append(out)
        start = torch.cat([start - cut, torch.full((m,), length, dtype=torch.long, device=dev)])
        self._written[0] = -1
        return dataclasses.replace(
            self,
            cross_kv=cross,
            src_mask=src_mask,
            length=length,
            capacity=max(self.capacity, length + (0 if fresh is None else fresh.capacity)),
            self_k=self_k,
            self_v=self_v,
            _spare=[None] * len(self._spare),
            _written=[length],
            start=start,
        )
