"""Duplicates in a stream of pairs, in memory that does not hold the text: each pair's exact and near
(`letters`) hashes, 8 bytes each, kept in sorted arrays (`HashSet`), and the main process's pass that
marks every copy after the first (`Deduplicator`), in corpus order and across sources."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from aiayn.data.filters import Verdicts

# the reasons a pair is dropped for before any filter of a chain (aiayn.data.filters.reasons_of)
DUPLICATE, NEAR_DUPLICATE, EMPTY = "duplicates", "near_duplicates", "empty"
_ASCII_NON_LETTERS = {c: None for c in range(128) if not chr(c).isalpha()}  # str.translate: deleted


def letters(s: str) -> str:
    """The letters of `s`, case-folded: what stays of a line after case, digits, punctuation and spacing."""
    rest = s.casefold().translate(_ASCII_NON_LETTERS)  # most of what goes, at C speed
    return rest if rest.isalpha() or not rest else "".join(filter(str.isalpha, rest))


def pair_hashes(src: Sequence[str], tgt: Sequence[str], exact: bool) -> np.ndarray:
    """An 8-byte BLAKE2b hash of each pair as it is (exact), or of its two sides' letters (near)."""

    def key(s: str, t: str) -> bytes:
        return (f"{s}\t{t}" if exact else f"{letters(s)}\t{letters(t)}").encode()

    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(key(s, t), digest_size=8).digest(), "little") for s, t in zip(src, tgt)),
        dtype=np.uint64,
        count=len(src),
    )


class HashSet:
    """A set of 64-bit hashes in sorted arrays merged as they grow (8 bytes a member, flat in memory):
    `add` returns which of a batch were members already, or repeat an earlier one of the batch."""

    def __init__(self) -> None:
        self.levels: list[np.ndarray] = []

    def __len__(self) -> int:
        return sum(map(len, self.levels))

    def add(self, h: np.ndarray) -> np.ndarray:
        seen = np.zeros(len(h), dtype=bool)
        for level in self.levels:
            at = np.searchsorted(level, h)
            seen |= level[np.minimum(at, len(level) - 1)] == h
        uniq, first = np.unique(h, return_index=True)
        again = np.ones(len(h), dtype=bool)
        again[first] = False
        new = uniq[~np.isin(uniq, h[seen])]
        if len(new):
            self.levels.append(new)
            while len(self.levels) > 1 and len(self.levels[-2]) <= 2 * len(self.levels[-1]):
                b = self.levels.pop()
                a = self.levels.pop()
                self.levels.append(np.union1d(a, b))
        return seen | again


class Deduplicator:
    """The main process's pass over each batch's verdicts in corpus order: a pair whose exact hash came
    before is a duplicate, one whose near hash came before a near duplicate, whatever else its verdict;
    the first copy keeps its own."""

    def __init__(self, reasons: Sequence[str], seen: tuple[HashSet, HashSet] | None = None) -> None:
        self.exact, self.near = seen or (HashSet(), HashSet())  # shared: copies across sources count too
        self.dup, self.near_dup = 1 + reasons.index(DUPLICATE), 1 + reasons.index(NEAR_DUPLICATE)
        self.empty = 1 + reasons.index(EMPTY)

    def __call__(self, v: Verdicts) -> np.ndarray:
        assert v.exact is not None and v.near is not None
        codes = v.codes.copy()
        exact, near = self.exact.add(v.exact), self.near.add(v.near)
        full = codes != self.empty  # an empty pair is counted as empty, however often it comes
        codes[near & full] = self.near_dup
        codes[exact & full] = self.dup
        return codes
