"""What a run shows and logs as it goes: the clock (elapsed over resumes, train.max_minutes), the
progress bar, messages, and the training records averaged over a window of updates."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from aiayn.config import TrainConfig
from aiayn.train.metrics import MetricsWriter
from aiayn.train.state import TrainState


class Progress:
    def __init__(self, c: TrainConfig, state: TrainState, metrics: MetricsWriter, main: bool) -> None:
        self.c, self.state, self.metrics, self.main = c, state, metrics, main
        self.bar: Any = None
        self.last_train: dict[str, Any] | None = None

    def say(self, msg: str, err: bool = False) -> None:
        if self.main:
            from tqdm import tqdm

            tqdm.write(msg, file=sys.stderr if err else sys.stdout)

    def start(self) -> None:
        from tqdm import tqdm

        c = self.c
        self._t0, self._elapsed0 = time.perf_counter(), self.state.elapsed
        self.t_window = self._t0 - self.state.window["seconds"]  # a resumed window keeps its pre-stop time
        # A time budget (train.max_minutes) makes max_steps a mere cap: then the bar counts steps and the
        # description says the budget, instead of an ETA towards a step count that will not be reached.
        timed = c.max_minutes is not None
        self.bar = (
            tqdm(
                total=None if timed else c.max_steps,
                initial=self.state.step,
                unit="step",
                file=sys.stderr,
                dynamic_ncols=True,
                mininterval=1.0,
                desc=f"train ({c.max_minutes:g} min)" if timed else "train",
            )
            if self.main and c.progress
            else None
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def elapsed(self) -> float:
        return self._elapsed0 + time.perf_counter() - self._t0  # across resumes

    def over_budget(self) -> bool:
        return self.c.max_minutes is not None and self.elapsed() > 60 * self.c.max_minutes

    def stamp(self) -> None:
        """Put the clock into the train state (before it is saved)."""
        self.state.elapsed, self.state.window["seconds"] = self.elapsed(), time.perf_counter() - self.t_window

    def restart_window(self) -> None:
        self.t_window = time.perf_counter()  # keep evaluation time out of tokens/s

    def updated(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def log(self, lr: float, epoch: int) -> None:
        w, now = self.state.window, time.perf_counter()
        loss, nll = w["loss"] / max(w["tokens"], 1), w["nll"] / max(w["tokens"], 1)
        rec = self.metrics.write(
            "train",
            self.state.step,
            loss=loss,
            nll=nll,
            ppl=math.exp(min(nll, 50.0)),
            lr=lr,
            tokens_per_s=w["tokens"] / max(now - self.t_window, 1e-9),
            elapsed=self.elapsed(),
            epoch=epoch,
        )
        self.last_train = rec
        self.state.reset_window()
        self.t_window = now
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{rec['tokens_per_s']:.0f}", refresh=False)
        elif self.main:
            print(
                f"step {self.state.step} | loss {loss:.3f} | nll {nll:.3f} | lr {lr:.2e} | "
                f"{rec['tokens_per_s']:.0f} tok/s",
                flush=True,
            )
