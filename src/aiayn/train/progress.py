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
        self._t0, self._elapsed0, self._step0 = time.perf_counter(), self.state.elapsed, self.state.step
        self.t_window = self._t0 - self.state.window["seconds"]  # a resumed window keeps its pre-stop time
        self.stats = ""
        # A time budget (train.max_minutes) makes the bar one of time: it runs to the budget's seconds, or to
        # the projected time of train.max_steps when that comes first (end()), resumes included, with the
        # steps in its text. Only a terminal gets a bar; elsewhere
        # (CI, `| tee`) a line at every train.log_every replaces a carriage-return stream.
        self.budget = 60 * c.max_minutes if c.max_minutes is not None else None
        shown = self.main and c.progress and sys.stderr.isatty()
        self.bar = None
        if shown and self.budget is not None:
            self.bar = tqdm(
                total=self.budget,
                initial=min(self._elapsed0, self.budget),
                file=sys.stderr,
                dynamic_ncols=True,
                mininterval=1.0,
                bar_format="train: {percentage:3.0f}%|{bar}| {desc}",  # desc: the clock, steps, loss
            )
        elif shown:
            self.bar = tqdm(
                total=c.max_steps,
                initial=self.state.step,
                unit="step",
                file=sys.stderr,
                dynamic_ncols=True,
                mininterval=1.0,
                desc="train",
            )

    def end(self) -> tuple[float, bool]:
        """Where a time-budgeted run ends, in seconds of its clock, and whether it is train.max_steps (not
        the budget) that ends it. A run ends at the earlier of the two limits: the step limit's time is
        projected from this invocation's pace, and is exact once the last step is done."""
        assert self.budget is not None
        e, step, last = self.elapsed(), self.state.step, self.c.max_steps
        if step >= last:
            return min(e, self.budget), e < self.budget
        if step > self._step0:
            at_last = e + (e - self._elapsed0) / (step - self._step0) * (last - step)
            if at_last < self.budget:
                return at_last, True
        return self.budget, False

    def clock(self) -> str:
        """`5:12 of 15:00, 9:48 left`: the run's clock (resumes included) and its end, the time budget or,
        when train.max_steps comes first, the time projected for the last step (`of ~0:13` until it is
        done: a bar over the budget alone sat at 1 % when the steps ran out)."""
        end, by_steps = self.end()
        e = min(self.elapsed(), end)
        approx = "~" if by_steps and self.state.step < self.c.max_steps else ""
        return f"{_minutes(e)} of {approx}{_minutes(end)}, {_minutes(end - e)} left"

    def _steps(self) -> str:
        """`step 30`, or `step 30/60` when the step limit ends the run (no budget, or before the budget)."""
        by_steps = self.budget is None or self.end()[1]
        return f"step {self.state.step}" + (f"/{self.c.max_steps}" if by_steps else "")

    def close(self) -> None:
        if self.bar is not None:
            if self.budget is not None:  # the last drawing: where the run ended on its time bar
                end = self.end()[0]
                self.bar.total, self.bar.n = end, min(self.elapsed(), end)
                self.bar.set_description_str(f"{self.clock()}, {self._steps()}{self.stats}", refresh=False)
                self.bar.refresh()
            self.bar.close()

    def elapsed(self) -> float:
        return self._elapsed0 + time.perf_counter() - self._t0  # across resumes

    def over_budget(self) -> bool:
        return self.c.max_minutes is not None and self.elapsed() > 60 * self.c.max_minutes

    def stamp(self) -> None:
        """Put the clock into the train state (before it is saved)."""
        self.state.elapsed, self.state.window["seconds"] = self.elapsed(), time.perf_counter() - self.t_window

    def paused(self) -> float:
        """Where a pause of the window (a validation) starts; hand it to `resume_window` after it."""
        return time.perf_counter()

    def resume_window(self, paused_at: float) -> None:
        """Keep the pause's time out of tokens/s by moving the window's start forward by its length. The
        window keeps its tokens and its training time before the pause: restarting the clock instead
        divided all of the window's tokens by the time since the pause alone (a record right after a
        validation said billions of tokens/s)."""
        self.t_window += time.perf_counter() - paused_at

    def updated(self) -> None:
        if self.bar is None:
            return
        if self.budget is None:
            self.bar.update(1)
            return
        end = self.end()[0]
        self.bar.total = end  # the run's end as now known: the budget or the step limit's projected time
        self.bar.update(min(self.elapsed(), end) - self.bar.n)  # drawn at most once a second
        self.bar.set_description_str(f"{self.clock()}, {self._steps()}{self.stats}", refresh=False)

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
        if self.bar is not None and self.budget is None:
            self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{rec['tokens_per_s']:.0f}", refresh=False)
        elif self.bar is not None:
            self.stats = f", loss {loss:.3f}, lr {lr:.2e}, {rec['tokens_per_s']:.0f} tok/s"
        elif self.main:
            where = f" | {self.clock()}" if self.budget is not None else ""
            print(
                f"{self._steps()} | loss {loss:.3f} | nll {nll:.3f} | lr {lr:.2e} | "
                f"{rec['tokens_per_s']:.0f} tok/s{where}",
                flush=True,
            )


def _minutes(seconds: float) -> str:
    """`m:ss`, or `h:mm:ss` from an hour on."""
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
