"""The one preparation pipeline: corpus text -> a tokenizer and encoded splits in the cache (paper §5.1).

Every task's data goes through the same stages, written once here; what differs is what an example is,
which an `ExampleKind` says: a record of parts with defaults, built by `aiayn.data.pairs` (a sentence
pair, or a tree pair with the tree's markup kept whole by the tokenizer) and `aiayn.data.text` (a line,
a labelled line, or a document of running text):

  1. the kind's sources are resolved when it is built (missing files and wrong settings fail there,
     first), each split a `Source` that knows its cheap stamp, its size and how to read itself in chunks;
  2. a cheap stamp key (settings plus each source's stamp: files' path, size and modification time)
     finds a finished cache without reading the corpus (`aiayn.data.cache.find_or_build`);
  3. otherwise, under the key's file lock, a scan reads every split once (small splits first, so their
     errors come fast): line counts, the content key (a hash of the text, so a moved copy of a corpus
     reuses its cache), and the kind's seeded sample of training examples (and labels);
  4. the kind's tokenizer part trains a tokenizer on that sample, or copies `data.spm_model` in;
  5. worker processes encode chunks of lines in order (the kind's encoder, one per process); the main
     process passes each result through the kind's in-order pass (deduplication needs the corpus order),
     then appends the arrays (flat ids, lengths, offsets, kept line numbers, the kind's extras) to
     memory-mapped .npy files in a temporary directory renamed into place when complete, so nothing
     half-written is ever taken for a finished cache;
  6. the kind loads the finished directory as its prepared data.

How to prepare (worker processes, progress bars, chunk size) is an `Options` value every caller passes.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import numpy as np

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
from aiayn.data.errors import DataError
from aiayn.data.tokenizer import Tokenizer

P = TypeVar("P")  # what a kind's prepared data is


class Chunk(NamedTuple):
    """Aligned lines of one split as read: one list per stream (a pair has two: source and target).
    `names` and `first` (the first example's number in its file, from 0: its line, for text) name a line
    in an error; `pos` is bytes of the split's files read so far (progress); `last`: the split's last
    chunk; `part`: which of the split's sources it comes from (a split of several sources reads them in
    turn); `numbers`: for a format not one example a line (TMX, TSV, ...), each example's line in its
    file (from 1), else None."""

    names: tuple[str, ...]
    first: int
    lines: tuple[list[bytes], ...]
    last: bool = False
    pos: int = 0
    part: int = 0
    numbers: tuple[int, ...] | None = None


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
    part: int = 0


class Source(Protocol):
    """One split's text as the pipeline reads it."""

    def stamp(self) -> Any:
        """The split's part of the cheap key (None: nothing beyond the settings)."""

    def size(self) -> int:
        """The bytes a pass over it reads (0: unknown), for the progress bar's total."""

    def chunks(self, n: int) -> Iterator[Chunk]:
        """Its lines in chunks of n, each stream's aligned; a count mismatch raises DataError."""


Encoder = Callable[[Job], dict[str, Any]]


@dataclass
class Scan:
    """What the scan found: the content key, each split's line count, the tokenizer sample (None with a
    given tokenizer) and the training split's labels, sorted (empty without labels)."""

    key: str
    counts: dict[str, int]
    sample: Reservoir | None
    labels: list[str]


@dataclass
class Encoded:
    """What encoding one split gave: its counters summed over all its chunks (with "lines") and by
    source (`parts`, the split's sources in order), the examples kept and the ids written on each side."""

    counts: dict[str, int]
    parts: list[dict[str, int]]
    examples: int
    ends: dict[str, int]


def sample_lines(chunk: Chunk, sample: Reservoir, labels: set[str]) -> None:
    """The default sample: a chunk's aligned lines as they are (a single stream pairs with itself)."""
    sample.add(chunk.lines[0], chunk.lines[-1])


def more_than_a_chunk(scan: Scan, chunk_lines: int) -> bool:
    """The default test for worker processes: the training split is more than one chunk (starting
    processes costs more than encoding a single chunk here)."""
    return scan.counts["train"] > chunk_lines


