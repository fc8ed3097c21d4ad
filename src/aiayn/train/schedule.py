"""The learning-rate schedule of paper §5.3 (eq. 3), the "Noam" schedule:

    lrate = d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)

linear warm-up for `warmup` steps, then decay with the inverse square root of the step.

`optim.schedule: cosine` keeps the same warm-up and peak, then follows a half cosine down to
`min_lr_ratio` of the peak at `train.max_steps` (the schedule of GPT-style language models, e.g.
nanoGPT's): a run of known length ends at a low rate instead of the inverse square root's tail.

`optim.cooldown: N` keeps either schedule and multiplies its last N updates before `train.max_steps`
by a line falling towards 0, the last at 1/N (warmup-stable-decay, "WSD"): the first max_steps - N
updates are those of the schedule without it, so a run's checkpoint can be resumed into a cooldown.
"""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR


def noam_lr(step: int, d_model: int, warmup: int = 4000, scale: float = 1.0) -> float:
    """The rate used by update number `step` (1-based)."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


class NoamFactor:
    """LambdaLR multiplier: the inverse square root after a linear warm-up (eq. 3 without d_model^-0.5)."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup

    def __call__(self, i: int) -> float:
        # LambdaLR calls with 0 before the first update: update i+1 uses the paper's step i+1.
        return noam_lr(i + 1, 1, self.warmup)  # d_model^-0.5 and scale live in the base lr


class CosineFactor:
    """LambdaLR multiplier: the Noam warm-up to its peak, then a half cosine to `min_ratio` x peak."""

    def __init__(self, warmup: int, total: int, min_ratio: float) -> None:
        self.warmup, self.total, self.min_ratio = warmup, max(total, warmup + 1), min_ratio

    def __call__(self, i: int) -> float:
        step = i + 1
        peak = self.warmup**-0.5  # d_model^-0.5 and scale live in the base lr, as for NoamFactor
        if step <= self.warmup:
            return peak * step / self.warmup
        progress = min(1.0, (step - self.warmup) / (self.total - self.warmup))
        return peak * (self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


class CooldownFactor:
    """LambdaLR multiplier: `inner`, times a line from 1 down to 1/steps over the last `steps` updates
    before `total` (the last update still learns; the rate would be 0 after it)."""

    def __init__(self, inner: NoamFactor | CosineFactor, total: int, steps: int) -> None:
        self.inner, self.total, self.steps = inner, total, steps

    def __call__(self, i: int) -> float:
        left = self.total - i  # updates left, this one included
        return self.inner(i) * min(1.0, max(left, 0) / self.steps)


class NoamScheduler(LambdaLR):
    """LambdaLR whose saved state is only a position: loading it continues at the saved update count
    with the warm-up and scale of the current config (so a resume can change the learning rate)."""

    def state_dict(self) -> dict:
        # the factors come from the config; a nested one would not load with weights_only=True
        return {k: v for k, v in super().state_dict().items() if k != "lr_lambdas"}

    def load_state_dict(self, state_dict: dict) -> None:
        self.last_epoch = int(state_dict["last_epoch"])
        self._step_count = self.last_epoch + 1
        for group, base, factor in zip(self.optimizer.param_groups, self.base_lrs, self.lr_lambdas):
            group["lr"] = base * factor(self.last_epoch)
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]


def noam_scheduler(
    optimizer: torch.optim.Optimizer,
    d_model: int,
    warmup: int = 4000,
    scale: float = 1.0,
    cosine_to: tuple[int, float] | None = None,
    cooldown_to: tuple[int, int] | None = None,
) -> NoamScheduler:
    """A stateful scheduler (state_dict/load_state_dict) stepping once per optimizer update.
    `cosine_to=(total_steps, min_ratio)`: the cosine schedule instead of the inverse square root.
    `cooldown_to=(total_steps, cooldown_steps)`: the linear fall over the last cooldown_steps
    (0: none)."""
    for group in optimizer.param_groups:
        group["lr"] = group["initial_lr"] = scale * d_model**-0.5
    factor: NoamFactor | CosineFactor | CooldownFactor
    factor = NoamFactor(warmup) if cosine_to is None else CosineFactor(warmup, *cosine_to)
    if cooldown_to is not None and cooldown_to[1] > 0:
        factor = CooldownFactor(factor, *cooldown_to)
    return NoamScheduler(optimizer, factor, last_epoch=-1)
