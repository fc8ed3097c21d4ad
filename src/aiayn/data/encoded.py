"""Encoded splits: token ids of all sentences in one flat array plus offsets, saved as .npy.

Compact (uint16 when the vocabulary fits, else int32) and memory-mapped on load, so a second run
reuses the arrays without re-encoding (paper §5.1 data, encoded once), and the ranks of one node share
one copy through the page cache. `NpyAppender` writes such an array piece by piece, so a corpus of any
size is encoded in bounded memory.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from aiayn.config import EOS_ID

_KEYS = ("src", "src_offsets", "tgt", "tgt_offsets", "index")


class EncodedSplit:
    """One split as id arrays. Source ids end with EOS; target ids are the bare BPE pieces.

    `src_lengths[i]` counts the EOS; `tgt_lengths[i]` counts pieces only (collate adds BOS / EOS).
    `index[i]` is the example's line number in the raw corpus (training drops some lines).
    """

    def __init__(
        self,
        src: np.ndarray,
        src_offsets: np.ndarray,
        tgt: np.ndarray,
        tgt_offsets: np.ndarray,
        index: np.ndarray | None = None,
        src_lengths: np.ndarray | None = None,
        tgt_lengths: np.ndarray | None = None,
    ) -> None:
        assert len(src_offsets) == len(tgt_offsets) >= 1
        self.src, self.src_offsets = src, src_offsets  # flat ids, (N+1,) offsets
        self.tgt, self.tgt_offsets = tgt, tgt_offsets
        self.src_lengths = np.diff(src_offsets) if src_lengths is None else src_lengths  # (N,)
        self.tgt_lengths = np.diff(tgt_offsets) if tgt_lengths is None else tgt_lengths  # (N,)
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
    def from_ids(
        cls,
        src_ids: Sequence[Sequence[int]],
        tgt_ids: Sequence[Sequence[int]],
        vocab_size: int = 65536,
        index: Sequence[int] | None = None,
    ) -> EncodedSplit:
        """Build from lists of ids; EOS is appended to every source sentence here."""
        dtype = id_dtype(vocab_size)
        src_ids = [list(s) + [EOS_ID] for s in src_ids]
        return cls(
            *_flatten(src_ids, dtype),
            *_flatten(tgt_ids, dtype),
            index=None if index is None else np.asarray(index, dtype=np.int64),
        )

    def save(self, directory: str | os.PathLike, name: str) -> None:
        d = Path(directory)
        for key, arr in zip(_KEYS, (self.src, self.src_offsets, self.tgt, self.tgt_offsets, self.index)):
            np.save(d / f"{name}.{key}.npy", np.asarray(arr))
        for side, lengths in (("src", self.src_lengths), ("tgt", self.tgt_lengths)):
            np.save(d / f"{name}.{side}_lengths.npy", np.asarray(lengths, dtype=np.int32))

    @classmethod
    def load(cls, directory: str | os.PathLike, name: str) -> EncodedSplit:
        """Every array memory-mapped: nothing is copied per process, whatever the corpus size."""
        d = Path(directory)
        arrs = {k: np.load(d / f"{name}.{k}.npy", mmap_mode="r") for k in _KEYS + ("src_lengths", "tgt_lengths")}
        return cls(
            arrs["src"],
            arrs["src_offsets"],
            arrs["tgt"],
            arrs["tgt_offsets"],
            index=arrs["index"],
            src_lengths=arrs["src_lengths"],
            tgt_lengths=arrs["tgt_lengths"],
        )


def id_dtype(vocab_size: int) -> type:
    return np.uint16 if vocab_size <= 65536 else np.int32


class NpyAppender:
    """A 1-D .npy file written in pieces: the header is rewritten with the final length on close.

    numpy pads every 1-D header so that its length can grow to any shape in place (the format's
    GROWTH_AXIS_MAX_DIGITS), so the data never moves. The file equals `np.save` of the whole array.
    """

    def __init__(self, path: str | os.PathLike, dtype: type) -> None:
        self.path, self.dtype, self.length = Path(path), np.dtype(dtype), 0
        self._f = open(self.path, "wb")
        self._header = self._write_header()

    def _write_header(self) -> int:
        self._f.seek(0)
        np.lib.format.write_array_header_1_0(
            self._f,
            {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (self.length,)},
        )
        return self._f.tell()

    def append(self, arr: np.ndarray) -> None:
        a = np.ascontiguousarray(arr, dtype=self.dtype)
        self._f.write(a.data)
        self.length += len(a)

    def close(self) -> None:
        end = self._f.tell()
        if self._write_header() != self._header:
            raise AssertionError(f"{self.path}: .npy header changed size")
        self._f.seek(end)
        self._f.close()


def _flatten(seqs: Sequence[Sequence[int]], dtype: type) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat: np.ndarray = np.fromiter((t for s in seqs for t in s), dtype=dtype, count=int(offsets[-1]))
    return flat, offsets
