"""Validation during training: the task's measures on the unwrapped model (rank 0), the best
checkpoint by the chosen metric (RUN/best.safetensors), and early stopping (train.patience)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aiayn import distributed
from aiayn.checkpoint import save_weights
from aiayn.distributed import DistInfo
from aiayn.train.metrics import MetricsWriter
from aiayn.train.state import TrainState
from aiayn.train.tasks import Task


def validate(task: Task, model: torch.nn.Module) -> dict[str, Any]:
    """The task's validation measures in eval mode, leaving the training RNG stream where it was."""
    rng = torch.get_rng_state()
    model.eval()
    try:
        return task.validate(model)
    finally:
        model.train()
        torch.set_rng_state(rng)


class Validator:
    def __init__(
        self,
        task: Task,
        model: torch.nn.Module,
        state: TrainState,
        metrics: MetricsWriter,
        run_dir: Path,
        dist: DistInfo,
        device: torch.device,
        patience: int,
        say: Callable[[str], None],
    ) -> None:
        self.task, self.model, self.state, self.metrics = task, model, state, metrics
        self.run_dir, self.dist, self.device, self.patience, self.say = run_dir, dist, device, patience, say
        self.last: dict[str, Any] | None = None  # rank 0 only

    def exhausted(self) -> bool:
        """train.patience validations in a row without a new best (always False without patience)."""
        return self.patience > 0 and self.state.bad_evals >= self.patience

    def __call__(self) -> bool:
        """Rank 0 validates and keeps the best weights; the others wait. Returns, on every rank,
        whether early stopping ends training now."""
        s = self.state
        s.last_eval_step = s.step  # every rank: it decides collective calls
        stop = False
        if self.dist.is_main:
            t = time.perf_counter()
            rec = self.metrics.write("valid", s.step, **validate(self.task, self.model))
            self.last = rec
            shown = " | ".join(f"{k} {v:.4g}" for k, v in rec.items() if isinstance(v, float))
            self.say(f"valid step {s.step} | {shown} ({time.perf_counter() - t:.1f}s)")
            value = rec.get(s.metric)
            if value is not None and s.record_validation(value):
                save_weights(
                    self.model,
                    self.run_dir / "best.safetensors",
                    step=s.step,
                    extra={"valid": json.dumps(rec), "metric": s.metric},
                )
            stop = self.exhausted()
            if stop:
                self.metrics.write(
                    "stop", s.step, reason="patience", metric=s.metric, best=s.best, best_step=s.best_step
                )
                self.say(
                    f"early stop at step {s.step}: no better valid {s.metric} in {self.patience} validations "
                    f"(best {s.best:.4g} at step {s.best_step})"
                )
        if self.dist.enabled:  # rank 0's decision, for every rank (also the barrier that the others wait at)
            stop = bool(distributed.all_reduce_sum(torch.tensor([float(stop)], device=self.device)).item())
        return stop
