"""`aiayn data clean`'s rule stage: a source's pairs streamed through its filters, the kept ones written in
input order, and a report of what each filter removed, with examples.

    report = clean_source(LinePair(Path("crawl.de"), Path("crawl.en")), "crawl", filters, "de", "en", out_dir)
    # out_dir/crawl.de, out_dir/crawl.en: the kept pairs; report["removed"]: {"langid": 812, ...}

The filters (aiayn.data.filters) run in worker processes on chunks of pairs, as `aiayn data prepare`
runs them; deduplication follows in this process, in corpus order; memory stays flat in the corpus's
size (chunks in flight; 16 bytes a pair of hashes, and 8 for the line number of each pair kept).
`write_removed` also writes every removed pair with its line number and reason (`<name>.removed.tsv`),
to measure a filter or choose its threshold.
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from aiayn.data.cache import map_ordered, worker_pool
from aiayn.data.dedup import Deduplicator, HashSet
from aiayn.data.errors import DataError
from aiayn.data.filters import Chain, Filter, Verdicts, reasons_of
from aiayn.data.io import decode_blob
from aiayn.data.pipeline import Chunk, Options, Source
from aiayn.data.tokenizer import collapse_whitespace
from aiayn.fileio import atomic_write, replacing

EXAMPLES = 5  # removed pairs shown per reason
PARALLEL_BYTES = 4 << 20


@dataclass
class Cleaned:
    """What cleaning one source gave: its counts, examples and files."""

    name: str
    lines: int
    kept: int
    removed: dict[str, int]
    examples: dict[str, list[dict[str, Any]]]
    files: tuple[Path, Path]
    seconds: float
    kept_lines: np.ndarray  # (kept,) the input's line number (from 1) of each kept pair, in order

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "lines": self.lines,
            "kept": self.kept,
            "removed": self.removed,
            "examples": self.examples,
            "files": [str(f) for f in self.files],
            "seconds": round(self.seconds, 3),
        }


def clean_source(
    source: Source,
    name: str,
    filters: list[Filter],
    src_lang: str,
    tgt_lang: str,
    out_dir: Path,
    options: Options | None = None,
    write_removed: bool = False,
    seen: tuple[HashSet, HashSet] | None = None,
) -> Cleaned:
    """Stream `source` through `filters`; write the kept pairs to out_dir/<name>.<src_lang> and
    .<tgt_lang> (each whole when complete, nothing when it fails) and return the counts. `seen`: the
    hashes of the sources cleaned before this one, so that a copy across sources is a duplicate too. A
    source with nothing left is a DataError naming the filters that took its pairs."""
    options = options or Options()
    t0 = time.perf_counter()
    chain = Chain(tuple(filters), reasons_of([filters]))
    dedup = Deduplicator(chain.reasons, seen) if chain.dedup else None
    files = (out_dir / f"{name}.{src_lang}", out_dir / f"{name}.{tgt_lang}")
    tally = _Tally(chain.reasons)
    outputs = [*files, out_dir / f"{name}.removed.tsv"] if write_removed else list(files)
    with replacing(*outputs) as parts, open(parts[0], "wb") as out_src, open(parts[1], "wb") as out_tgt:
        rm = open(parts[2], "w", encoding="utf-8") if write_removed else None
        bar = _bar(options, source, name)
        pending: deque[Chunk] = deque()
        big = source.size() > PARALLEL_BYTES  # smaller: starting processes costs more than it saves
        try:
            with worker_pool(options.workers, big, _init, (chain,)) as (pool, n):
                for v in map_ordered(pool, _verdicts, _jobs(source, options.chunk_lines, pending), 2 * n):
                    chunk = pending.popleft()
                    codes = v.codes if dedup is None else dedup(v)
                    _write_kept(chunk, codes, out_src, out_tgt)
                    tally.add(chunk, codes, rm)
                    if bar is not None:
                        bar.update(max(0, chunk.pos - bar.n))
                        bar.set_postfix_str(f"kept {tally.kept:,} of {tally.lines:,}", refresh=False)
        finally:
            if bar is not None:
                bar.close()
            if rm is not None:
                rm.close()
        if tally.kept == 0:
            took = ", ".join(f"{k} {v:,}" for k, v in sorted(tally.removed.items(), key=lambda kv: -kv[1]) if v)
            raise DataError(f"source {name!r} has no pairs left after cleaning: {took or 'it has no lines'}")
    removed = {k: v for k, v in tally.removed.items() if v or k not in ("duplicates", "near_duplicates", "empty")}
    seconds = time.perf_counter() - t0
    return Cleaned(name, tally.lines, tally.kept, removed, tally.examples, files, seconds, tally.kept_lines())


class _Tally:
    """What one source's cleaning removed, by reason, with examples; the input lines of the pairs kept."""

    def __init__(self, reasons: tuple[str, ...]) -> None:
        self.reasons = reasons
        self.removed = dict.fromkeys(reasons, 0)
        self.examples: dict[str, list[dict[str, Any]]] = {}
        self.lines = self.kept = 0
        self._kept: list[np.ndarray] = []

    def add(self, chunk: Chunk, codes: np.ndarray, rm: IO[str] | None) -> None:
        self._kept.append(line_numbers(chunk)[codes == 0])
        for i in np.flatnonzero(codes).tolist():
            reason = self.reasons[codes[i] - 1]
            self.removed[reason] += 1
            shown = self.examples.setdefault(reason, [])
            if len(shown) < EXAMPLES or rm is not None:
                pair = _pair(chunk, i)
                if len(shown) < EXAMPLES:
                    shown.append(pair)
                if rm is not None:
                    rm.write(f"{pair['line']}\t{reason}\t{pair['src']}\t{pair['tgt']}\n")
        self.lines += len(codes)
        self.kept += int((codes == 0).sum())

    def kept_lines(self) -> np.ndarray:
        return np.concatenate(self._kept) if self._kept else np.zeros(0, dtype=np.int64)


