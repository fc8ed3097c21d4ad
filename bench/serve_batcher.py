"""The serve batcher in-process, no HTTP: N asyncio clients each send one Multi30k test sentence
and the next as soon as it is answered, for T seconds, with continuous or whole-batch greedy batching.

    python bench/serve_batcher.py -c RUN --mode continuous   # or --mode whole

Prints sentences/s, latency p50/p95/p99 and the mean target pieces of the slowest 1 % of sentences
against all (which sentences make the tail: the longest outputs, or those that waited).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import statistics
import time
from pathlib import Path

import torch

from aiayn.serve.backends import TorchBackend
from aiayn.serve.batcher import Batcher, SearchOptions

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-c", "--checkpoint", required=True, help="run directory")
    p.add_argument("--mode", choices=["continuous", "whole"], default="continuous")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--max-batch-tokens", type=int, default=8192)
    p.add_argument("--max-wait-ms", type=float, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads of the backend")
    p.add_argument("--data", default=os.environ.get("AIAYN_DATA_DIR", str(ROOT.parent / "shared/data/multi30k")))
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    with gzip.open(Path(a.data) / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    batcher = Batcher(
        TorchBackend(a.checkpoint, device="cpu", threads=a.threads),
        a.max_batch_tokens,
        a.max_wait_ms,
        continuous=a.mode == "continuous",
    )
    batcher.start()
    greedy = SearchOptions(beam=1)
    latencies: list[float] = []
    pieces: list[int] = []

    async def client(k: int, stop: float) -> None:
        i = k * 97
        while time.monotonic() < stop:
            t = time.monotonic()
            out = await batcher.translate([sentences[i % len(sentences)]], greedy)
            latencies.append(time.monotonic() - t)
            pieces.append(out[0][0][2])
            i += 1

    async def run() -> float:
        await batcher.translate(sentences[:8], greedy)  # warm up
        t0 = time.monotonic()
        await asyncio.gather(*(client(k, t0 + a.seconds) for k in range(a.clients)))
        return time.monotonic() - t0

    try:
        elapsed = asyncio.run(run())
    finally:
        batcher.close()
    q = statistics.quantiles(latencies, n=100)
    slowest = sorted(zip(latencies, pieces))[-max(1, len(latencies) // 100) :]
    print(
        f"{a.mode}: {len(latencies) / elapsed:.1f} sentences/s  p50 {q[49]:.3f}s p95 {q[94]:.3f}s p99 {q[98]:.3f}s  "
        f"slowest 1%: {statistics.mean(n for _, n in slowest):.1f} target pieces (all: {statistics.mean(pieces):.1f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
