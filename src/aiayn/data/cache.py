"""The prepared-data cache the preparation pipeline (`aiayn.data.pipeline`) builds through, for every kind
of example:

- where a cache is and how it is found and built: a cheap stamp key (settings plus each file's path,
  size and modification time, `file_stamp`) names the finished cache $AIAYN_HOME/prepared/<content key>
  in $AIAYN_HOME/stamps; `find_or_build` looks it up, else builds under the key's file lock
  ($AIAYN_HOME/locks, `lock_path`); `publish` fills a temporary directory renamed into place when
  complete and stamps the key; `copy_into_run` puts the tokenizer and the data report into a run;
- the seeded reservoir sample the tokenizer is trained on (`Reservoir`);
- the encoding workers: `worker_pool` starts them (or initialises this process when one is enough) and
  `map_ordered` runs chunks through them with results in order and bounded memory;
- the tokenizer: `spm_model_bytes` reads a given `data.spm_model`, `given_tokenizer` copies it into a
  cache, `train_tokenizer` trains one with sentencepiece's failures as one DataError line.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from aiayn.config import DataConfig
from aiayn.data.download import aiayn_home
from aiayn.data.errors import DataError
from aiayn.data.tokenizer import Tokenizer
from aiayn.fileio import atomic_write, file_lock

SPLITS = ("train", "valid", "test")
SAMPLE_SEED = 0  # the reservoir's seed: every node draws the same tokenizer sample

# -- finding and building a cache -------------------------------------------------------------------


def find_or_build(stamp: str, build: Callable[[], tuple[Path, bool]]) -> tuple[Path, bool]:
    """(the finished cache of a cheap key, whether it existed): found by its stamp, else built by
    `build` under the key's lock (processes that wait for the lock find what the builder made)."""
    final = _find_stamped(stamp)
    if final is not None:
        return final, True
    with _lock(lock_path(stamp)):
        final = _find_stamped(stamp)  # built by the process we waited for
        return (final, True) if final is not None else build()


def _find_stamped(stamp: str) -> Path | None:
    """The cache directory a finished build recorded for this cheap key, if it is still complete."""
    try:
        key = (aiayn_home() / "stamps" / stamp).read_text().strip()
    except OSError:
        return None
    d = aiayn_home() / "prepared" / key
    return d if (d / "report.json").is_file() else None


def file_stamp(path: Path) -> list[str | int]:
    """A file's part of a cheap key: its absolute path, size and modification time (read without
    reading the file)."""
    return [str(path.resolve()), (st := path.stat()).st_size, st.st_mtime_ns]


def lock_path(stamp: str) -> Path:
    """The file whose exclusive lock (fcntl.flock) the builder of a cheap key's cache holds."""
    return aiayn_home() / "locks" / f"{stamp}.lock"


def _lock(path: Path) -> AbstractContextManager[None]:
    return file_lock(path, "another process is preparing this corpus; waiting for it")


def publish(root: Path, key: str, stamp: str, fill: Callable[[Path], None]) -> tuple[Path, bool]:
    """(root/key, whether it was there already): unless the content key is cached (the same text
    elsewhere: a moved copy, touched files), `fill` a temporary directory that is renamed into place
    when complete; then stamp the cheap key. Runs under the key's lock."""
    final = root / key
    cached = (final / "report.json").is_file()
    if not cached:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(f".{stamp}.*"):  # left by a builder that was killed while holding this lock
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{stamp}.", dir=root))
        try:
            fill(tmp)
            try:
                os.rename(tmp, final)
            except OSError:  # another machine sharing this directory finished the same key first
                if not (final / "report.json").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    stamps = aiayn_home() / "stamps"
    stamps.mkdir(parents=True, exist_ok=True)
    atomic_write(stamps / stamp, lambda tmp: Path(tmp).write_text(key))
    return final, cached


