"""Configuration dataclasses.

`ModelConfig` describes one Transformer (paper §3, Table 3). Presets follow the paper's
`base` and `big` rows; `small` and `tiny` are CPU-scale sizes for Multi30k and tests.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

# Special ids, shared by the tokenizer, the data layer and the model (DESIGN.md).
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


@dataclass
class ModelConfig:
    vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    dropout: float = 0.1  # §5.4: sub-layer outputs and embedding+position sums
    attention_dropout: float = 0.0  # on attention weights; the paper does not use it
    positional: Literal["sinusoidal", "learned"] = "sinusoidal"  # §3.5 / Table 3 row (E)
    max_positions: int = 1024
    norm: Literal["post", "pre"] = "post"  # §3.1: LayerNorm(x + Sublayer(x))
    tie_embeddings: bool = True  # §3.4: one matrix for both embeddings and the pre-softmax projection
    d_head: int | None = None  # d_k = d_v; None means d_model / n_heads (§3.2.2). Table 3 (B) sets it.
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    def __post_init__(self) -> None:
        if self.vocab_size <= max(self.pad_id, self.bos_id, self.eos_id):
            raise ValueError(f"vocab_size={self.vocab_size} is too small for the special ids")
        if self.d_head is None and self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.positional not in ("sinusoidal", "learned"):
            raise ValueError(f"positional must be 'sinusoidal' or 'learned', not {self.positional!r}")
        if self.norm not in ("post", "pre"):
            raise ValueError(f"norm must be 'post' or 'pre', not {self.norm!r}")
        if not 0.0 <= self.dropout < 1.0 or not 0.0 <= self.attention_dropout < 1.0:
            raise ValueError("dropout rates must lie in [0, 1)")

    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @classmethod
    def preset(cls, name: str, vocab_size: int, **overrides: Any) -> "ModelConfig":
        """A named size: `base`/`big` are Table 3's rows; `small`/`tiny` suit CPU-scale data."""
        if name not in PRESETS:
            raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls(vocab_size=vocab_size, **{**PRESETS[name], **overrides})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown ModelConfig fields: {sorted(unknown)}")
        return cls(**d)


PRESETS: dict[str, dict[str, Any]] = {
    # Table 3, "base": N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1 (65M parameters with 37k BPE)
    "base": dict(d_model=512, n_heads=8, d_ff=2048, n_encoder_layers=6, n_decoder_layers=6, dropout=0.1),
    # Table 3, "big": N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3 (213M)
    "big": dict(d_model=1024, n_heads=16, d_ff=4096, n_encoder_layers=6, n_decoder_layers=6, dropout=0.3),
    # CPU-scale sizes for Multi30k-like data (about 30k sentence pairs)
    "small": dict(d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=3, n_decoder_layers=3, dropout=0.1),
    "tiny": dict(d_model=64, n_heads=4, d_ff=256, n_encoder_layers=2, n_decoder_layers=2, dropout=0.1),
}


@dataclass
class DataConfig:
    """Where parallel text comes from and how it becomes batches (paper §5.1)."""

    corpus: Literal["multi30k", "files", "embedded"] = "multi30k"
    src_lang: str = "de"
    tgt_lang: str = "en"
    data_dir: str | None = None  # offline mirror laid out like Multi30k; else $AIAYN_DATA_DIR, cache, download
    # corpus == "files": plain or gzipped line-aligned text
    train_src: str | None = None
    train_tgt: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None
    vocab_size: int = 8000  # joint sentencepiece BPE; the paper's WMT EN-DE uses 37000
    max_len: int = 256  # training pairs longer than this (subwords, either side) are dropped
    max_len_ratio: float = 9.0  # ... and pairs whose length ratio exceeds this
    max_tokens: int = 4096  # per batch, counted on padded source and padded target separately
    embedded_size: int = 20000  # pairs in the generated offline corpus


@dataclass
class DecodeConfig:
    """Search settings (paper §6.1: beam 4, length penalty 0.6, max length = input + 50)."""

    beam: int = 4
    length_penalty: float = 0.6  # GNMT lp(Y) = ((5 + |Y|) / 6)^alpha; 0 disables
    max_len_a: float = 1.0  # max output length = a * source length + b
    max_len_b: int = 50
    max_tokens: int = 8192  # translation batches, counted on source tokens x beam