@dataclass(frozen=True)
class ExampleKind(Generic[P]):
    """What an example is, for the pipeline: its settings and sources, its tokenizer, how a chunk is
    encoded, how the encoded arrays are laid out, reported and loaded. The parts are functions, so that
    a kind is a value; `encoder` (with what it closes over) is sent to every encoding process, so it is
    a module-level function or a `functools.partial` of one, holding settings, not text.

    settings: everything besides the text that decides the cache's content (its key).
    sources: each split's text (None: no such split).
    tokenizer: (scan, model file) -> (the tokenizer, written to the file; fields for the report). It
      refuses what cannot be trained on (an empty training split, too few labels) and empties the
      scan's sample, as the encoding pass runs beside the workers.
    encoder: (tokenizer model bytes, labels) -> the function that encodes one job: arrays (`src`,
      `tgt`, `src_lengths`, `tgt_lengths`, `index` of the kept lines within the chunk, and the kind's
      own) and the counters `counters` names.
    arrays: each array a split writes besides the offsets (`<split>.<name>.npy`) with its dtype; None
      stands for the ids' dtype (uint16 or int32, by the vocabulary).
    report: the report's opening fields; the pipeline adds "key", "vocab_size", the tokenizer's fields,
      "splits", "workers" and "seconds".
    finish: (report, each split's `Encoded`) -> None: the report's split lines and totals; refuses a
      build that kept no training example.
    load: a finished cache directory -> the prepared data.
    sample_size: training examples the tokenizer sample holds; None: no sample is drawn.
    sample: (chunk, sample, labels) -> None: one training chunk scanned into the sample (and labels).
    in_order: None, or a function making the main process's pass over each training chunk's result, in
      corpus order (a stateful filter, such as deduplication, which workers cannot apply).
    tail: (ids written on each side, lines) -> arrays appended after a split's last chunk, or None
      (running text ends its one example there).
    parallel: (scan, lines per chunk) -> whether encoding in worker processes pays for starting them.
    streams: aligned lines per example as read (a pair: 2).
    stamp_field, stamp_prefix: the settings' name in the stamp key's JSON, and what the key starts with
      (kinds keyed alike stay apart).
    unit: what the progress bar counts.
    """

    settings: dict[str, Any]
    sources: dict[str, Source | None]
    tokenizer: Callable[[Scan, Path], tuple[Tokenizer, dict[str, Any]]]
    encoder: Callable[[bytes, list[str]], Encoder]
    arrays: dict[str, Any]
    report: dict[str, Any]
    finish: Callable[[dict[str, Any], dict[str, Encoded]], None]
    load: Callable[[Path], P]
    counters: tuple[str, ...] = ()
    sample_size: int | None = None
    sample: Callable[[Chunk, Reservoir, set[str]], None] = sample_lines
    in_order: Callable[[], Callable[[dict[str, Any]], dict[str, Any]]] | None = None
    tail: Callable[[dict[str, int], int], dict[str, Any] | None] | None = None
    parallel: Callable[[Scan, int], bool] = more_than_a_chunk
    streams: int = 1
    stamp_field: str = "settings"
    stamp_prefix: str = ""
    unit: str = "lines"


@dataclass(frozen=True)
class Options:
    """How to prepare, not what: encoding processes (None: all cores; 1: this one), progress bars on
    stderr (None: when stderr is a terminal), and lines per chunk handed to a worker at once."""

    workers: int | None = None
    progress: bool | None = None
    chunk_lines: int = 20_000

    @property
    def bars(self) -> bool:
        return sys.stderr.isatty() if self.progress is None else self.progress


def prepare_examples(kind: ExampleKind[P], run_dir: str | os.PathLike | None, options: Options) -> P:
    """`kind`'s prepared data: found by its stamp, else built under the key's lock; the tokenizer and
    the data report copied into `run_dir`. Safe to call from many processes at once."""
    t0 = time.perf_counter()
    stamp = stamp_key(kind)
    final, cached = find_or_build(stamp, lambda: _build(kind, stamp, t0, options))
    out: Any = kind.load(final)
    out.report["cached"] = cached
    out.report["seconds_total"] = round(time.perf_counter() - t0, 3)
    if run_dir is not None:
        copy_into_run(final, out.report, run_dir)
    return out  # type: ignore[no-any-return]


