"""Encoding speed on one core: sentencepiece's batched encode against the word cache (both single
threaded, alternating, best of 5), on Multi30k training text (de + en) with an 8k BPE trained on it.

    AIAYN_DATA_DIR=../shared/data/multi30k python bench/word_cache.py
"""

from __future__ import annotations

import gzip
import os
import sys
import tempfile
import time
from pathlib import Path

from aiayn.data.tokenizer import Tokenizer, WordCacheEncoder


def main() -> None:
    if "AIAYN_DATA_DIR" not in os.environ or sys.argv[1:]:
        raise SystemExit(__doc__)
    d = Path(os.environ["AIAYN_DATA_DIR"])
    lines = [
        x for lang in ("de", "en") for x in gzip.decompress((d / f"train.{lang}.gz").read_bytes()).decode().splitlines()
    ]
    clean = [" ".join(x.split()) for x in lines]
    tok = Tokenizer.train(clean, Path(tempfile.mkdtemp()) / "m.model", vocab_size=8000)
    best = {"sentencepiece": 1e9, "word cache (cold)": 1e9, "word cache (warm)": 1e9}
    for _ in range(5):
        t = time.perf_counter()
        tok.sp.encode(clean, num_threads=1)
        best["sentencepiece"] = min(best["sentencepiece"], time.perf_counter() - t)
        enc = WordCacheEncoder(tok.sp)
        t = time.perf_counter()
        enc.encode(lines)
        best["word cache (cold)"] = min(best["word cache (cold)"], time.perf_counter() - t)
        t = time.perf_counter()
        enc.encode(lines)
        best["word cache (warm)"] = min(best["word cache (warm)"], time.perf_counter() - t)
    for name, sec in best.items():
        print(f"{name:20s} {len(lines) / sec:10,.0f} sentences/s  ({best['sentencepiece'] / sec:.2f}x sentencepiece)")


if __name__ == "__main__":
    main()
