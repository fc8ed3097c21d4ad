"""Encoded splits: token ids of all sentences in one flat array plus offsets, saved as .npy.

Compact (uint16 when the vocabulary fits, else int32) and memory-mapped on load, so a second run
reuses the arrays without re-encoding (paper §5.1 data, encoded once).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from aiayn.config import EOS_ID


class EncodedSplit:
    """One split as id arrays. Source ids end with EOS; target ids are the bare BPE pieces.

    `src_lengths[i]` counts the EOS; `tgt_lengths[i]` counts pieces only (collate adds BOS / EOS).
    `index[i]` is the example's line number in the raw corpus (training drops some lines).
    """

    def __init__(self, src: np.ndarray, src_offsets: np.ndarray, tgt: np.ndarray, tgt_offsets: np.ndarray,
                 index: np.ndarray | None = None) -> None:
        assert len(src_offsets) == len(tgt_offsets) >= 1
        self.src, self.src_offsets = src, src_offsets  # flat ids, (N+1,) offsets
        self.tgt, self.tgt_offsets = tgt, tgt_offsets
        self.src_lengths = np.diff(src_offsets).astype(np.int64)  # (N,)
        self.tgt_lengths = np.diff(tgt_offsets).astype(np.int64)  # (N,)
        n = len(self.src_lengths)
        self.index = np.arange(n, dtype=np.int64) if index is None else np.asarray(index, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.src_lengths)

    def pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(src ids incl. EOS, tgt ids without BOS/EOS) of example i."""
        s0, s1 = self.src_offsets[i], self.src_offsets[i + 1]
        t0, t1 = self.tgt_offsets[i], self.tgt_offsets[i + 1]
        return np.asarray(self.src[s0:s1], dtype=np.int64), np.asarray(self.tgt[t0:t1], dtype=np.int64)

    @classmethod
    def from_ids(cls, src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]],
                 vocab_size: int = 65536, index: Sequence[int] | None = None) -> "EncodedSplit":
        """Build from lists of ids; EOS is appended to every source sentence here."""
        dtype = np.uint16 if vocab_size <= 65536 else np.int32
        src_ids = [list(s) + [EOS_ID] for s in src_ids]
        return cls(*_flatten(src_ids, dtype), *_flatten(tgt_ids, dtype),
                   index=None if index is None else np.asarray(index, dtype=np.int64))

    def save(self, directory: str | os.PathLike, name: str) -> None:
        d = Path(directory)
        for key, arr in (("src", self.src), ("src_offsets", self.src_offsets), ("tgt", self.tgt),
                         ("tgt_offsets", self.tgt_offsets), ("index", self.index)):
            np.save(d / f"{name}.{key}.npy", np.asarray(arr))

    @classmethod
    def load(cls, directory: str | os.PathLike, name: str) -> "EncodedSplit":
        d = Path(directory)
        arrs = {k: np.load(d / f"{name}.{k}.npy", mmap_mode="r")
                for k in ("src", "src_offsets", "tgt", "tgt_offsets", "index")}
        # offsets/index are small and hot: keep them in memory; token arrays stay memory-mapped
        return cls(arrs["src"], np.array(arrs["src_offsets"]), arrs["tgt"], np.array(arrs["tgt_offsets"]),
                   index=np.array(arrs["index"]))


def _flatten(seqs: Sequence[Sequence[int]], dtype: type) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter((t for s in seqs for t in s), dtype=dtype, count=int(offsets[-1]))
    return flat, offsets