def stamp_key(kind: ExampleKind[Any]) -> str:
    """Settings plus each split's stamp (files: absolute path, size, modification time): decided
    without reading the text."""
    files = {
        split: s for split, source in kind.sources.items() if source is not None and (s := source.stamp()) is not None
    }
    blob = json.dumps({kind.stamp_field: kind.settings, "files": files}, sort_keys=True).encode()
    return kind.stamp_prefix + hashlib.sha256(blob).hexdigest()[: 16 - len(kind.stamp_prefix)]


def files_stamp(paths: Any) -> list[list[str | int]]:
    """The stamps of a split's files (`aiayn.data.cache.file_stamp`), in order."""
    return [file_stamp(p) for p in paths]


def source_size(source: Source | None) -> int:
    return 0 if source is None else source.size()


def chunks_of(source: Source | None, n: int) -> Iterator[Chunk]:
    return iter(()) if source is None else source.chunks(n)


def refuse_empty_training(scan: Scan, message: str = "the training split is empty") -> None:
    """What every kind's tokenizer part checks first: there is training text."""
    if scan.counts["train"] == 0:
        raise DataError(message)


# -- scan and build ---------------------------------------------------------------------------------


def _build(kind: ExampleKind[Any], stamp: str, t0: float, options: Options) -> tuple[Path, bool]:
    """Scan, then (unless the content is cached already) build into a temporary directory renamed into
    place; finally stamp the cheap key. Runs under the key's lock."""
    scan = _scan(kind, options)
    return publish(aiayn_home() / "prepared", scan.key, stamp, lambda out: _build_into(kind, scan, out, t0, options))


def _scan(kind: ExampleKind[Any], options: Options) -> Scan:
    """Pass 1: line counts of every split, the content key (settings, then each split's count and the
    hash of each of its streams), the tokenizer sample and the labels of the training split."""
    h = hashlib.sha256(json.dumps(kind.settings, sort_keys=True).encode())
    sample = None if kind.sample_size is None else Reservoir(kind.sample_size)
    labels, counts = set[str](), {}
    bar = _Progress(options.bars, "aiayn data: scan", kind)
    try:
        for split in ("valid", "test", "train"):
            hashes: list[Any] = []
            n = 0
            for chunk in chunks_of(kind.sources[split], options.chunk_lines):
                hashes = hashes or [hashlib.sha256() for _ in chunk.lines]
                for stream, lines in zip(hashes, chunk.lines):
                    stream.update(b"\n".join(lines) + b"\n")
                if split == "train" and sample is not None:
                    kind.sample(chunk, sample, labels)
                n += len(chunk.lines[0])
                bar.update(len(chunk.lines[0]), chunk.pos)
            bar.split_done(kind.sources[split])
            counts[split] = n
            hashes = hashes or [hashlib.sha256() for _ in range(kind.streams)]  # a split with no lines
            h.update(f"{split}:{n}:".encode() + b"".join(x.digest() for x in hashes))
    finally:
        bar.close()
    return Scan(h.hexdigest()[:16], counts, sample, sorted(labels))


