"""The decoder-only Transformer (GPT): a stack of masked self-attention + FFN blocks, the paper's
decoder without encoder-decoder attention, predicting each next token (left to right).

    logits = model(ids)                                  # (B, T, V), teacher forcing, causal
    cache = model.init_cache(batch=B)
    logits, cache = model(ids[:, :1], cache=cache)       # (B, 1, V) per step, as in Transformer.decode
"""

from __future__ import annotations

from typing import overload

import torch
from torch import Tensor, nn

from aiayn.config import ModelConfig
from aiayn.model.cache import DecoderCache
from aiayn.model.embedding import Embedding, Positions
from aiayn.model.layers import EncoderLayer
from aiayn.model.masks import CAUSAL, causal_mask
from aiayn.model.transformer import init_parameters


class DecoderOnly(nn.Module):
    """`n_decoder_layers` blocks; embeddings tied with the pre-softmax projection (§3.4)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = c = config
        tokens = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        self.embed = Embedding(tokens, Positions(c.positional, c.max_positions, c.d_model), c.dropout)
        args = (c.d_model, c.n_heads, c.head_dim, c.d_ff, c.dropout, c.attention_dropout, c.norm, c.value_dim,
                c.attention_window)
        self.layers = nn.ModuleList(EncoderLayer(*args) for _ in range(c.n_decoder_layers))
        self.norm = nn.LayerNorm(c.d_model) if c.norm == "pre" else nn.Identity()
        self.generator = nn.Linear(c.d_model, c.vocab_size, bias=False)
        init_parameters(self, c.d_model)
        if c.tie_embeddings:
            self.generator.weight = tokens.weight

    def init_cache(self, batch: int, capacity: int = 64) -> DecoderCache:
        return DecoderCache.self_only(batch, len(self.layers), self.generator.weight.device, capacity)

    @overload
    def forward(self, ids: Tensor, cache: None = None, keep: Tensor | None = None) -> Tensor: ...

    @overload
    def forward(self, ids: Tensor, cache: DecoderCache, keep: None = None) -> tuple[Tensor, DecoderCache]: ...

    def forward(self, ids, cache=None, keep=None):
        """(B, T) ids -> logits (B, T, V), position t predicting token t+1. With `keep` (flat indices
        into the B*T positions) only those positions are projected: (n, V). With a cache: the next
        positions only, returning (logits, cache) like `Transformer.decode`."""
        if cache is None:
            mask, offset = CAUSAL, 0  # right padding: pad keys come after every real query
        else:
            if torch.is_grad_enabled():  # the cache writes in place: inference only
                with torch.no_grad():
                    return self.forward(ids, cache)
            cache.check_fresh()
            offset = cache.length
            mask = None if ids.size(1) == 1 else causal_mask(ids.size(1), ids.device, offset)
        x = self.embed(ids, offset)  # (B, T, d_model)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, cache=cache, index=i)
        x = self.norm(x)
        if keep is not None:
            x = x.flatten(0, 1).index_select(0, keep)  # (n, d_model)
        logits = self.generator(x)
        return logits if cache is None else (logits, cache.advanced(ids.size(1)))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
