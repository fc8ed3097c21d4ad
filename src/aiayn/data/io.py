"""Reading line-aligned text: plain or gzip (detected by magic bytes), strict UTF-8.

Errors name the file (and line) so that a bad corpus fails before any training starts.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

from aiayn.data.errors import DataError

_GZIP_MAGIC = b"\x1f\x8b"


def read_bytes_lines(path: str | os.PathLike) -> list[bytes]:
    """Raw lines of a plain or gzipped file, without line endings (\\n or \\r\\n)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"file not found: {path}")
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise DataError(f"{path}: corrupt gzip file ({e})") from None
    if not data:
        return []
    lines = data.split(b"\n")
    if lines[-1] == b"":  # a trailing newline does not start another line
        lines.pop()
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


def decode_lines(path: str | os.PathLike, lines: list[bytes]) -> list[str]:
    """Strict UTF-8 decode; an invalid byte sequence names the file and the 1-based line number."""
    if not lines:
        return []
    try:  # fast path: the whole file at once
        return b"\n".join(lines).decode("utf-8").split("\n")
    except UnicodeDecodeError:
        pass
    for i, ln in enumerate(lines, 1):
        try:
            ln.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"{path}: line {i} is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    raise AssertionError("unreachable")


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
