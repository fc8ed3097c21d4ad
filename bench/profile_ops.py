"""Where aiayn's CPU time goes: torch profiler tables for one training step and one decoding batch.

    python bench/profile_ops.py --size small --task beam      # or train / greedy; --engine hf to compare

Uses the same inputs and engines as bench/throughput.py; prints operators sorted by self CPU time
and writes the table to bench/results/profile-SIZE-TASK-ENGINE.txt.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).parent))
import throughput as T  # noqa: E402
from aiayn.config import ModelConfig  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="small")
    p.add_argument("--task", default="beam", choices=["train", "greedy", "beam"])
    p.add_argument("--engine", default="aiayn", choices=["aiayn", "aiayn-int8", "torch", "hf"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--decode-len", type=int, default=25)
    p.add_argument("--rows", type=int, default=25)
    p.add_argument("--out", default=None, help="table file (default bench/results/profile-SIZE-TASK-ENGINE.txt)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    c = ModelConfig.preset(a.size, T.VOCAB)
    with tempfile.TemporaryDirectory() as tmp:
        if a.task == "train":
            step = T.build_train(a.engine, c, 0)
            batch = T.make_batches(1, 0)[0]
            work = lambda: step(batch)  # noqa: E731
        else:
            run = T.build_decode(a.engine, c, 0, 4 if a.task == "beam" else 1, a.decode_len, a.threads, Path(tmp))
            src = T.make_batches(1, 1)[0][0]
            work = lambda: run(src)  # noqa: E731
        work()  # warm-up
        with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
            with record_function(f"{a.engine}.{a.task}"):
                work()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.rows)
    print(table)
    out = Path(a.out) if a.out else Path(__file__).parent / "results" / f"profile-{a.size}-{a.task}-{a.engine}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
