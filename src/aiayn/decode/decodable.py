"""What greedy and beam search decode: a `Transformer`, an `Ensemble` of them, or a test's fake.

A structural type (nothing inherits from it): any object with these members can be searched.
The memory and the cache are opaque to the search: whatever `encode` returns goes to `init_cache`,
and the cache only has to `reorder` its rows and `keep` some of its sources.
"""

from __future__ import annotations

from typing import Any, Protocol

from torch import Tensor

from aiayn.config import ModelConfig


class SearchCache(Protocol):
    """The incremental decoder state (`aiayn.model.DecoderCache`, `EnsembleCache`)."""

    def reorder(self, rows: Tensor) -> Any:
        """Keep decoder rows `rows` (a LongTensor), in that order: the same kind of cache."""
        ...

    def keep(self, sources: Tensor) -> Any:
        """Keep only the given sources (and their rows): the same kind of cache."""
        ...


class Decodable(Protocol):
    """An encoder-decoder model as search sees it."""

    @property
    def config(self) -> ModelConfig:
        """pad_id, bos_id, eos_id, max_positions (and vocab_size) are read."""
        ...

    def encode(self, src: Tensor) -> Any:
        """(B, S) source ids -> the memory `init_cache` takes (a Tensor, or one per member)."""
        ...

    def init_cache(self, memory: Any, src_mask: Tensor, capacity: int = 64) -> Any:
        """Memory and the (B, 1, 1, S) source padding mask -> a `SearchCache` for B sources."""
        ...

    def step(self, ids: Tensor, cache: Any) -> tuple[Tensor, Any]:
        """Next-token ids (rows, T) -> (logits or log-probs (rows, T, V), the updated cache)."""
        ...
