"""One optimizer update over `update_freq` micro-batches, and the policy for updates that must be
skipped (a non-finite loss or gradient norm, an fp16 overflow).

The loss is normalised by the task's token count of the whole global batch, so N ranks with 1/N of
the batch each compute the same update as one process (up to float rounding).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch

from aiayn.distributed import DistInfo, StopVote, all_reduce_sum
from aiayn.train.runtime import TrainingError, sum_stats
from aiayn.train.state import TrainState
from aiayn.train.tasks import Task


@dataclasses.dataclass
class StepResult:
    """One update's outcome; sums are over the global batch (every rank)."""

    ok: bool  # False: non-finite loss or gradient norm, the optimizer and schedule did not step
    loss: float  # summed training loss
    nll: float  # summed negative log-likelihood
    tokens: float  # the normaliser (the task's token count)
    lr: float  # the learning rate this update used
    grad_norm: float  # mean over ranks of the pre-clipping norm (equal on every rank under DDP)
    overflow: bool = False  # fp16: the loss was finite, the scaled gradients were not


@dataclasses.dataclass
class Flags:
    """Stop requests the update shares with the other ranks in its one host sync."""

    stop: bool = False  # SIGTERM / Ctrl-C seen (on any rank, once summed)
    out_of_time: bool = False  # train.max_minutes used up (on any rank, once summed)


class TrainStep:
    def __init__(
        self,
        task: Task,
        model: torch.nn.Module,
        train_model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        scaler: torch.amp.GradScaler | None,
        dist: DistInfo,
        device: torch.device,
        clip_norm: float,
    ) -> None:
        self.task, self.model, self.train_model = task, model, train_model
        self.optimizer, self.scheduler, self.scaler = optimizer, scheduler, scaler
        self.dist, self.device, self.clip_norm = dist, device, clip_norm
        self.vote = StopVote(dist)  # collective (a gloo group beside NCCL): every rank builds it, here

    def __call__(self, micro: list[Any], flags: Flags, over_budget: Callable[[], bool]) -> StepResult | None:
        """Forward/backward over the micro-batches, then one optimizer step unless non-finite. None when a
        stop request (SIGTERM, Ctrl-C) ended the update between micro-batches, its gradients dropped."""
        local_tokens = float(sum(self.task.tokens(b) for b in micro))
        # DDP averages gradients over ranks: scale = world size / global token count, needed before backward.
        # Under DDP the count is summed on the device (filled by a kernel, not copied from the host, and
        # all-reduced in stream order), so the scale never comes back to the host: no wait here; the host
        # learns the count with the other sums below. The division is float64 as the host's would be.
        scale: float | torch.Tensor = self.dist.world_size / local_tokens
        if self.dist.enabled:
            count = all_reduce_sum(torch.full((), local_tokens, dtype=torch.float64, device=self.device))
            scale = torch.full((), float(self.dist.world_size), dtype=torch.float64, device=self.device).div_(count)
            scale = scale.float()  # as a Python float multiplies a float32 loss: rounded to float32 once
        # summed on the device: no host sync per micro-batch
        loss_sum = nll_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        # A preempted job has seconds (torchrun, SLURM: SIGKILL ~30 s after SIGTERM), not the rest of a
        # long update: between micro-batches every rank checks, together, whether one was asked to stop.
        if len(micro) > 1:
            self.vote.start(flags.stop)
        for i, b in enumerate(micro):
            if i:
                if self.vote.stop(flags.stop):
                    flags.stop = True
                    self.optimizer.zero_grad(set_to_none=True)  # no optimizer, scaler or schedule step taken
                    return None
                if i < len(micro) - 1:
                    self.vote.start(flags.stop)
            sync = i == len(micro) - 1 or not self.dist.enabled
            with contextlib.nullcontext() if sync else cast(Any, self.train_model).no_sync():  # DDP's
                loss, nll = self.task.loss(self.train_model, b)
                obj = loss * scale
                (self.scaler.scale(obj) if self.scaler else obj).backward()
            loss_sum = loss_sum + loss.detach()
            nll_sum = nll_sum + nll.detach()
        lr = self.optimizer.param_groups[0]["lr"]
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        gnorm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), self.clip_norm if self.clip_norm > 0 else math.inf
        )
        # The update's one host sync: loss sums, the stop requests and time budget (decided by all ranks
        # together, at the same update), the gradient norm, which DDP made equal on every rank, so its sum
        # over ranks is finite exactly when it is, and the global token count.
        loss_total, nll_total, stop, out_of_time, gnorm_sum, global_tokens = sum_stats(
            [loss_sum, nll_sum, float(flags.stop), float(over_budget()), gnorm, local_tokens], self.device
        )
        flags.stop, flags.out_of_time = flags.stop or bool(stop), flags.out_of_time or bool(out_of_time)

        finite_loss = math.isfinite(loss_total)
        ok = finite_loss and math.isfinite(gnorm_sum)
        if ok and self.scaler:  # gradients known finite; with fused Adam the scaler's step adds no sync
            self.scaler.step(self.optimizer)
        elif ok:
            self.optimizer.step()
        if self.scaler:
            self.scaler.update()  # after an overflow (inf found by unscale_) this halves the scale
        self.optimizer.zero_grad(set_to_none=True)
        if ok:
            self.scheduler.step()
        return StepResult(
            ok,
            loss_total,
            nll_total,
            global_tokens,
            lr,
            gnorm_sum / self.dist.world_size,
            overflow=not ok and self.scaler is not None and finite_loss,
        )


