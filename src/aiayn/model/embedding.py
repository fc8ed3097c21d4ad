"""Token embeddings and positions (paper §3.4, §3.5)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) (§3.5).

    Interleaved sin/cos as written in the paper; positions count from 0.
    """
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d/2,)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (P, d/2)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.float()


class Positions(nn.Module):
    """Adds positions to scaled token embeddings: sinusoidal (paper default) or learned (Table 3 row E).

    `offset` is the absolute position of the first input column, used by cached decoding: an int
    for the whole batch, or a (B,) tensor of per-row offsets (continuous batching, where rows that
    joined a running batch later are at earlier positions).
    """

    table: nn.Embedding | Tensor  # learned: an embedding; sinusoidal: a (max_positions, d_model) buffer

    def __init__(self, kind: str, max_positions: int, d_model: int) -> None:
        super().__init__()
        self.kind, self.max_positions, self.d_model = kind, max_positions, d_model
        if kind == "learned":
            self.table = nn.Embedding(max_positions, d_model)
        else:
            self.register_buffer("table", sinusoidal_table(max_positions, d_model), persistent=False)

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        first = offset if not isinstance(offset, Tensor) else int(offset.max()) if offset.numel() else 0
        end = first + x.size(1)
        if end > self.max_positions:
            if self.kind == "learned":
                raise ValueError(
                    f"sequence reaches position {end} but learned positions stop at max_positions="
                    f"{self.max_positions}; shorten the input or raise max_positions"
                )
            # Sinusoids extrapolate (the reason §3.5 prefers them): extend the table.
            table = sinusoidal_table(max(end, 2 * self.max_positions), self.d_model).to(x.device)
            self.table, self.max_positions = table, table.size(0)
        pe = self.table.weight if isinstance(self.table, nn.Embedding) else self.table  # learned or sinusoidal
        if isinstance(offset, Tensor):
            pos = offset[:, None] + torch.arange(x.size(1), device=x.device)  # (B, T)
            return x + pe[pos].to(x.dtype)  # (B, T, d) + (B, T, d)
        return x + pe[offset:end].to(x.dtype)  # (B, T, d) + (T, d)


class Embedding(nn.Module):
    """token ids -> dropout(E[x] * sqrt(d_model) + PE) (§3.4, §5.4). `tokens` may be shared for tying."""

    def __init__(self, tokens: nn.Embedding, positions: Positions, dropout: float) -> None:
        super().__init__()
        self.tokens, self.positions = tokens, positions
        self.scale = math.sqrt(tokens.embedding_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: Tensor, offset: int | Tensor = 0) -> Tensor:
        x = self.tokens(ids) * self.scale  # (B, T, d_model)
        return self.dropout(self.positions(x, offset))
