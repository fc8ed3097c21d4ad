"""`aiayn data clean`'s rule stage: a source's pairs streamed through its filters, the kept ones written in
input order, and a report of what each filter removed, with examples.

    report = clean_source(LinePair(Path("crawl.de"), Path("crawl.en")), "crawl", filters, "de", "en", out_dir)
    # out_dir/crawl.de, out_dir/crawl.en: the kept pairs; report["removed"]: {"langid": 812, ...}

The filters (aiayn.data.filters) run in worker processes on chunks of pairs, as `aiayn data prepare`
runs them; deduplication follows in this process, in corpus order; memory stays flat in the corpus's
size (chunks in flight, and 16 bytes a pair of hashes). `write_removed` also writes every removed
pair with its line number and reason (`<name>.removed.tsv`), to measure a filter or choose its
threshold.
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
from aiayn.data.errors import DataError
from aiayn.data.filters import Chain, Deduplicator, Filter, Verdicts, reasons_of
from aiayn.data.io import decode_blob
from aiayn.data.pipeline import Chunk, Options, Source
from aiayn.data.tokenizer import collapse_whitespace
from aiayn.fileio import atomic_write

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
) -> Cleaned:
    """Stream `source` through `filters`; write the kept pairs to out_dir/<name>.<src_lang> and
    .<tgt_lang> (each atomically, when complete) and return the counts. A source with nothing left is a
    DataError naming the filters that took its pairs."""
    options = options or Options()
    t0 = time.perf_counter()
    chain = Chain(tuple(filters), reasons_of([filters]))
    dedup = Deduplicator(chain.reasons) if chain.dedup else None
    out_dir.mkdir(parents=True, exist_ok=True)
    files = (out_dir / f"{name}.{src_lang}", out_dir / f"{name}.{tgt_lang}")
    removed = dict.fromkeys(chain.reasons, 0)
    examples: dict[str, list[dict[str, Any]]] = {}
    lines = kept = 0
    kept_lines: list[np.ndarray] = []
    tmp = [f.with_name(f".{f.name}.part") for f in files]
    removed_file = out_dir / f"{name}.removed.tsv"
    with open(tmp[0], "wb") as out_src, open(tmp[1], "wb") as out_tgt, _maybe(removed_file, write_removed) as rm:
        bar = _bar(options, source, name)
        pending: deque[Chunk] = deque()
        big = source.size() > PARALLEL_BYTES  # smaller: starting processes costs more than it saves
        try:
            with worker_pool(options.workers, big, _init, (chain,)) as (pool, n):
                for v in map_ordered(pool, _verdicts, _jobs(source, options.chunk_lines, pending), 2 * n):
                    chunk = pending.popleft()
                    codes = v.codes if dedup is None else dedup(v)
                    _write_kept(chunk, codes, out_src, out_tgt)
                    kept_lines.append((chunk.first + 1 + np.flatnonzero(codes == 0)).astype(np.int64))
                    for i in np.flatnonzero(codes).tolist():
                        reason = chain.reasons[codes[i] - 1]
                        removed[reason] += 1
                        shown = examples.setdefault(reason, [])
                        if len(shown) < EXAMPLES or rm is not None:
                            pair = _pair(chunk, i)
                            if len(shown) < EXAMPLES:
                                shown.append(pair)
                            if rm is not None:
                                rm.write(f"{pair['line']}\t{reason}\t{pair['src']}\t{pair['tgt']}\n")
                    lines += len(codes)
                    kept += int((codes == 0).sum())
                    if bar is not None:
                        bar.update(max(0, chunk.pos - bar.n))
                        bar.set_postfix_str(f"kept {kept:,} of {lines:,}", refresh=False)
        finally:
            if bar is not None:
                bar.close()
    if kept == 0:
        for t in tmp:
            t.unlink()
        took = ", ".join(f"{k} {v:,}" for k, v in sorted(removed.items(), key=lambda kv: -kv[1]) if v)
        raise DataError(f"source {name!r} has no pairs left after cleaning: {took or 'it has no lines'}")
    for t, f in zip(tmp, files):
        t.replace(f)
    removed = {k: v for k, v in removed.items() if v or k not in ("duplicates", "near_duplicates", "empty")}
    return Cleaned(name, lines, kept, removed, examples, files, time.perf_counter() - t0, np.concatenate(kept_lines))


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


def _pair(chunk: Chunk, i: int) -> dict[str, Any]:
    s = decode_blob(chunk.names[0], chunk.lines[0][i], chunk.first + i + 1)
    t = decode_blob(chunk.names[1], chunk.lines[1][i], chunk.first + i + 1)
    return {"line": chunk.first + i + 1, "src": s.replace("\t", " "), "tgt": t.replace("\t", " ")}


def _jobs(source: Source, n: int, pending: deque[Chunk]) -> Iterator[tuple[bytes, bytes, str, str, int]]:
    """The chunks for the workers, each kept here until its verdicts come back (in order)."""
    for c in source.chunks(n):
        pending.append(c)
        yield b"\n".join(c.lines[0]), b"\n".join(c.lines[1]), c.names[0], c.names[1], c.first


class _maybe:
    """An open text file, or None when not asked for."""

    def __init__(self, path: Path, wanted: bool) -> None:
        self.path, self.wanted, self.f = path, wanted, None

    def __enter__(self) -> IO[str] | None:
        if self.wanted:
            self.f = open(self.path, "w", encoding="utf-8")  # type: ignore[assignment]
        return self.f

    def __exit__(self, *exc: object) -> None:
        if self.f is not None:
            self.f.close()


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