def skipped_update(
    result: StepResult, state: TrainState, scaler: torch.amp.GradScaler | None, nan_limit: int, last_saved: Path | None
) -> tuple[dict[str, Any], str, TrainingError | None]:
    """The policy for a skipped update: count it, and stop training after `nan_limit` in a row.

    An fp16 overflow (finite loss, the scaler skipped the step and halved its scale) counts like any
    other skip: a few while the scale calibrates are harmless, but gradients that stay non-finite
    would otherwise halve the scale towards 0 forever. Returns the skip record's fields, the message,
    and the error to raise once both are out (None while under the limit)."""
    state.nan_total += 1
    state.nan_consecutive += 1
    what = "non-finite " + ("loss" if not math.isfinite(result.loss) else "gradient norm")
    fields: dict[str, Any] = {"reason": what, "consecutive": state.nan_consecutive, "total": state.nan_total}
    scale = None
    if result.overflow:
        assert scaler is not None  # an overflow is the scaler's finding
        scale = scaler.get_scale()  # already halved by scaler.update()
        what = f"fp16 gradient overflow (loss scale now {scale:g})"
        fields.update(reason="fp16 gradient overflow", scale=scale)
    msg = (
        f"step {state.step + 1}: {what}, update skipped ({state.nan_consecutive} in a row, {state.nan_total} in total)"
    )
    if state.nan_consecutive < nan_limit:
        return fields, msg, None
    last = last_saved or "none (no checkpoint was written yet)"
    if result.overflow:
        return (
            fields,
            msg,
            TrainingError(
                f"fp16 gradients overflowed in {nan_limit} consecutive updates (after step {state.step}; loss scale "
                f"down to {scale:g}); training stopped. Last good checkpoint: {last}. Try a lower optim.lr_scale, "
                f"optim.clip_norm, a higher train.nan_limit, or train.amp=bf16 / none instead of fp16"
            ),
        )
    return (
        fields,
        msg,
        TrainingError(
            f"{what.removeprefix('non-finite ')} was NaN/inf for {nan_limit} consecutive updates (after step "
            f"{state.step}); training stopped. Last good checkpoint: {last}. Try a lower optim.lr_scale, "
            f"optim.clip_norm, or train.amp=bf16 instead of fp16"
        ),
    )