def write_report(
    out_dir: Path, cleaned: list[Cleaned], filters: dict[str, list[Filter]], extra: dict[str, Any]
) -> Path:
    """out_dir/report.json: each source's counts and examples, and the filters with their settings."""
    report = {
        "sources": [c.as_json() for c in cleaned],
        "filters": {name: [f.describe() for f in fs] for name, fs in filters.items()},
        **extra,
    }
    text = json.dumps(report, indent=1, ensure_ascii=False) + "\n"
    return atomic_write(out_dir / "report.json", lambda tmp: Path(tmp).write_text(text))


def summary(c: Cleaned, width: int = 100) -> str:
    """The terminal's table of one source: each reason's count and share, with its first example."""
    rows = [f"{c.name}: kept {c.kept:,} of {c.lines:,} pairs ({c.kept / max(1, c.lines):.1%})"]
    for reason, n in sorted(c.removed.items(), key=lambda kv: -kv[1]):
        rows.append(f"  {reason:<16} {n:>10,}  {n / max(1, c.lines):6.2%}")
        for e in c.examples.get(reason, [])[:1]:
            rows.append(f"      line {e['line']}: {_short(e['src'], width // 2)} | {_short(e['tgt'], width // 2)}")
    return "\n".join(rows)


def _write_kept(chunk: Chunk, codes: np.ndarray, out_src: IO[bytes], out_tgt: IO[bytes]) -> None:
    keep = np.flatnonzero(codes == 0).tolist()
    for lines, out in zip(chunk.lines, (out_src, out_tgt)):
        out.write(b"".join([lines[i] + b"\n" for i in keep]))


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def line_numbers(chunk: Chunk) -> np.ndarray:
    """(N,) each pair's line in its file (from 1): its row, JSON line or unit for a format that gives it."""
    if chunk.numbers is not None:
        return np.asarray(chunk.numbers, dtype=np.int64)
    return chunk.first + 1 + np.arange(len(chunk.lines[0]), dtype=np.int64)


def _pair(chunk: Chunk, i: int) -> dict[str, Any]:
    line = int(line_numbers(chunk)[i])
    s = decode_blob(chunk.names[0], chunk.lines[0][i], line)
    t = decode_blob(chunk.names[1], chunk.lines[1][i], line)
    return {"line": line, "src": s.replace("\t", " "), "tgt": t.replace("\t", " ")}


def _jobs(source: Source, n: int, pending: deque[Chunk]) -> Iterator[tuple[bytes, bytes, str, str, int]]:
    """The chunks for the workers, each kept here until its verdicts come back (in order)."""
    for c in source.chunks(n):
        pending.append(c)
        yield b"\n".join(c.lines[0]), b"\n".join(c.lines[1]), c.names[0], c.names[1], c.first


def _bar(options: Options, source: Source, name: str) -> Any:
    if not options.bars:
        return None
    from tqdm import tqdm

    return tqdm(
        total=source.size() or None,
        desc=f"aiayn data clean: {name}",
        unit="B",
        unit_scale=True,
        dynamic_ncols=True,
        file=sys.stderr,
    )


# -- the worker -------------------------------------------------------------------------------------

_chain: list[Chain] = []


def _init(chain: Chain) -> None:
    _chain[:] = [chain]


def _verdicts(job: tuple[bytes, bytes, str, str, int]) -> Verdicts:
    src_blob, tgt_blob, src_name, tgt_name, first = job
    src = [collapse_whitespace(x) for x in decode_blob(src_name, src_blob, first + 1).split("\n")]
    tgt = [collapse_whitespace(x) for x in decode_blob(tgt_name, tgt_blob, first + 1).split("\n")]
    return _chain[0].verdicts(src, tgt)
