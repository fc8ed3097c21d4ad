"""The decoder-only Transformer (GPT): a stack of masked self-attention + FFN blocks, the paper's
decoder without encoder-decoder attention, predicting each next token (left to right).

    logits = model(ids)                                  # (B, T, V), teacher forcing, causal
    cache = model.init_cache(batch=B)
    logits, cache = model.step(ids[:, :1], cache)        # (B, 1, V) per step, as in Transformer.step
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aiayn.config import ModelConfig
from aiayn.model.cache import DecoderCache
from aiayn.model.embedding import Embedding, Positions
from aiayn.model.layers import EncoderLayer
from aiayn.model.masks import causal_mask
from aiayn.model.transformer import init_parameters


class DecoderOnly(nn.Module):
    """`n_decoder_layers` blocks; embeddings tied with the pre-softmax projection (§3.4)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = c = config
        tokens = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        self.embed = Embedding(tokens, Positions(c.positional, c.max_positions, c.d_model), c.dropout)
        self.layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.n_decoder_layers))
        self.norm = nn.LayerNorm(c.d_model) if c.norm == "pre" else nn.Identity()
        self.generator = nn.Linear(c.d_model, c.vocab_size, bias=False)
        init_parameters(self, c.d_model)
        if c.tie_embeddings:
            self.generator.weight = tokens.weight

    def init_cache(self, batch: int, capacity: int = 64) -> DecoderCache:
        return DecoderCache.self_only(batch, len(self.layers), self.generator.weight.device, capacity)

    def forward(self, ids: Tensor, keep: Tensor | None = None) -> Tensor:
        """(B, T) right-padded ids -> logits (B, T, V), position t predicting token t+1 (causal, §3.2.3;
        pad keys come after every real query, so SDPA's causal kernel needs no padding mask). With
        `keep` (flat indices into the B*T positions) only those positions are projected: (n, V)."""
        x = self._stack(ids, 0, None, True, None)  # (B, T, d_model)
        if keep is not None:
            x = x.flatten(0, 1).index_select(0, keep)  # (n, d_model)
        return self.generator(x)

    def step(self, ids: Tensor, cache: DecoderCache) -> tuple[Tensor, DecoderCache]:
        """The next positions (B, T) after those in `cache` -> (logits (B, T, V), the extended cache),
        as `Transformer.step`: inference only, and the given cache value is spent."""
        if torch.is_grad_enabled():  # the cache writes in place: no autograd through it
            with torch.no_grad():
                return self.step(ids, cache)
        cache.check_fresh()
        offset = cache.length
        mask = None if ids.size(1) == 1 else causal_mask(ids.size(1), ids.device, offset)  # (1, 1, T, t+T)
        x = self._stack(ids, offset, mask, False, cache)
        return self.generator(x), cache.advanced(ids.size(1))

    def _stack(self, ids: Tensor, offset: int, mask: Tensor | None, causal: bool, cache: DecoderCache | None) -> Tensor:
        x = self.embed(ids, offset)  # (B, T, d_model)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, cache=cache, index=i, causal=causal)
        return self.norm(x)  # (B, T, d_model)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
