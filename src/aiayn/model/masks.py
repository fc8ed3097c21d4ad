"""The one mask convention of the package (seed 004, paper §3.2.3).

Masks are boolean, True = may attend, and broadcast to the attention scores `(B, h, T_q, T_k)`:

- encoder self-attention and cross-attention keys: `padding_mask(src)` -> `(B, 1, 1, S)`
- decoder self-attention: `decoder_mask(tgt)` -> `(B, 1, T, T)` (causal AND key padding)
- cross-attention spelled out per query: `cross_mask(src, T)` -> `(B, 1, T, S)`
- restricted self-attention (Table 1), spelled out: `band_mask(T, S, r)` -> `(1, 1, T, S)`, combined with
  the masks above by AND (the blocked kernel in attention.py never builds it for long sequences)

With right padding every query row keeps at least one key (position 0 of the target is BOS,
and a source always holds at least its EOS), so no softmax row is all -inf.

Causality is a flag beside the mask, not a mask value: attention takes `mask: Tensor | None` and
`causal: bool` (SDPA's `is_causal`), meaning "AND the triangle of `causal_mask`". Decoder
self-attention over a whole right-padded target (teacher forcing) passes mask=None, causal=True and
runs SDPA's is_causal kernel. Exact where it matters: every pad key sits after every real query, so
key padding changes nothing at real positions, and pad positions carry no loss.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """(B, S) ids -> (B, 1, 1, S): True where the key is a real token."""
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(size: int, device: torch.device | None = None, offset: int = 0) -> Tensor:
    """(1, 1, T, offset+T): query t (at absolute position offset+t) sees keys <= offset+t (§3.2.3)."""
    q = torch.arange(offset, offset + size, device=device)[:, None]
    k = torch.arange(offset + size, device=device)[None, :]
    return (k <= q)[None, None]


def decoder_mask(tgt: Tensor, pad_id: int) -> Tensor:
    """(B, T) ids -> (B, 1, T, T): causal and key padding together."""
    return causal_mask(tgt.size(1), tgt.device) & padding_mask(tgt, pad_id)


def cross_mask(src: Tensor, tgt_len: int, pad_id: int) -> Tensor:
    """(B, S) source ids -> (B, 1, T, S): every target query sees the real source tokens."""
    return padding_mask(src, pad_id).expand(-1, -1, tgt_len, -1)


def band_mask(size_q: int, size_k: int, window: int, device: torch.device | None = None) -> Tensor:
    """(1, 1, T, S): query t (at absolute position S-T+t) sees keys within `window` positions of it, on
    either side (restricted self-attention, Table 1); AND it with a causal mask to look back only."""
    q = torch.arange(size_k - size_q, size_k, device=device)[:, None]
    k = torch.arange(size_k, device=device)[None, :]
    return ((k - q).abs() <= window)[None, None]
