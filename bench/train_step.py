"""Seconds per training update of the quickstart model on real Multi30k batches (aiayn's own trainer).

    AIAYN_DATA_DIR=/path/to/multi30k python bench/train_step.py --max-tokens 4096
    python bench/train_step.py --max-tokens 1024 --updates 100 --threads 2

Builds the `aiayn quickstart` recipe's Trainer (d_model 128, 4+4 layers, joint 8k BPE) in a
temporary run directory, runs --warmup updates, then times --updates more through
the trainer's `TrainStep` (forward, loss, backward, Adam). Prints seconds per update, target tokens per
second and the share of padding among the timed batches' target positions. To compare two
versions, run it at each commit one after the other on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from aiayn.quickstart import quickstart_config
from aiayn.train.trainer import Trainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", action="store_true", help="train.compile: torch.compile the training forward")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = quickstart_config(15, "multi30k", os.environ.get("AIAYN_DATA_DIR"))
    cfg.data.max_tokens = a.max_tokens
    cfg.train.compile = a.compile
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(cfg, run_dir, False)
        trainer.setup()
        for _ in range(a.warmup):
            trainer.train_step([trainer.batches.next()], trainer.flags, lambda: False)
        tokens = positions = 0
        t = time.perf_counter()
        for _ in range(a.updates):
            batch = trainer.batches.next()
            tokens, positions = tokens + batch.tgt_tokens, positions + batch.tgt_out.numel()
            trainer.train_step([batch], trainer.flags, lambda: False)
        dt = time.perf_counter() - t
    print(
        f"max_tokens {a.max_tokens}, {a.threads} threads{', compiled' if a.compile else ''}: "
        f"{dt / a.updates:.3f} s/update, "
        f"{tokens / dt:,.0f} target tokens/s, target padding {1 - tokens / positions:.1%}"
    )


if __name__ == "__main__":
    main()
