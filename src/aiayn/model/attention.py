"""Multi-head attention on `torch.nn.functional.scaled_dot_product_attention` (paper §3.2).

Self-attention projects Q, K, V with one fused matrix; cross-attention projects Q from the
decoder and K, V (fused) from the encoder output, once per source sentence.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.model.cache import KV, DecoderCache
from aiayn.model.masks import band_mask, causal_mask

FEW_QUERIES = 16  # queries per row up to which CPU inference multiplies explicitly (see `attention`)
# One query per row on the CPU reads at least this many cached keys, the extra ones masked: torch's CPU
# batched matrix product takes a slow naive kernel for products this small and is faster at 16 keys than
# at 8; beyond 16 the exact count is fastest.
MIN_KEYS = 16


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    dropout: float = 0.0,
    weights: list[Tensor] | None = None,
    causal: bool = False,
) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V (§3.2.1). q (B, h, T, d_k), k (B, h, S, d_k), v (B, h, S, d_v); mask: bool
    (True = attend) or None; `causal` (T == S): query t also sees only keys <= t (§3.2.3), run by SDPA's
    is_causal kernel when there is no mask besides it.

    With `weights` (a list) the probabilities (B, h, T, S) are computed explicitly and appended:
    the slower path, for plots. Otherwise the fused SDPA kernel does the work, except for few
    queries per row on the CPU without dropout (incremental decoding: one query per row, or a
    beam's queries folded onto their source in cross-attention), where SDPA's per-(batch, head)
    overhead makes two plain matrix products faster (docs/benchmarks.md).
    """
    if causal:
        if weights is None and mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        # SDPA takes attn_mask or is_causal, not both; plots need the explicit triangle anyway.
        tri = causal_mask(q.size(2), q.device)  # (1, 1, T, T)
        mask = tri if mask is None else mask & tri
    few = q.size(2) == 1 or (q.size(2) <= FEW_QUERIES and dropout == 0.0)
    if weights is None and not (few and q.device.type == "cpu"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = scores.softmax(dim=-1)
    if weights is not None:
        weights.append(probs.detach())
    return F.dropout(probs, dropout, training=dropout > 0) @ v


def windowed_attention(
    q: Tensor, k: Tensor, v: Tensor, window: int, causal: bool, key_mask: Tensor | None = None, dropout: float = 0.0
) -> Tensor:
    """Restricted self-attention (Table 1): query i attends to keys j with |i - j| <= r (i - r <= j <= i
    when `causal`), in O(n * r) time and memory instead of O(n^2).

    The sequence is cut into blocks of r queries; each block attends to its own keys plus r on each
    side (r to the left only when causal), gathered as strided views, so the score tensor is
    (B, h, n/r, r, 3r) rather than (B, h, n, n). q, k, v (B, h, T, d); key_mask (B, 1, 1, T) bool,
    True = a real token. Equals `attention` with `band_mask` ANDed into the mask at real positions.
    """
    B, h, T, d = q.shape
    blk = max(1, min(window, T))
    nb = -(-T // blk)  # blocks
    tail = nb * blk - T
    left, right = window, 0 if causal else window
    W = left + blk + right  # keys one block of queries can see

    def windows(x: Tensor) -> Tensor:  # (B, h, T, d) -> (B, h, nb, W, d), overlapping views
        return F.pad(x, (0, 0, left, tail + right)).unfold(2, W, blk).transpose(-1, -2)

    qb = F.pad(q, (0, 0, 0, tail)).view(B, h, nb, blk, d)  # (B, h, nb, blk, d)
    qpos = torch.arange(nb * blk, device=q.device).view(nb, blk, 1)
    kpos = (torch.arange(nb, device=q.device) * blk - left)[:, None, None] + torch.arange(W, device=q.device)
    rel = kpos - qpos  # (nb, blk, W)
    allowed = (rel >= -window) & (rel <= right) & (kpos >= 0) & (kpos < T)
    if key_mask is not None:
        real = F.pad(key_mask.reshape(B, T), (left, tail + right)).unfold(1, W, blk)  # (B, nb, W)
        allowed = allowed & real[:, None, :, None, :]  # (B, 1, nb, blk, W)
    allowed = allowed | (rel == 0)  # every query keeps a key: no all -inf row (pad queries see themselves)
    out = F.scaled_dot_product_attention(qb, windows(k), windows(v), attn_mask=allowed, dropout_p=dropout)
    return out.reshape(B, h, nb * blk, -1)[:, :, :T]  # (B, h, T, d_v)


def restrict(
    mask: Tensor | None, size_q: int, size_k: int, window: int, device: torch.device, causal: bool = False
) -> Tensor:
    """`mask` (bool or None; with `causal` the causal triangle too) AND the band of restricted
    self-attention, as one explicit mask; every query keeps its own position, as in
    `windowed_attention` (a pad query whose window holds only pad keys would otherwise give NaN,
    which the next layer spreads through the values)."""
    base = mask
    if causal:
        tri = causal_mask(size_q, device)  # (1, 1, T, T)
        base = tri if mask is None else mask & tri
    band = band_mask(size_q, size_k, window, device)
    return band if base is None else (base & band) | band_mask(size_q, size_k, 0, device)


class _Heads(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_head: int, dropout: float, d_value: int | None = None) -> None:
        super().__init__()
        self.h, self.d_k, self.d_v, self.dropout = n_heads, d_head, d_value or d_head, dropout
        self.out = nn.Linear(n_heads * self.d_v, d_model)  # W^O

    def split(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.h, -1).transpose(1, 2)  # (B, h, T, d_k or d_v)

    def merge(self, x: Tensor) -> Tensor:
        B, _, T, _ = x.shape
        return self.out(x.transpose(1, 2).reshape(B, T, self.h * self.d_v))  # (B, T, d_model)

    @property
    def p(self) -> float:
        return self.dropout if self.training else 0.0


class SelfAttention(_Heads):
    """Encoder or decoder self-attention. With a cache, the new keys/values are appended to those of
    earlier positions (layer `layer` of the cache) and the queries attend to all of them.

    `window` r restricts each position to keys at most r positions away (Table 1's restricted
    self-attention; a causal mask makes it look back only)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int,
        dropout: float = 0.0,
        d_value: int | None = None,
        window: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, d_head, dropout, d_value)
        self.window = window
        self.sizes = [n_heads * d_head, n_heads * d_head, n_heads * self.d_v]
        self.qkv = nn.Linear(d_model, sum(self.sizes))  # [W^Q | W^K | W^V] for all heads

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        cache: DecoderCache | None = None,
        layer: int = 0,
        weights: list[Tensor] | None = None,
        causal: bool = False,
    ) -> Tensor:
        """x (B, T, d_model); mask bool (True = attend) or None; `causal`: AND the causal triangle
        (T == number of keys, so not with a cache holding earlier positions)."""
        q, k, v = (self.split(t) for t in self.qkv(x).split(self.sizes, dim=-1))  # (B, h, T, d_k|d_k|d_v)
        if cache is not None:
            pad = q.size(2) == 1 and q.device.type == "cpu" and self.window is None and weights is None
            end = cache.length + q.size(2)
            k, v = cache.append(layer, k, v, MIN_KEYS if pad else 0)  # (B, h, t+T [or more], d_k|d_v)
            if k.size(2) > end:  # padded read: only the first `end` keys are real
                real = torch.arange(k.size(2), device=k.device) < end  # (t',)
                mask = real if mask is None else F.pad(mask, (0, k.size(2) - end), value=False) & real
        if self.window is not None:
            r, T = self.window, q.size(2)
            if cache is not None and T == 1:  # one new position: its window is the last r + 1 keys
                k, v = k[:, :, -(r + 1) :], v[:, :, -(r + 1) :]
                mask = None if mask is None else mask[..., -(r + 1) :]  # a key mask over the cached keys
            elif cache is None and weights is None and (mask is None or mask.size(2) == 1):
                return self.merge(windowed_attention(q, k, v, r, causal, mask, self.p))
            else:  # plots and several cached positions: the band spelled out (the triangle in it)
                mask, causal = restrict(mask, T, k.size(2), r, q.device, causal), False
        return self.merge(attention(q, k, v, mask, self.p, weights, causal))


class CrossAttention(_Heads):
    """Encoder-decoder attention (§3.2.3): queries from the decoder, keys/values from the encoder.

    The decoder batch may hold G rows per source (beam search): those queries are folded onto
    their source's keys/values, so the per-source K/V are never copied per beam.
    """

    def __init__(
        self, d_model: int, n_heads: int, d_head: int, dropout: float = 0.0, d_value: int | None = None
    ) -> None:
        super().__init__(d_model, n_heads, d_head, dropout, d_value)
        self.q = nn.Linear(d_model, n_heads * d_head)
        self.sizes = [n_heads * d_head, n_heads * self.d_v]
        self.kv = nn.Linear(d_model, sum(self.sizes))  # [W^K | W^V]

    def project(self, memory: Tensor) -> KV:
        k, v = self.kv(memory).split(self.sizes, dim=-1)
        return self.split(k), self.split(v)  # (B, h, S, d_k), (B, h, S, d_v)

    def forward(
        self,
        x: Tensor,
        kv: KV,
        mask: Tensor | None,
        weights: list[Tensor] | None = None,
    ) -> Tensor:
        k, v = kv
        q = self.split(self.q(x))  # (B*G, h, T, d_k)
        B, G = k.size(0), q.size(0) // k.size(0)
        if G == 1:
            return self.merge(attention(q, k, v, mask, self.p, weights))
        if mask is not None and mask.size(2) != 1:
            raise ValueError("grouped cross-attention takes a (B, 1, 1, S) key-padding mask")
        T = q.size(2)
        q = q.view(B, G, self.h, T, self.d_k).transpose(1, 2).reshape(B, self.h, G * T, self.d_k)
        o = attention(q, k, v, mask, self.p, weights)  # (B, h, G*T, d_v)
        o = o.view(B, self.h, G, T, self.d_v).transpose(1, 2).reshape(B * G, self.h, T, self.d_v)
        return self.merge(o)
