"""The encoder-decoder Transformer (paper §3, Figure 1).

memory = model.encode(src)                                   # (B, S, d_model)
logits = model.decode(tgt_in, memory, padding_mask(src))     # (B, T, V), teacher forcing
cache = model.init_cache(memory, src_mask)                   # incremental decoding:
logits, cache = model.step(step_ids, cache)                  # (B, 1, V) per step
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.config import ModelConfig
from aiayn.model.attention import MIN_KEYS, CrossAttention, SelfAttention
from aiayn.model.cache import KV, DecoderCache
from aiayn.model.embedding import Embedding, Positions
from aiayn.model.layers import DecoderLayer, EncoderLayer
from aiayn.model.masks import causal_mask, decoder_mask, padding_mask

AttentionWeights = dict[str, list[Tensor]]  # "encoder" | "decoder" | "cross" -> per layer (B, h, T_q, T_k)


def init_parameters(module: nn.Module, d_model: int) -> None:
    """Xavier-uniform projections, zero biases, embeddings N(0, d_model^-0.5) (fairseq, tensor2tensor);
    the same for every family built from these layers."""
    fused = {
        f"{n}.{'qkv' if isinstance(m, SelfAttention) else 'kv'}.weight": m.sizes  # [W^Q | W^K | W^V], [W^K | W^V]
        for n, m in module.named_modules()
        if isinstance(m, (SelfAttention, CrossAttention))
    }
    for name, p in module.named_parameters():
        if p.dim() == 2 and "embed" not in name:
            if name in fused:
                for block in p.data.split(fused[name], dim=0):
                    nn.init.xavier_uniform_(block)  # each projection as its own matrix
            else:
                nn.init.xavier_uniform_(p)
        elif p.dim() == 1 and name.endswith("bias"):
            nn.init.zeros_(p)
    for emb in {id(m): m for m in module.modules() if isinstance(m, nn.Embedding)}.values():
        nn.init.normal_(emb.weight, mean=0.0, std=d_model**-0.5)
        if emb.padding_idx is not None:
            with torch.no_grad():
                emb.weight[emb.padding_idx].zero_()


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = c = config

        # §3.4: one embedding matrix shared by source, target and the pre-softmax projection.
        src_tokens = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        tgt_tokens = src_tokens if c.tie_embeddings else nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        self.src_embed = Embedding(src_tokens, Positions(c.positional, c.max_positions, c.d_model), c.dropout)
        self.tgt_embed = Embedding(tgt_tokens, Positions(c.positional, c.max_positions, c.d_model), c.dropout)

        self.encoder = nn.ModuleList(EncoderLayer(c) for _ in range(c.n_encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(c) for _ in range(c.n_decoder_layers))
        # Pre-LN stacks end with a LayerNorm; post-LN outputs are normalised already.
        pre = c.norm == "pre"
        self.encoder_norm = nn.LayerNorm(c.d_model) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if pre else nn.Identity()

        self.generator = nn.Linear(c.d_model, c.vocab_size, bias=False)  # pre-softmax projection
        self.reset_parameters()
        if c.tie_embeddings:
            self.generator.weight = src_tokens.weight

    def reset_parameters(self) -> None:
        init_parameters(self, self.config.d_model)

    # -- encoder -------------------------------------------------------------------------------

    def encode(self, src: Tensor, attention: AttentionWeights | None = None) -> Tensor:
        """(B, S) source ids -> memory (B, S, d_model)."""
        mask = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        x = self.src_embed(src)
        for layer in self.encoder:
            x = layer(x, mask, None if attention is None else attention["encoder"])
        return self.encoder_norm(x)

    # -- decoder -------------------------------------------------------------------------------

    def init_cache(self, memory: Tensor, src_mask: Tensor, capacity: int = 64) -> DecoderCache:
        """Cross-attention keys/values of every decoder layer, computed once per source.
        `capacity`: target positions to preallocate self-attention buffers for (they grow if needed)."""
        short = MIN_KEYS - memory.size(1) if memory.device.type == "cpu" else 0
        cross = []
        for layer in self.decoder:
            k, v = cast(DecoderLayer, layer).cross_attn.project(memory)  # (B, h, S, d_k), (B, h, S, d_v) views
            if short > 0:  # CPU: a few zero keys, masked below, make every step's products faster (MIN_KEYS)
                k, v = F.pad(k, (0, 0, 0, short)), F.pad(v, (0, 0, 0, short))
            # Contiguous copies, made once: per-head views of the fused K|V projection cannot be batched
            # by matmul as they are, so every step's Q K^T and P V would copy them again.
            cross.append((k.contiguous(), v.contiguous()))
        if short > 0:
            src_mask = F.pad(src_mask, (0, short), value=False)  # (B, 1, 1, MIN_KEYS)
        return DecoderCache(cross, src_mask, capacity=capacity)

    def decode(
        self,
        tgt_in: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        attention: AttentionWeights | None = None,
        keep: Tensor | None = None,
    ) -> Tensor:
        """Teacher forcing: target ids (B, T) (BOS + y), memory (B, S, d_model), src_mask (B, 1, 1, S)
        -> logits (B, T, V), position t predicting y_{t+1} from positions <= t (§3.2.3).

        Self-attention runs SDPA's causal kernel without key padding: with right padding that equals
        the (B, 1, T, T) causal & padding mask at real positions (masks.py). With `attention` (plots)
        the explicit `decoder_mask` is used. With `keep`, (n,) int64 indices into the B*T positions
        (row-major), only those positions are projected: logits (n, V). Training keeps the non-pad
        targets and so skips the pre-softmax projection and the loss on padding; the trainer
        computes the indices on the host, so CUDA needs no sync.
        """
        cross_kv = [cast(DecoderLayer, layer).cross_attn.project(memory) for layer in self.decoder]
        if attention is None:
            self_mask, causal = None, True
        else:
            self_mask, causal = decoder_mask(tgt_in, self.config.pad_id), False  # (B, 1, T, T)
        x = self._decoder(tgt_in, 0, cross_kv, src_mask, self_mask, causal, None, attention)  # (B, T, d_model)
        if keep is not None:
            x = x.flatten(0, 1).index_select(0, keep)  # (n, d_model)
        return self.generator(x)  # (B, T, V) or (n, V)

    def step(self, ids: Tensor, cache: DecoderCache) -> tuple[Tensor, DecoderCache]:
        """Incremental decoding: the next target ids (B, T) (usually T = 1) after the `cache.length`
        positions in `cache` (from `init_cache`) -> (logits (B, T, V), the extended cache).

        Memory and source mask come from the cache. Inference only (no autograd: the cache writes in
        place), and it spends the cache value it is given: keep working with the one returned.
        """
        if torch.is_grad_enabled():  # searches run under inference_mode: no context switch per step there
            with torch.no_grad():
                return self.step(ids, cache)
        cache.check_fresh()
        T = ids.size(1)
        # One new position sees every cached key; several need the causal triangle, offset.
        self_mask = None if T == 1 else causal_mask(T, ids.device, cache.length)  # (1, 1, T, t+T)
        offset: int | Tensor = cache.length
        if cache.start is not None:  # rows that joined later (continuous batching, cache.py): their own
            offset = cache.length - cache.start  # positions (B,), and no keys before their first column
            keys = (torch.arange(cache.length + T, device=ids.device) >= cache.start[:, None])[:, None, None, :]
            self_mask = keys if self_mask is None else self_mask & keys  # (B, 1, T, t+T)
        x = self._decoder(ids, offset, cache.cross_kv, cache.src_mask, self_mask, False, cache, None)
        return self.generator(x), cache.advanced(ids.size(1))  # (B, T, V)

    def _decoder(
        self,
        ids: Tensor,
        offset: int | Tensor,
        cross_kv: list[KV],
        src_mask: Tensor,
        self_mask: Tensor | None,
        causal: bool,
        cache: DecoderCache | None,
        attention: AttentionWeights | None,
    ) -> Tensor:
        """The decoder stack (§3.1) on (B, T) ids at positions offset.. (an int, or (B,) per row) ->
        states (B, T, d_model)."""
        x = self.tgt_embed(ids, offset)  # (B, T, d_model)
        for i, (layer, kv) in enumerate(zip(self.decoder, cross_kv)):
            x = layer(x, self_mask, kv, src_mask, cache, i, attention, causal)
        return self.decoder_norm(x)

    def forward(
        self, src: Tensor, tgt_in: Tensor, attention: AttentionWeights | None = None, keep: Tensor | None = None
    ) -> Tensor:
        """Teacher forcing: (B, S) source, (B, T) target input (BOS + y) -> logits (B, T, V),
        or (n, V) at the flat positions `keep` (n,) (see `decode`)."""
        memory = self.encode(src, attention)
        return self.decode(tgt_in, memory, padding_mask(src, self.config.pad_id), attention=attention, keep=keep)

    def attention_weights(self, src: Tensor, tgt_in: Tensor) -> AttentionWeights:
        """Per-layer attention probabilities for plotting (explicit softmax path, slower)."""
        weights: AttentionWeights = {"encoder": [], "decoder": [], "cross": []}
        with torch.no_grad():
            self.forward(src, tgt_in, attention=weights)
        return weights

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())  # shared tensors count once
