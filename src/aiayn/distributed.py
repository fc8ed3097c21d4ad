"""Process-group plumbing for `torchrun --nproc_per_node=N -m aiayn train ...`.

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT; without them this is
a single process and every helper is a no-op. NCCL on GPU, gloo on CPU. The model never imports
this module: the trainer wraps the model in DistributedDataParallel from outside.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init(device: torch.device, timeout_s: float = 600) -> DistInfo:
    """Join the process group when started by torchrun; pick this rank's GPU. A collective that waits
    longer than `timeout_s` for another rank fails instead of hanging."""
    if not launched_by_torchrun() or int(os.environ["WORLD_SIZE"]) == 1:
        return DistInfo()
    info = DistInfo(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)))
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(info.local_rank)
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    return info


def local_device(device: torch.device, info: DistInfo) -> torch.device:
    if device.type == "cuda" and info.enabled:
        return torch.device("cuda", info.local_rank)
    return device


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum over ranks (in place and returned); identity in a single process."""
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def all_gather_object(obj: object) -> list[object]:
    """Every rank's `obj`, in rank order; `[obj]` in a single process."""
    if dist.is_available() and dist.is_initialized():
        out: list[object] = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out
    return [obj]


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
