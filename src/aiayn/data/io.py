"""Reading line-aligned text: plain or gzip (detected by magic bytes), strict UTF-8.

Errors name the file (and line) so that a bad corpus fails before any training starts.
`LineStream` reads a file of any size in blocks (memory bounded by the block, not the file);
`read_lines` reads a small file whole.
"""

from __future__ import annotations

import gzip
import os
import sys
import zlib
from pathlib import Path
from typing import BinaryIO

from aiayn.data.errors import DataError

_GZIP_MAGIC = b"\x1f\x8b"


class LineStream:
    """The lines of a plain or gzipped file, without line endings (\\n or \\r\\n), read in blocks.

    `take(n)` returns the next n lines (fewer at the end); `position` is how many bytes of the file
    (compressed bytes for gzip) have been read, for progress bars.
    """

    def __init__(self, path: str | os.PathLike, block: int = 1 << 22) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(f"file not found: {self.path}")
        self._raw: BinaryIO = open(self.path, "rb")
        self._f: BinaryIO = self._raw
        if self._raw.read(2) == _GZIP_MAGIC:
            self._raw.seek(0)
            self._f = gzip.GzipFile(fileobj=self._raw)  # type: ignore[assignment]
        else:
            self._raw.seek(0)
        self.block, self.lines_read = block, 0
        self._buf: list[bytes] = []
        self._pos = 0
        self._tail = b""
        self._eof = False

    @property
    def position(self) -> int:
        return self._raw.tell()

    def take(self, n: int) -> list[bytes]:
        while len(self._buf) - self._pos < n and not self._eof:
            self._fill()
        out = self._buf[self._pos : self._pos + n]
        self._pos += len(out)
        self.lines_read += len(out)
        return out

    def _fill(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        try:
            data = self._f.read(self.block)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{self.path}: corrupt gzip file ({e})") from None
        if not data:
            self._eof = True
            if self._tail:  # a last line without a newline
                self._buf.append(self._tail[:-1] if self._tail.endswith(b"\r") else self._tail)
                self._tail = b""
            return
        data = self._tail + data
        lines = data.split(b"\n")
        self._tail = lines.pop()
        if b"\r" in data:
            lines = [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
        self._buf.extend(lines)

    def count_rest(self) -> int:
        """Lines read so far plus the lines still unread (reads to the end; for error messages)."""
        while not self._eof:
            self._fill()
            self.lines_read += len(self._buf) - self._pos
            self._pos = len(self._buf)
        return self.lines_read

    def close(self) -> None:
        self._f.close()
        self._raw.close()

    def __enter__(self) -> LineStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_bytes_lines(path: str | os.PathLike) -> list[bytes]:
    """Raw lines of a plain or gzipped file, without line endings (\\n or \\r\\n): the whole file."""
    with LineStream(path) as stream:
        return stream.take(sys.maxsize)


def decode_blob(path: str | os.PathLike, blob: bytes, first_line: int = 1) -> str:
    """Strict UTF-8 decode of `blob` (lines joined by \\n whose first is line `first_line` of `path`);
    an invalid byte sequence names the file and the 1-based line number."""
    try:
        return blob.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + blob.count(b"\n", 0, e.start)
        col = e.start - (blob.rfind(b"\n", 0, e.start) + 1)
        raise DataError(f"{path}: line {line} is not valid UTF-8 ({e.reason} at byte {col})") from None


def decode_lines(path: str | os.PathLike, lines: list[bytes]) -> list[str]:
    """Strict UTF-8 decode; an invalid byte sequence names the file and the 1-based line number."""
    return decode_blob(path, b"\n".join(lines)).split("\n") if lines else []


def read_lines(path: str | os.PathLike) -> list[str]:
    """All lines of a plain or gzipped UTF-8 text file (line endings removed).

    Raises DataError for a missing file, a corrupt gzip stream or invalid UTF-8 (naming the line).
    """
    return decode_lines(path, read_bytes_lines(path))


def read_parallel(src_path: str | os.PathLike, tgt_path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Read a line-aligned pair; the line counts are compared before any decoding."""
    src_b, tgt_b = read_bytes_lines(src_path), read_bytes_lines(tgt_path)
    check_counts(src_path, len(src_b), tgt_path, len(tgt_b))
    return decode_lines(src_path, src_b), decode_lines(tgt_path, tgt_b)


def check_counts(src_path: str | os.PathLike, n_src: int, tgt_path: str | os.PathLike, n_tgt: int) -> None:
    if n_src != n_tgt:
        raise DataError(f"line counts differ: {src_path} has {n_src} lines, {tgt_path} has {n_tgt}")