def copy_into_run(final: Path, report: dict[str, Any], run_dir: str | os.PathLike) -> None:
    """The cache's spm.model and the data report into a run directory (the run is self-contained)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    model = (final / "spm.model").read_bytes()
    atomic_write(run_dir / "spm.model", lambda tmp: Path(tmp).write_bytes(model))
    (run_dir / "data_report.json").write_text(json.dumps(report, indent=1) + "\n")


# -- the tokenizer sample and the tokenizer ---------------------------------------------------------


class Reservoir:
    """A uniform sample of k training pairs (or lines) over a stream of unknown length (Algorithm R), seeded."""

    def __init__(self, k: int) -> None:
        self.k, self.seen = k, 0
        self.rng = np.random.default_rng(SAMPLE_SEED)
        self.items: list[tuple[int, bytes, bytes]] = []

    def add(self, src: list[bytes], tgt: list[bytes]) -> None:
        fill = max(0, min(len(src), self.k - len(self.items)))
        self.items.extend((self.seen + i, src[i], tgt[i]) for i in range(fill))
        if fill < len(src):  # item g replaces a random slot with probability k / (g + 1)
            g = np.arange(self.seen + fill, self.seen + len(src))
            slot = self.rng.integers(0, g + 1)
            for j in np.flatnonzero(slot < self.k).tolist():
                self.items[int(slot[j])] = (int(g[j]), src[fill + j], tgt[fill + j])
        self.seen += len(src)

    def pairs(self) -> list[tuple[int, bytes, bytes]]:
        return sorted(self.items)  # corpus order, so a corpus below k gives exactly its own text


def spm_model_bytes(cfg: DataConfig) -> bytes:
    """The bytes of the sentencepiece model `data.spm_model` names (a file, or a run directory's)."""
    assert cfg.spm_model is not None  # called only when the data config names one
    path = Path(cfg.spm_model)
    if path.is_dir():  # a run directory: its spm.model
        path = path / "spm.model"
    if not path.is_file():
        raise DataError(f"data.spm_model: {path} not found")
    return path.read_bytes()


def given_tokenizer(cfg: DataConfig, model_file: Path) -> Tokenizer:
    """`data.spm_model`'s bytes written to `model_file` (the cache's spm.model) and loaded from there."""
    model_file.write_bytes(spm_model_bytes(cfg))
    return Tokenizer(model_file)  # refuses a model with other special ids


def train_tokenizer(texts: list[str], model_file: Path, vocab_size: int, **options: Any) -> Tokenizer:
    """`Tokenizer.train` on `texts`; a failure of sentencepiece is one DataError line naming vocab_size."""
    try:
        return Tokenizer.train(texts, model_file, vocab_size=vocab_size, **options)
    except RuntimeError as e:  # e.g. vocab_size below the 256 byte pieces + characters of the corpus
        raise DataError(f"sentencepiece training failed (vocab_size={vocab_size}): {str(e).splitlines()[0]}") from None


# -- the encoding workers ---------------------------------------------------------------------------


@contextmanager
def worker_pool(
    workers: int | None, worthwhile: bool, initializer: Callable[..., None], initargs: tuple[Any, ...]
) -> Iterator[tuple[ProcessPoolExecutor | None, int]]:
    """(pool, number of workers): `workers` spawned processes (default: all cores) set up by
    `initializer(*initargs)`, shut down on leaving; None, with this process set up instead, when one
    worker is asked for or more would not be `worthwhile` (starting processes costs more)."""
    n_workers = max(1, workers if workers is not None else len(os.sched_getaffinity(0)))
    parallel = n_workers > 1 and worthwhile
    pool = (
        ProcessPoolExecutor(n_workers, mp_context=get_context("spawn"), initializer=initializer, initargs=initargs)
        if parallel
        else None
    )
    if pool is None:
        initializer(*initargs)
    try:
        yield pool, n_workers
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def map_ordered(
    pool: ProcessPoolExecutor | None, fn: Callable[[Any], Any], tasks: Iterator[Any], window: int
) -> Iterator[Any]:
    """fn over tasks, results in task order; at most `window` tasks submitted ahead (bounded memory)."""
    if pool is None:
        yield from map(fn, tasks)
        return
    pending: deque[Future] = deque()
    for task in tasks:
        pending.append(pool.submit(fn, task))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()
