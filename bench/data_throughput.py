"""Data-layer speed: Multi30k prepare time (cold + cached) and BatchIterator throughput on one core.

    AIAYN_DATA_DIR=../shared/data/multi30k taskset -c 0 python bench/data_throughput.py [--corpus embedded]

Writes a fresh $AIAYN_HOME under a temp dir so the cold run really trains BPE and encodes.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="multi30k", choices=["multi30k", "embedded"])
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--epochs", type=int, default=3)
    a = ap.parse_args()
    os.environ["AIAYN_HOME"] = tempfile.mkdtemp(prefix="aiayn-bench-")
    import torch

    torch.set_num_threads(1)
    from aiayn.config import DataConfig
    from aiayn.data import BatchIterator, prepare

    cfg = DataConfig(corpus=a.corpus)
    t0 = time.perf_counter()
    prep = prepare(cfg)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    prepare(cfg)
    warm = time.perf_counter() - t0

    it = BatchIterator(prep.splits["train"], a.max_tokens, seed=0)
    tokens = batches = 0
    t0 = time.perf_counter()
    for epoch in range(a.epochs):
        it.set_epoch(epoch)
        for b in it:
            tokens += b.src_tokens + b.tgt_tokens
            batches += 1
    dt = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "corpus": a.corpus,
                "prepare_cold_s": round(cold, 2),
                "prepare_cached_s": round(warm, 3),
                "report_seconds": prep.report.get("seconds"),
                "batches": batches,
                "iter_tokens_per_s": round(tokens / dt),
                "iter_batches_per_s": round(batches / dt, 1),
                "padding_fraction": round(it.padding_fraction, 4),
                "cpu_count": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
