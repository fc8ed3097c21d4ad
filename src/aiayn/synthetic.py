"""Synthetic parallel text: a file of one language translated by a run into a line-aligned pair, streamed,
resumable, with progress. `aiayn backtranslate` turns target-language text into training pairs with a
reverse run (Sennrich et al. 2016): the run's output becomes the synthetic source, the text itself the
target. `aiayn distill` (aiayn.distill) translates a training source with a teacher the same way.

    written = translate_into_pair(translator, Path("news.en"), Path("out/news.de"), Path("out/news.en"))

Sampling (DecodeConfig.sampling_topk) gives each sentence one draw from the model instead of its best
translation, which back-translates better at scale (Edunov et al. 2018); a `tag` marks every synthetic
source line so the model knows which pairs are synthetic (tagged back-translation, Caswell et al. 2019).
Each chunk of lines is translated with its own seed, so an interrupted run resumed gives the same lines
as one that ran through.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from aiayn.data.errors import DataError
from aiayn.data.io import LineStream, decode_lines
from aiayn.fileio import atomic_write

CHUNK = 2000  # lines translated at once: the input held in memory, and the work lost to a crash at most


def translate_into_pair(
    translator: Any,
    text: Path,
    translated: Path,
    kept: Path,
    tag: str | None = None,
    chunk: int = CHUNK,
    progress: bool = False,
) -> dict[str, Any]:
    """Translate the lines of `text` with `translator` (aiayn.decode.Translator, its own search settings)
    into `translated`, and copy them into `kept`, line for line; `tag` + " " starts each translated line.
    Resumes after the last line both files hold (a partial line is written again); returns what it did."""
    if not text.is_file():
        raise DataError(f"input file not found: {text}")
    done = _complete_lines(translated, kept)
    base_seed = translator.decode.sampling_seed
    t0, written = time.perf_counter(), 0
    bar = _bar(progress, text, done)
    with LineStream(text) as src, open(translated, "ab") as out_t, open(kept, "ab") as out_k:
        k = done // chunk
        for _ in range(k):  # the whole chunks a run before this one wrote, read past
            if len(src.take(chunk)) < chunk:
                raise DataError(f"{translated} has {done} lines, more than {text}: give another output directory")
        if done % chunk:  # a chunk cut short, translated with its seed from its start: the same lines
            lines = decode_lines(text, src.take(chunk))
            if len(lines) < done % chunk:
                raise DataError(f"{translated} has {done} lines, more than {text}: give another output directory")
            out = _translate(translator, lines, base_seed, k)[done % chunk :]
            written += _append(out_t, out_k, out, lines[done % chunk :], tag)
            k += 1
            if bar is not None:
                bar.update(len(out))
        while True:
            raw = src.take(chunk)
            if not raw:
                break
            lines = decode_lines(text, raw)
            written += _append(out_t, out_k, _translate(translator, lines, base_seed, k), lines, tag)
            k += 1
            if bar is not None:
                bar.update(len(lines))
                bar.set_postfix_str(f"{(done + written) / max(1e-9, time.perf_counter() - t0 + 1e-9):,.0f} lines/s")
    if bar is not None:
        bar.close()
    return {"lines": done + written, "resumed_after": done, "seconds": round(time.perf_counter() - t0, 3)}


def _translate(translator: Any, lines: list[str], base_seed: int, k: int) -> list[str]:
    """One chunk's translations, its draws (when sampling) seeded by the chunk's number."""
    seed = base_seed * 1_000_003 + k  # distinct per chunk, the same on every run
    return list(translator.translate(lines, sampling_seed=seed))


def _append(out_t: Any, out_k: Any, translations: list[str], lines: list[str], tag: str | None) -> int:
    """Both sides of a chunk appended, flushed and synced: a crash leaves whole chunks (or a partial line
    the next run cuts off)."""
    head = f"{tag} " if tag else ""
    out_t.write("".join(f"{head}{t}\n" if t else "\n" for t in translations).encode())
    out_k.write("".join(x + "\n" for x in lines).encode())
    for f in (out_t, out_k):
        f.flush()
        os.fsync(f.fileno())
    return len(lines)


def _complete_lines(*paths: Path) -> int:
    """The lines every file holds whole; each file cut back to that many (a crash's partial line, or a
    line one file got before the other). Read in blocks: memory stays flat in the files' size."""
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.touch()
    n = min(_count_lines(p) for p in paths)
    for p in paths:
        cut = _offset_after_lines(p, n)
        if cut < p.stat().st_size:
            with open(p, "r+b") as f:
                f.truncate(cut)
    return n


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))


def _offset_after_lines(path: Path, n: int) -> int:
    """The byte offset just after the n-th newline of `path` (0 for n = 0)."""
    at, left = 0, n
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            k = block.count(b"\n")
            if k < left:
                at, left = at + len(block), left - k
                continue
            i = -1
            for _ in range(left):
                i = block.index(b"\n", i + 1)
            return at + (i + 1 if left else 0)
    return at


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    text = json.dumps(summary, indent=1) + "\n"
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def _bar(progress: bool, text: Path, done: int) -> Any:
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=_count_lines(text), initial=done, unit=" lines", desc=f"translate {text.name}", file=sys.stderr)
