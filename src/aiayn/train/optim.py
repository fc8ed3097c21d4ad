"""Adam (paper §5.3: beta1 0.9, beta2 0.98, eps 1e-9), its schedule and the fp16 loss scaler."""

from __future__ import annotations

from typing import Any

import torch

from aiayn.config import OptimConfig
from aiayn.train.schedule import NoamScheduler, noam_scheduler


def build_optimizer(
    model: torch.nn.Module, o: OptimConfig, d_model: int, device: torch.device, amp: str, max_steps: int = 0
) -> tuple[torch.optim.Optimizer, NoamScheduler, torch.amp.GradScaler | None]:
    # fused: one kernel for all parameters instead of a Python loop over tensors (CPU and CUDA)
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=1.0,
        betas=o.betas,
        eps=o.eps,
        weight_decay=o.weight_decay,
        fused=device.type in ("cpu", "cuda"),
    )
    scheduler = noam_scheduler(
        optimizer,
        d_model,
        o.warmup,
        o.lr_scale,
        (max_steps, o.min_lr_ratio) if o.schedule == "cosine" else None,
        (max_steps, o.cooldown),
    )
    scaler = torch.amp.GradScaler(device.type) if amp == "fp16" else None
    return optimizer, scheduler, scaler


class ConfiguredAdam:
    """The optimizer as a checkpointed part: its moments and step counts come from the checkpoint,
    its hyperparameters (lr, betas, eps, weight decay) from the current config, as the schedule's do."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        groups = [
            {**saved, **{k: v for k, v in now.items() if k != "params"}}
            for saved, now in zip(state["param_groups"], self.optimizer.param_groups)
        ]
        self.optimizer.load_state_dict({**state, "param_groups": groups})
