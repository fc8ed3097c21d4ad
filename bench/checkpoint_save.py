"""How long one training checkpoint takes to write: weights (safetensors) + training state (Adam moments,
schedule, RNG; torch.save), each atomically with fsync, as the trainer writes them on SIGTERM.

    python bench/checkpoint_save.py --preset big --vocab 37000 --dir /tmp

Preemption leaves about 30 s between SIGTERM and SIGKILL (torchrun; SLURM's KillWait); this is the
part of it the checkpoint takes, on the machine and file system it runs on (--dir).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from aiayn.checkpoint import checkpoint_paths, save_weights
from aiayn.config import ModelConfig
from aiayn.model import Transformer
from aiayn.train.checkpoint_files import capture_rng, save_state
from aiayn.train.schedule import noam_scheduler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="big")
    ap.add_argument("--vocab", type=int, default=37000)
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    model = Transformer(ModelConfig.preset(args.preset, vocab_size=args.vocab))
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, fused=True)
    sched = noam_scheduler(opt, model.config.d_model, 4000, 1.0)
    for p in model.parameters():  # one step, so that Adam holds both moments as in training
        p.grad = torch.zeros_like(p)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if args.dir:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        times = []
        for i in range(args.repeat):
            weights, state = checkpoint_paths(tmp, i + 1)
            weights.parent.mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            save_weights(model, weights, step=i + 1)
            save_state(
                state,
                {
                    "version": 1,
                    "step": i + 1,
                    "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(),
                    "rng": [capture_rng()],
                },
            )
            times.append(time.perf_counter() - t)
            sizes = (weights.stat().st_size, state.stat().st_size)
            weights.unlink()
            state.unlink()
    print(
        json.dumps(
            {
                "preset": args.preset,
                "vocab": args.vocab,
                "parameters": model.num_parameters(),
                "weights_bytes": sizes[0],
                "state_bytes": sizes[1],
                "seconds": [round(x, 2) for x in times],
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