def _build_into(kind: ExampleKind[Any], scan: Scan, out: Path, t0: float, options: Options) -> None:
    t1 = time.perf_counter()
    tok, fields = kind.tokenizer(scan, out / "spm.model")  # empties the sample
    t2 = time.perf_counter()
    report = {**kind.report, "key": scan.key, "vocab_size": tok.vocab_size, **fields}
    report["splits"] = report.get("splits", {})
    init = (kind.encoder, (out / "spm.model").read_bytes(), scan.labels)
    encoded: dict[str, Encoded] = {}
    with worker_pool(options.workers, kind.parallel(scan, options.chunk_lines), _init_worker, init) as (pool, n):
        bar = _Progress(options.bars, "aiayn data: encode", kind)
        try:
            for split in SPLITS:
                encoded[split] = _encode_split(kind, split, out, id_dtype(tok.vocab_size), pool, n, options, bar)
        finally:
            bar.close()
    kind.finish(report, encoded)
    report["workers"] = n if pool is not None else 1
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
    out: Path,
    dtype: type,
    pool: ProcessPoolExecutor | None,
    n_workers: int,
    options: Options,
    bar: _Progress,
) -> Encoded:
    """Encode one split chunk by chunk (in order, at most 2 chunks per worker in flight) and append the
    results to its arrays."""
    source = kind.sources[split]
    w = {k: NpyAppender(out / f"{split}.{k}.npy", dtype if dt is None else dt) for k, dt in kind.arrays.items()}
    for side in ("src", "tgt"):
        w[f"{side}_offsets"] = NpyAppender(out / f"{split}.{side}_offsets.npy", np.int64)
        w[f"{side}_offsets"].append(np.zeros(1, np.int64))
    ends = {"src": 0, "tgt": 0}  # ids written
    done = {"src": 0, "tgt": 0}  # where the last complete example ends (running text has one, at the tail)
    names = ("lines", *kind.counters)
    counts = dict.fromkeys(names, 0)
    parts: list[dict[str, int]] = []
    in_order = kind.in_order() if kind.in_order is not None and split == "train" else None
    for r in map_ordered(pool, _encode_chunk, _jobs(split, source, options.chunk_lines), 2 * n_workers):
        if in_order is not None:
            r = in_order(r)
        _append(w, r, ends, done)
        while len(parts) <= r["part"]:
            parts.append(dict.fromkeys(names, 0))
        for k in names:
            counts[k] += r[k]
            parts[r["part"]][k] += r[k]
        parts[r["part"]]["examples"] = parts[r["part"]].get("examples", 0) + len(r.get("index", ()))
        bar.update(r["lines"], r["pos"])
    tail = None if kind.tail is None else kind.tail(ends, counts["lines"])
    if tail is not None:
        _append(w, tail, ends, done)
    bar.split_done(source)
    for a in w.values():
        a.close()
    return Encoded(counts, parts, w["index"].length, ends)


def _jobs(split: str, source: Source | None, n: int) -> Iterator[Job]:
    start = 0
    for c in chunks_of(source, n):
        yield Job(
            split == "train",
            start,
            c.names,
            c.first,
            tuple(b"\n".join(x) for x in c.lines),
            c.last,
            c.pos,
            len(c.lines[0]),
            c.part,
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


@dataclass
class _Progress:
    """One bar over the bytes of a pass's files (so its ETA comes from file sizes), showing examples/s."""

    enabled: bool
    desc: str
    kind: ExampleKind[Any]
    bar: Any = None
    examples: int = 0
    t0: float = field(default_factory=time.perf_counter)
    offset: int = 0

    def __post_init__(self) -> None:
        if self.enabled:
            from tqdm import tqdm

            total = sum(map(source_size, self.kind.sources.values()))
            self.bar = tqdm(
                total=total or None, desc=self.desc, unit="B", unit_scale=True, dynamic_ncols=True, file=sys.stderr
            )

    def update(self, examples: int, position: int) -> None:
        """`examples` more done; `position` bytes read of the current split's files."""
        self.examples += examples
        if self.bar is not None:
            self.bar.update(max(0, self.offset + position - self.bar.n))
            rate = self.examples / max(1e-9, time.perf_counter() - self.t0)
            self.bar.set_postfix_str(f"{rate:,.0f} {self.kind.unit}/s", refresh=False)

    def split_done(self, source: Source | None) -> None:
        self.offset += source_size(source)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# -- the encoding worker (a process of its own, or this one) ----------------------------------------

_encoder: list[Encoder] = []  # this process's encoder, set by _init_worker


def _init_worker(make: Callable[[bytes, list[str]], Encoder], model: bytes, labels: list[str]) -> None:
    _encoder[:] = [make(model, labels)]


def _encode_chunk(job: Job) -> dict[str, Any]:
    r = _encoder[0](job)
    if "index" in r:
        r["index"] = job.start + np.asarray(r["index"], np.int64)
    r["lines"], r["pos"], r["part"] = job.lines, job.pos, job.part
    return r
