"""Atomic file writes and an inter-process file lock, torch-free so every layer (config, metrics,
checkpoints, caches) can use them."""

from __future__ import annotations

import fcntl
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> Path:
    """Call `write(tmp_path)`, fsync it, then rename onto `path` (and fsync the directory)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


@contextmanager
def file_lock(path: str | os.PathLike, waiting: str | None = None) -> Iterator[None]:
    """An exclusive lock on `path` (fcntl.flock; released by the OS if this process dies), for processes
    of one machine that build the same cache. `waiting`: printed to stderr when another process holds
    it, so a user sees why nothing happens."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting:
                print(f"aiayn: {waiting} ({path})", file=sys.stderr, flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def replacing(*paths: str | os.PathLike) -> Iterator[list[Path]]:
    """Temporary files beside `paths` to write in a stream: each renamed onto its path when the block ends,
    all removed when it raises, so a file appears whole or not at all (atomic_write for a writer that
    is not one function call)."""
    finals = [Path(p) for p in paths]
    parts = [p.with_name(f".{p.name}.part") for p in finals]
    for p in parts:
        p.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield parts
        for part, final in zip(parts, finals):
            os.replace(part, final)
    finally:
        for part in parts:
            part.unlink(missing_ok=True)
