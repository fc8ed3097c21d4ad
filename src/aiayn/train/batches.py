"""The loop's endless supply of batches across epochs (train.max_epochs ends it)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from aiayn.train.runtime import TrainingError


class _EpochLimit(Exception):
    pass


class Batches:
    """Endless batches across epochs; the BatchIterator itself holds the resumable position."""

    def __init__(self, iterator: Any, max_epochs: int | None) -> None:
        self.it, self.max_epochs = iterator, max_epochs
        self._gen: Generator[Any, None, None] | None = None

    def next(self) -> Any:
        for _ in range(2):
            if self.max_epochs and self.it.epoch >= self.max_epochs:
                raise _EpochLimit
            if self._gen is None:
                self._gen = iter(self.it)  # starts at the iterator's current (possibly restored) position
            try:
                return next(self._gen)
            except StopIteration:  # the iterator has moved itself to the next epoch
                self._gen = None
        raise TrainingError("the training split produced an empty epoch")

    def take(self, n: int) -> list[Any]:
        """Up to `n` batches; fewer (maybe none) when train.max_epochs ends the data."""
        micro: list[Any] = []
        try:
            for _ in range(n):
                micro.append(self.next())
        except _EpochLimit:
            pass
        return micro

    def close(self) -> None:
        """Stop the epoch in progress (and its prefetch thread); the iterator keeps its position."""
        if self._gen is not None:
            self._gen.close()
            self._gen = None
