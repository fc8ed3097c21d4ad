"""Feed-forward network, encoder layer and decoder layer (paper §3.1, §3.3, §5.4).

Every sub-layer is wrapped as LayerNorm(x + Dropout(Sublayer(x))) ("post", the paper) or
x + Dropout(Sublayer(LayerNorm(x))) ("pre", the common stable variant).
"""

from __future__ import annotations

from torch import Tensor, nn

from aiayn.config import ModelConfig
from aiayn.model.attention import CrossAttention, SelfAttention
from aiayn.model.cache import KV, DecoderCache


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position alike (§3.3)."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        # In place: the product's backward needs its inputs, not its output (one (B, T, d_ff) tensor less).
        return self.w2(self.w1(x).relu_())  # (B, T, d_model) -> (B, T, d_ff) -> (B, T, d_model)


class Residual(nn.Module):
    """Residual connection + LayerNorm around one sub-layer, post-LN or pre-LN."""

    def __init__(self, d_model: int, dropout: float, norm: str) -> None:
        super().__init__()
        self.norm, self.dropout, self.pre = nn.LayerNorm(d_model), nn.Dropout(dropout), norm == "pre"

    def inp(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre else x

    def out(self, x: Tensor, y: Tensor) -> Tensor:
        return x + self.dropout(y) if self.pre else self.norm(x + self.dropout(y))


def self_attention(c: ModelConfig) -> SelfAttention:
    """h heads of d_k (d_v) each over the whole sequence, or a neighbourhood of r (Table 1's restricted)."""
    return SelfAttention(c.d_model, c.n_heads, c.head_dim, c.attention_dropout, c.value_dim, c.attention_window)


class EncoderLayer(nn.Module):
    """Self-attention, then FFN (§3.1). Under a causal mask, with a cache, it is also the block of a
    decoder-only model (the decoder layer without encoder-decoder attention)."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.self_attn = self_attention(c)
        self.ffn = FeedForward(c.d_model, c.d_ff)
        self.r1, self.r2 = (Residual(c.d_model, c.dropout, c.norm) for _ in range(2))

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        weights: list[Tensor] | None = None,
        cache: DecoderCache | None = None,
        index: int = 0,
        causal: bool = False,
    ) -> Tensor:
        x = self.r1.out(x, self.self_attn(self.r1.inp(x), mask, cache, index, weights, causal))
        return self.r2.out(x, self.ffn(self.r2.inp(x)))


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, then FFN (§3.1)."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.self_attn = self_attention(c)
        self.cross_attn = CrossAttention(c.d_model, c.n_heads, c.head_dim, c.attention_dropout, c.value_dim)
        self.ffn = FeedForward(c.d_model, c.d_ff)
        self.r1, self.r2, self.r3 = (Residual(c.d_model, c.dropout, c.norm) for _ in range(3))

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor | None,
        cross_kv: KV,
        cross_mask: Tensor,
        cache: DecoderCache | None = None,
        index: int = 0,
        weights: dict[str, list[Tensor]] | None = None,
        causal: bool = False,
    ) -> Tensor:
        """`causal`: self-attention ANDs the causal triangle into `self_mask` (§3.2.3; the teacher-forced
        pass, where it runs SDPA's is_causal kernel)."""
        w_self = w_cross = None
        if weights is not None:
            w_self, w_cross = weights["decoder"], weights["cross"]
        x = self.r1.out(x, self.self_attn(self.r1.inp(x), self_mask, cache, index, w_self, causal))
        x = self.r2.out(x, self.cross_attn(self.r2.inp(x), cross_kv, cross_mask, w_cross))
        return self.r3.out(x, self.ffn(self.r3.inp(x)))
