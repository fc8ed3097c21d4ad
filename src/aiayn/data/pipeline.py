"""The one preparation pipeline: corpus text -> a tokenizer and encoded splits in the cache (paper §5.1).

Every task's data goes through the same stages, written once here; what differs is what an example is,
which an `ExampleKind` says (`aiayn.data.prepare.SentencePairs`: a sentence pair, or a tree pair with
the tree's markup kept whole by the tokenizer; `aiayn.data.text.TextLines`: a line, a labelled line, or
a document of running text):

  1. the kind resolves its sources (missing files and wrong settings fail here, first) and its settings;
  2. a cheap stamp key (settings plus each file's path, size and modification time) finds a finished
     cache without reading the corpus (`aiayn.data.cache.find_or_build`);
  3. otherwise, under the key's file lock, a scan reads every split once (small splits first, so their
     errors come fast): line counts, the content key (a hash of the text, so a moved copy of a corpus
     reuses its cache), and the kind's seeded sample of training examples (and labels);
  4. the kind trains its tokenizer on that sample, or copies `data.spm_model` in;
  5. worker processes encode chunks of lines in order (the kind's `Encoder`, one per process); the main
     process appends their arrays (flat ids, lengths, offsets, kept line numbers, the kind's extras) to
     memory-mapped .npy files in a temporary directory renamed into place when complete, so nothing
     half-written is ever taken for a finished cache;
  6. the kind loads the finished directory as its prepared data.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np

from aiayn.config import DataConfig
from aiayn.data.cache import (
    SPLITS,
    Reservoir,
    copy_into_run,
    file_stamp,
    find_or_build,
    map_ordered,
    publish,
    worker_pool,
)
from aiayn.data.download import aiayn_home
from aiayn.data.encoded import NpyAppender, id_dtype
from aiayn.data.tokenizer import Tokenizer

P = TypeVar("P")  # what a kind's prepared data is


class Chunk(NamedTuple):
    """Aligned lines of one split as read: one list per stream (a pair has two: source and target).
    `names` and `first` (the first line's number in its file, from 0) name a line in an error; `pos` is
    bytes of the split's files read so far (progress); `last`: the split's last chunk."""

    names: tuple[str, ...]
    first: int
    lines: tuple[list[bytes], ...]
    last: bool = False
    pos: int = 0


class Job(NamedTuple):
    """One chunk for an encoding worker: its streams' lines joined by newlines (one bytes object each)."""

    train: bool  # the training split: the kind's filters apply
    start: int  # the chunk's first line counted over its split (its examples' `index`)
    names: tuple[str, ...]
    first: int
    blobs: tuple[bytes, ...]
    last: bool
    pos: int
    lines: int  # how many (of each stream)


Encoder = Callable[[Job], dict[str, Any]]


@dataclass
class Scan:
    """What the scan found: the content key, each split's line count, the tokenizer sample (None with a
    given tokenizer) and the training split's labels, sorted (empty without labels)."""

    key: str
    counts: dict[str, int]
    sample: Reservoir | None
    labels: list[str]


class ExampleKind(ABC, Generic[P]):
    """What an example is, for the pipeline: how its sources are read and keyed, what the tokenizer learns
    from, how a chunk is encoded and how the encoded arrays are laid out and loaded. An instance is sent
    to every encoding process (keep it small: settings, not text)."""

    cfg: DataConfig
    streams = 1  # aligned lines per example as read (a pair: 2)
    stamp_field = "settings"  # the settings' name in the stamp key's JSON
    stamp_prefix = ""  # a stamp key starts with this (kinds keyed alike stay apart)
    unit = "lines"  # what the progress bar counts

    # -- sources and keys (main process)
    @abstractmethod
    def sources(self) -> dict[str, Any]:
        """Each split's text, resolved: missing files and contradictory settings raise DataError here."""

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """Everything besides the text that decides the cache's content (its key)."""

    @abstractmethod
    def source_stamp(self, source: Any) -> Any:
        """A split's part of the cheap key (None: nothing beyond the settings)."""

    @abstractmethod
    def source_bytes(self, source: Any) -> int:
        """The bytes a pass over this source reads (0: unknown), for the progress bar's total."""

    @abstractmethod
    def chunks(self, source: Any, n: int) -> Iterator[Chunk]:
        """The source's lines in chunks of n, each stream's aligned; a count mismatch raises DataError."""

    # -- scan and tokenizer (main process)
    @abstractmethod
    def reservoir(self) -> Reservoir | None:
        """An empty sample for the tokenizer; None when no tokenizer is trained."""

    @abstractmethod
    def sample(self, chunk: Chunk, sample: Reservoir | None, labels: set[str]) -> None:
        """Scan one chunk of training text into the tokenizer sample (and the label set)."""

    @abstractmethod
    def check_scan(self, scan: Scan) -> None:
        """Refuse what cannot be trained on (an empty training split, too few labels)."""

    @abstractmethod
    def tokenizer(self, source: Any, sample: Reservoir | None, model_file: Path) -> Tokenizer:
        """The tokenizer, trained on the sample (which it empties) or given, written to `model_file`."""

    @abstractmethod
    def worthwhile(self, scan: Scan, sources: dict[str, Any], chunk_lines: int) -> bool:
        """Whether encoding in worker processes pays for starting them."""

    # -- encoding (a worker process, or the main one)
    @abstractmethod
    def encoder(self, model: bytes, labels: list[str]) -> Encoder:
        """The function that encodes one job: arrays (`src`, `tgt`, `src_lengths`, `tgt_lengths`,
        `index` of the kept lines within the chunk, and the kind's own) and the counters `counters` names."""

    counters: tuple[str, ...] = ()

    # -- the cache's layout and report (main process)
    @abstractmethod
    def arrays(self, dtype: type) -> dict[str, type]:
        """Each array a split writes besides the offsets (`<split>.<name>.npy`), with its dtype."""

    def tail(self, ends: dict[str, int], lines: int) -> dict[str, Any] | None:
        """Arrays appended after a split's last chunk (running text ends its one example there)."""
        return None

    @abstractmethod
    def report(self, key: str, tok: Tokenizer, sampled: int | None, labels: list[str]) -> dict[str, Any]:
        """The report's opening fields; the pipeline adds "splits", "workers" and "seconds"."""

    @abstractmethod
    def split_report(
        self, report: dict[str, Any], counts: dict[str, int], examples: int, ends: dict[str, int]
    ) -> dict[str, Any]:
        """One split's line of the report, from its summed counters, examples kept and tokens written."""

    @abstractmethod
    def check_report(self, report: dict[str, Any], scan: Scan) -> None:
        """Refuse a build that kept no training example; complete the report's totals."""

    @abstractmethod
    def load(self, directory: Path) -> P:
        """The prepared data of a finished cache directory."""


@dataclass(frozen=True)
class Options:
    """How to prepare, not what: encoding processes (None: all cores; 1: this one), progress bars on
    stderr, and lines per chunk handed to a worker at once."""

    workers: int | None = None
    progress: bool = False
    chunk_lines: int = 20_000


# (workers, progress) for preparations that do not name them: `preparing` sets them around a task's own
# prepare function, which takes only the run's config (`aiayn data prepare --workers N --no-progress`)
_DEFAULTS: ContextVar[tuple[int | None, bool | None]] = ContextVar("aiayn_prepare_defaults", default=(None, None))


@contextmanager
def preparing(workers: int | None = None, progress: bool | None = None) -> Iterator[None]:
    """Within: the preparations that leave `workers` or `progress` unset take these."""
    token = _DEFAULTS.set((workers, progress))
    try:
        yield
    finally:
        _DEFAULTS.reset(token)


def options(workers: int | None, progress: bool | None, chunk_lines: int) -> Options:
    """Options from a caller's arguments; unset ones from `preparing`, else all cores and bars when
    stderr is a terminal."""
    default_workers, default_progress = _DEFAULTS.get()
    progress = default_progress if progress is None else progress
    return Options(
        default_workers if workers is None else workers,
        sys.stderr.isatty() if progress is None else progress,
        chunk_lines,
    )


def prepare_examples(kind: ExampleKind[P], run_dir: str | os.PathLike | None, options: Options) -> P:
    """`kind`'s prepared data: found by its stamp, else built under the key's lock; the tokenizer and
    the data report copied into `run_dir`. Safe to call from many processes at once."""
    t0 = time.perf_counter()
    sources = kind.sources()  # missing files and unknown settings fail here, first
    settings = kind.settings()
    stamp = stamp_key(kind, settings, sources)
    final, cached = find_or_build(stamp, lambda: _build(kind, sources, settings, stamp, t0, options))
    out: Any = kind.load(final)
    out.report["cached"] = cached
    out.report["seconds_total"] = round(time.perf_counter() - t0, 3)
    if run_dir is not None:
        copy_into_run(final, out.report, run_dir)
    return out  # type: ignore[no-any-return]


def stamp_key(kind: ExampleKind[Any], settings: dict[str, Any], sources: dict[str, Any]) -> str:
    """Settings plus each split's stamp (files: absolute path, size, modification time): decided
    without reading the text."""
    files = {split: s for split, source in sources.items() if (s := kind.source_stamp(source)) is not None}
    blob = json.dumps({kind.stamp_field: settings, "files": files}, sort_keys=True).encode()
    return kind.stamp_prefix + hashlib.sha256(blob).hexdigest()[: 16 - len(kind.stamp_prefix)]


def files_stamp(paths: Any) -> list[list[str | int]]:
    """The stamps of a split's files (`aiayn.data.cache.file_stamp`), in order."""
    return [file_stamp(p) for p in paths]


# -- scan and build ---------------------------------------------------------------------------------


def _build(
    kind: ExampleKind[Any], sources: dict[str, Any], settings: dict[str, Any], stamp: str, t0: float, options: Options
) -> tuple[Path, bool]:
    """Scan, then (unless the content is cached already) build into a temporary directory renamed into
    place; finally stamp the cheap key. Runs under the key's lock."""
    scan = _scan(kind, sources, settings, options)
    kind.check_scan(scan)
    return publish(
        aiayn_home() / "prepared", scan.key, stamp, lambda out: _build_into(kind, sources, scan, out, t0, options)
    )


def _scan(kind: ExampleKind[Any], sources: dict[str, Any], settings: dict[str, Any], options: Options) -> Scan:
    """Pass 1: line counts of every split, the content key (settings, then each split's count and the
    hash of each of its streams), the tokenizer sample and the labels of the training split."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    sample, labels, counts = kind.reservoir(), set[str](), {}
    bar = _Progress(options.progress, "aiayn data: scan", kind, sources)
    try:
        for split in ("valid", "test", "train"):
            hashes: list[Any] = []
            n = 0
            for chunk in kind.chunks(sources[split], options.chunk_lines):
                hashes = hashes or [hashlib.sha256() for _ in chunk.lines]
                for stream, lines in zip(hashes, chunk.lines):
                    stream.update(b"\n".join(lines) + b"\n")
                if split == "train":
                    kind.sample(chunk, sample, labels)
                n += len(chunk.lines[0])
                bar.update(len(chunk.lines[0]), chunk.pos)
            bar.split_done(sources[split])
            counts[split] = n
            hashes = hashes or [hashlib.sha256() for _ in range(kind.streams)]  # a split with no lines
            h.update(f"{split}:{n}:".encode() + b"".join(x.digest() for x in hashes))
    finally:
        bar.close()
    return Scan(h.hexdigest()[:16], counts, sample, sorted(labels))


def _build_into(
    kind: ExampleKind[Any], sources: dict[str, Any], scan: Scan, out: Path, t0: float, options: Options
) -> None:
    t1 = time.perf_counter()
    sampled = None if scan.sample is None else len(scan.sample.items)
    tok = kind.tokenizer(sources["train"], scan.sample, out / "spm.model")  # empties the sample
    t2 = time.perf_counter()
    report = kind.report(scan.key, tok, sampled, scan.labels)
    report["splits"] = report.get("splits", {})
    init = (kind, (out / "spm.model").read_bytes(), scan.labels)
    worthwhile = kind.worthwhile(scan, sources, options.chunk_lines)
    with worker_pool(options.workers, worthwhile, _init_worker, init) as (pool, n_workers):
        bar = _Progress(options.progress, "aiayn data: encode", kind, sources)
        try:
            for split in SPLITS:
                counts, examples, ends = _encode_split(
                    kind, split, sources[split], out, id_dtype(tok.vocab_size), pool, n_workers, options, bar
                )
                report["splits"][split] = kind.split_report(report, counts, examples, ends)
        finally:
            bar.close()
    kind.check_report(report, scan)
    report["workers"] = n_workers if pool is not None else 1
    t3 = time.perf_counter()
    report["seconds"] = {
        "scan_and_bpe": round(t2 - t0, 3),
        "bpe": round(t2 - t1, 3),
        "encode": round(t3 - t2, 3),
        "prepare": round(t3 - t0, 3),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")


def _encode_split(
    kind: ExampleKind[Any],
    split: str,
    source: Any,
    out: Path,
    dtype: type,
    pool: ProcessPoolExecutor | None,
    n_workers: int,
    options: Options,
    bar: _Progress,
) -> tuple[dict[str, int], int, dict[str, int]]:
    """Encode one split chunk by chunk (in order, at most 2 chunks per worker in flight) and append the
    results to its arrays; (summed counters with "lines", examples kept, ids written on each side)."""
    w = {k: NpyAppender(out / f"{split}.{k}.npy", dt) for k, dt in kind.arrays(dtype).items()}
    for side in ("src", "tgt"):
        w[f"{side}_offsets"] = NpyAppender(out / f"{split}.{side}_offsets.npy", np.int64)
        w[f"{side}_offsets"].append(np.zeros(1, np.int64))
    ends = {"src": 0, "tgt": 0}  # ids written
    done = {"src": 0, "tgt": 0}  # where the last complete example ends (running text has one, at the tail)
    counts = dict.fromkeys(("lines", *kind.counters), 0)
    jobs = _jobs(kind, split, source, options.chunk_lines)
    for r in map_ordered(pool, _encode_chunk, jobs, 2 * n_workers):
        _append(w, r, ends, done)
        for k in counts:
            counts[k] += r[k]
        bar.update(r["lines"], r["pos"])
    tail = kind.tail(ends, counts["lines"])
    if tail is not None:
        _append(w, tail, ends, done)
    bar.split_done(source)
    for a in w.values():
        a.close()
    return counts, w["index"].length, ends


def _jobs(kind: ExampleKind[Any], split: str, source: Any, n: int) -> Iterator[Job]:
    start = 0
    for c in kind.chunks(source, n):
        yield Job(
            split == "train",
            start,
            c.names,
            c.first,
            tuple(b"\n".join(x) for x in c.lines),
            c.last,
            c.pos,
            len(c.lines[0]),
        )
        start += len(c.lines[0])


def _append(w: dict[str, NpyAppender], r: dict[str, Any], ends: dict[str, int], done: dict[str, int]) -> None:
    """One chunk's arrays onto a split's: ids, and (for complete examples) lengths, offsets and the rest."""
    for side in ("src", "tgt"):
        w[side].append(r[side])
        ends[side] += len(r[side])
        if f"{side}_lengths" in r:
            lengths = r[f"{side}_lengths"]
            w[f"{side}_lengths"].append(lengths)
            w[f"{side}_offsets"].append(np.cumsum(lengths, dtype=np.int64) + done[side])
            done[side] += int(np.sum(lengths, dtype=np.int64))
    for name, a in w.items():
        if name not in ("src", "tgt") and not name.endswith(("_lengths", "_offsets")) and name in r:
            a.append(r[name])


class _Progress:
    """One bar over the bytes of a pass's files (so its ETA comes from file sizes), showing examples/s."""

    def __init__(self, enabled: bool, desc: str, kind: ExampleKind[Any], sources: dict[str, Any]) -> None:
        self.bar, self.kind = None, kind
        if enabled:
            from tqdm import tqdm

            total = sum(map(kind.source_bytes, sources.values()))
            self.bar = tqdm(
                total=total or None, desc=desc, unit="B", unit_scale=True, dynamic_ncols=True, file=sys.stderr
            )
        self.examples, self.t0, self.offset = 0, time.perf_counter(), 0

    def update(self, examples: int, position: int) -> None:
        """`examples` more done; `position` bytes read of the current split's files."""
        self.examples += examples
        if self.bar is not None:
            self.bar.update(max(0, self.offset + position - self.bar.n))
            rate = self.examples / max(1e-9, time.perf_counter() - self.t0)
            self.bar.set_postfix_str(f"{rate:,.0f} {self.kind.unit}/s", refresh=False)

    def split_done(self, source: Any) -> None:
        self.offset += self.kind.source_bytes(source)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# -- the encoding worker (a process of its own, or this one) ----------------------------------------

_encoder: list[Encoder] = []  # this process's encoder, set by _init_worker


def _init_worker(kind: ExampleKind[Any], model: bytes, labels: list[str]) -> None:
    _encoder[:] = [kind.encoder(model, labels)]


def _encode_chunk(job: Job) -> dict[str, Any]:
    r = _encoder[0](job)
    if "index" in r:
        r["index"] = job.start + np.asarray(r["index"], np.int64)
    r["lines"], r["pos"] = job.lines, job.pos
    return r
