"""The loop's own progress as one Stateful part: step, time used, skipped updates, the logging
window and early stopping's best value and patience counter. Checkpointed with the model, optimizer,
scheduler, scaler, data position and RNG, so a resumed run continues (and stops) exactly where an
uninterrupted one would (unlike a patience counter that restarts at 0 on resume, fairseq #3531)."""

from __future__ import annotations

import dataclasses
from typing import Any


def _empty_window() -> dict[str, float]:
    return {"loss": 0.0, "nll": 0.0, "tokens": 0.0, "steps": 0, "seconds": 0.0}


@dataclasses.dataclass
class TrainState:
    step: int = 0  # completed optimizer updates
    elapsed: float = 0.0  # seconds of training, over all resumes (train.max_minutes)
    nan_total: int = 0  # skipped updates (non-finite loss or gradient, fp16 overflow)
    nan_consecutive: int = 0
    # training records are averaged over a window of updates; a stop mid-window keeps its sums
    window: dict[str, float] = dataclasses.field(default_factory=_empty_window)
    metric: str = "loss"  # what `best` measures (train.patience_metric)
    higher: bool = False  # whether a higher `metric` is better (the task's TaskSpec.measures says)
    best: float | None = None  # its best validation value so far
    best_step: int = -1
    bad_evals: int = 0  # validations since `best` without improvement (train.patience)
    last_eval_step: int = -1

    def reset_window(self) -> None:
        self.window = _empty_window()

    def improves(self, value: float) -> bool:
        if self.best is None:
            return True
        return value > self.best if self.higher else value < self.best

    def record_validation(self, value: float) -> bool:
        """Count one validation of the chosen metric; True when it is a new best."""
        self.last_eval_step = self.step
        if self.improves(value):
            self.best, self.best_step, self.bad_evals = value, self.step, 0
            return True
        self.bad_evals += 1
        return False

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "counters": {"nan_total": self.nan_total, "nan_consecutive": self.nan_consecutive, "elapsed": self.elapsed},
            "window": dict(self.window),
            "best": self.best,
            "early_stop": {
                "metric": self.metric,
                "best_step": self.best_step,
                "bad_evals": self.bad_evals,
                "last_eval_step": self.last_eval_step,
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        c = state["counters"]
        self.nan_total, self.nan_consecutive = int(c["nan_total"]), int(c["nan_consecutive"])
        self.elapsed = float(c["elapsed"])
        self.window = {**_empty_window(), **state["window"]}
        early = state["early_stop"]
        if early["metric"] != self.metric:  # train.patience_metric changed: a best of another metric is no guide
            self.best, self.best_step, self.bad_evals = None, -1, 0
        else:
            self.best, self.best_step, self.bad_evals = state["best"], int(early["best_step"]), int(early["bad_evals"])
        self.last_eval_step = int(early["last_eval_step"])
