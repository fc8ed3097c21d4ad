"""Decoding throughput with every engine in a process of its own (issue 26).

    python bench/isolated_decode.py --size small --task beam --rounds 5
    python bench/isolated_decode.py --size base --task greedy --engines aiayn,ct2-float32 --rounds 3

bench/throughput.py times all engines in one process, batch by batch. Once CTranslate2 has decoded in
a process, torch's small parallel ops there run several times slower (an element-wise add of 65k floats
5 -> 54 us, a LayerNorm of 256 rows 18 -> 99 us, 2 threads; docs/benchmarks.md), so aiayn measured
beside CTranslate2 in one process is measured slowed down. Users run one engine per process: here each
engine runs in a fresh process (same model weights, inputs and stopping rule as bench/throughput.py,
whose `build_decode` it calls), one warm-up decode, then --runs timed decodes of one 64-sentence batch.
An engine named ENGINE@N runs with N threads instead of --threads (CTranslate2 decodes small models
faster on one thread than on two on a 2-core machine: `--engines ...,ct2-float32@1` compares with that).
Rounds alternate the engines (the order rotates each round) so a load change on the machine hits all
alike; each ratio is the median over rounds of that round's ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aiayn.config import ModelConfig  # noqa: E402
from throughput import VOCAB, build_decode, make_batches  # noqa: E402

PAIRS = [
    ("aiayn", "ct2-float32"),
    ("aiayn-packed", "ct2-float32"),
    ("aiayn-int8", "ct2-int8"),
    ("aiayn", "ct2-float32@1"),  # CTranslate2 at its best thread count where that is 1 (small greedy here)
    ("aiayn-int8", "ct2-int8@1"),
]
# issue 26: aiayn / CTranslate2 at 2 threads, small and base
GOALS = {"ct2-float32": 1.0, "ct2-int8": 0.9, "ct2-float32@1": 1.0, "ct2-int8@1": 0.9}


def child(args: argparse.Namespace) -> int:
    """One engine, this process: print {"tokens_per_s": ...} as JSON."""
    engine, _, at = args.child.partition("@")  # ENGINE@N: N threads for this engine
    threads = int(at) if at else args.threads
    # CTranslate2's OpenMP calls land in torch's runtime, and a second thread pool there (torch's on this
    # thread, if building and exporting the model ran parallel ops) slows both: torch builds on one thread.
    torch.set_num_threads(1 if engine.startswith("ct2-") else threads)
    c = ModelConfig.preset(args.size, VOCAB)
    beam = 4 if args.task == "beam" else 1
    src = make_batches(1, args.seed + 1)[0][0]
    with tempfile.TemporaryDirectory() as tmp:
        run = build_decode(engine, c, args.seed, beam, args.decode_len, threads, Path(tmp))
        lengths = run(src)  # warm-up
        if set(lengths) != {args.decode_len}:
            raise RuntimeError(f"{args.child}: output lengths {sorted(set(lengths))} != {args.decode_len}")
        t = time.perf_counter()
        for _ in range(args.runs):
            run(src)
        seconds = (time.perf_counter() - t) / args.runs
    print(json.dumps({"tokens_per_s": args.decode_len * src.size(0) / seconds}))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="small")
    p.add_argument("--task", default="greedy", choices=["greedy", "beam"])
    p.add_argument("--engines", default="aiayn,aiayn-packed,aiayn-int8,ct2-float32,ct2-int8")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runs", type=int, default=3, help="timed decodes per process")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--decode-len", type=int, default=25)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON path for the figures")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    engines = [e for e in args.engines.split(",") if e]
    rates: dict[str, list[float]] = {e: [] for e in engines}
    base = [sys.executable, __file__, "--size", args.size, "--task", args.task, "--threads", str(args.threads)]
    base += ["--runs", str(args.runs), "--decode-len", str(args.decode_len), "--seed", str(args.seed)]
    for r in range(args.rounds):
        for e in engines[r % len(engines) :] + engines[: r % len(engines)]:
            out = subprocess.run([*base, "--child", e], capture_output=True, text=True, check=True).stdout
            rates[e].append(json.loads(out.strip().splitlines()[-1])["tokens_per_s"])
        print(f"  round {r + 1}: " + ", ".join(f"{e} {rates[e][-1]:,.0f} tok/s" for e in engines), flush=True)
    result: dict = {"size": args.size, "task": args.task, "threads": args.threads, "tokens_per_s": rates}
    print(f"== {args.size} {args.task}, {args.threads} thread(s), one process per engine, {args.rounds} rounds")
    for e in engines:
        print(f"  {e:14s} {statistics.median(rates[e]):9,.0f} tok/s")
    for mine, peer in [*PAIRS, ("aiayn-packed", "aiayn")]:
        if mine in rates and peer in rates:
            ratio = statistics.median(a / b for a, b in zip(rates[mine], rates[peer]))
            result.setdefault("ratios", {})[f"{mine}/{peer}"] = ratio
            goal = GOALS.get(peer)
            verdict = "" if goal is None else f" (goal >= {goal}x: {'met' if ratio >= goal else 'NOT met'})"
            print(f"  {mine}/{peer} = {ratio:.2f}x{verdict}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
