"""The encoder-only Transformer (BERT): the paper's encoder stack, every position seeing left and right
context, with a masked-token head (tied to the embeddings) and a pooled first-token classifier.

    hidden = model(ids, segments)              # (B, T, d_model); segments 0/1 for sentence pairs
    logits = model.mlm_logits(hidden, where)   # (n, V) at the flat positions `where`
    logits = model.classify(ids, segments)     # (B, n_classes) from the first ([CLS]) position
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from aiayn.config import ModelConfig
from aiayn.model.embedding import Embedding, Positions
from aiayn.model.layers import EncoderLayer
from aiayn.model.masks import padding_mask
from aiayn.model.transformer import init_parameters


class EncoderOnly(nn.Module):
    """`n_encoder_layers` encoder layers; `n_classes` (default: the config's) adds the classification head."""

    def __init__(self, config: ModelConfig, n_classes: int | None = None) -> None:
        super().__init__()
        if n_classes is not None and n_classes != config.n_classes:
            config = dataclasses.replace(config, n_classes=n_classes, kind="encoder-only")
        self.config = c = config
        n_classes = c.n_classes
        tokens = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        self.embed = Embedding(tokens, Positions(c.positional, c.max_positions, c.d_model), c.dropout)
        self.segment_embed = nn.Embedding(2, c.d_model)  # sentence A / B of a pair (BERT)
        self.layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.n_encoder_layers))
        self.norm = nn.LayerNorm(c.d_model) if c.norm == "pre" else nn.Identity()
        # masked-token head: transform, then the tied embedding matrix plus a bias (BERT's)
        self.mlm_transform = nn.Sequential(nn.Linear(c.d_model, c.d_model), nn.GELU(), nn.LayerNorm(c.d_model))
        self.mlm_out = nn.Linear(c.d_model, c.vocab_size)
        self.n_classes = n_classes
        if n_classes is not None:
            self.pooler = nn.Linear(c.d_model, c.d_model)
            self.classifier = nn.Sequential(nn.Dropout(c.dropout), nn.Linear(c.d_model, n_classes))
        init_parameters(self, c.d_model)
        if c.tie_embeddings:
            self.mlm_out.weight = tokens.weight

    def forward(
        self, ids: Tensor, segments: Tensor | None = None, *, where: Tensor | None = None, classify: bool = False
    ) -> Tensor:
        """(B, T) ids (right padded), optional (B, T) segment ids -> hidden states (B, T, d_model); with
        `where` the masked-token logits there (`mlm_logits`), with `classify` the class logits
        (`classify`). The heads run inside forward so that a DDP wrapper sees the whole computation."""
        if where is not None:
            return self.mlm_logits(self.forward(ids, segments), where)
        if classify:
            return self.classify(ids, segments)
        mask = padding_mask(ids, self.config.pad_id)  # (B, 1, 1, T)
        x = self.embed(ids)
        # BERT adds a segment embedding to every token: segment 0 (sentence A) when none are given
        x = x + (self.segment_embed(segments) if segments is not None else self.segment_embed.weight[0])
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)

    def mlm_logits(self, hidden: Tensor, where: Tensor) -> Tensor:
        """Vocabulary logits (n, V) at the flat positions `where` (n,) of the (B, T) batch only."""
        return self.mlm_out(self.mlm_transform(hidden.flatten(0, 1).index_select(0, where)))

    def classify(self, ids: Tensor, segments: Tensor | None = None) -> Tensor:
        """(B, n_classes) logits from the first position's state (BERT's pooled [CLS])."""
        if self.n_classes is None:
            raise ValueError("this EncoderOnly has no classification head (n_classes=None)")
        pooled = torch.tanh(self.pooler(self.forward(ids, segments)[:, 0]))  # (B, d_model)
        return self.classifier(pooled)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
