"""Checkpoint averaging (paper §6.1: "averaging the last 5 checkpoints, written at 10-minute intervals")."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from aiayn.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_model,
    run_relative,
    save_weights,
    set_default_weights,
)


def last_checkpoints(run_dir: str | os.PathLike, n: int) -> list[Path]:
    ckpts = [w for _, w, _ in list_checkpoints(run_dir)]
    if not ckpts:
        raise CheckpointError(f"no checkpoints in {Path(run_dir) / 'checkpoints'}")
    if len(ckpts) < n:
        print(f"warning: {run_dir} has only {len(ckpts)} checkpoints; averaging those", file=sys.stderr)
    return ckpts[-n:]


def average_checkpoints(paths: Sequence[str | Path]) -> torch.nn.Module:
    """A model whose floating-point parameters are the element-wise mean of the given checkpoints'
    (summed in float64, so the order of files does not matter to rounding at float32 precision)."""
    if not paths:
        raise ValueError("nothing to average")
    model = load_model(paths[0])
    names = {k for k, v in model.state_dict().items() if v.is_floating_point()}
    total = {k: v.double() for k, v in model.state_dict().items() if k in names}
    for p in paths[1:]:
        other = load_model(p)
        if other.config != model.config:
            raise CheckpointError(f"{p} has a different model config than {paths[0]}; cannot average")
        for k, v in other.state_dict().items():
            if k in names:
                total[k] += v.double()
    with torch.no_grad():
        state = {k: (total[k] / len(paths)).to(v.dtype) if k in names else v for k, v in model.state_dict().items()}
        model.load_state_dict(state)
    return model


def average_last(run_dir: str | os.PathLike, k: int, device: str | torch.device = "cpu") -> torch.nn.Module:
    """The model whose weights average the last k step checkpoints of a run, in eval mode."""
    return average_checkpoints(last_checkpoints(run_dir, k)).to(device).eval()


def average_run(run_dir: str | Path, last: int, output: str | Path, default_because: str | None = None) -> Path:
    """Write the average of the run's last `last` step checkpoints to `output`. With `default_because`
    (who makes it so, in words), `output`, which must lie inside the run, becomes the run's default
    weights (RUN/weights.json: what `-c RUN_DIR` loads, see aiayn.checkpoint.which_weights)."""
    if default_because is not None:
        run_relative(run_dir, output)  # refused before the work, not after it
    paths = last_checkpoints(run_dir, last)
    model = average_checkpoints(paths)
    step = int(paths[-1].stem.split("_")[1])
    out = save_weights(model, output, step=step, extra={"averaged": json.dumps([str(p) for p in paths])})
    if default_because is not None:
        steps = ", ".join(str(int(p.stem.split("_")[1])) for p in paths)
        n = f"last {len(paths)} checkpoints" if len(paths) > 1 else "last checkpoint"
        set_default_weights(run_dir, out, f"the average of the {n} (steps {steps}), {default_because}")
    return out
