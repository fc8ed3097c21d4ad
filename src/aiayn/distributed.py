"""Process-group plumbing for `torchrun --nproc_per_node=N -m aiayn train ...` and
`srun python -m aiayn train ...` (SLURM).

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT. Without them, SLURM's
per-task variables give the rank (SLURM_PROCID), the world (SLURM_STEP_NUM_TASKS, else
SLURM_NTASKS) and the local rank (SLURM_LOCALID); the rendezvous address then has to be exported
(MASTER_ADDR / MASTER_PORT), since SLURM does not set it. With neither this is a single process and
every helper is a no-op. NCCL on GPU, gloo on CPU. The model never imports this module: the trainer
wraps the model in DistributedDataParallel from outside.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from aiayn.errors import AiaynError


class LaunchError(AiaynError, RuntimeError):
    """The launcher's environment does not describe a usable process group."""


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


def launched_by_torchrun(env: Mapping[str, str] = os.environ) -> bool:
    return "RANK" in env and "WORLD_SIZE" in env


def launch_info(env: Mapping[str, str] = os.environ) -> DistInfo:
    """Rank, world size and local rank from torchrun's variables, else from SLURM's (srun). Without
    either, a single process. Each srun task that saw no SLURM support would train alone and
    all of them would write the same run directory: so SLURM is read, not ignored."""

    def number(name: str) -> int:
        try:
            return int(env[name])
        except ValueError:
            raise LaunchError(f"{name}={env[name]!r} is not an integer") from None

    if launched_by_torchrun(env):
        info = DistInfo(number("RANK"), number("WORLD_SIZE"), number("LOCAL_RANK") if "LOCAL_RANK" in env else 0)
    elif "SLURM_PROCID" in env and ("SLURM_STEP_NUM_TASKS" in env or "SLURM_NTASKS" in env):
        # srun sets SLURM_STEP_NUM_TASKS for its step; a batch script only has the job's SLURM_NTASKS
        world = number("SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS")
        info = DistInfo(number("SLURM_PROCID"), world, number("SLURM_LOCALID") if "SLURM_LOCALID" in env else 0)
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
        if info.enabled and missing:
            raise LaunchError(
                f"started by SLURM as task {info.rank} of {info.world_size} but {' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not set; export MASTER_ADDR (the first node's "
                f"host name) and MASTER_PORT (a free port) before srun, or launch with torchrun"
            )
    else:
        return DistInfo()
    if not 0 <= info.rank < info.world_size or info.local_rank < 0:
        raise LaunchError(f"rank {info.rank} / local rank {info.local_rank} do not fit world size {info.world_size}")
    return info


def init(device: torch.device, timeout_s: float = 600) -> DistInfo:
    """Join the process group when started by torchrun or srun; pick this rank's GPU. A collective that
    waits longer than `timeout_s` for another rank fails instead of hanging."""
    info = launch_info()
    if not info.enabled:
        return DistInfo()
    if device.type == "cuda" and info.local_rank >= torch.cuda.device_count():
        raise LaunchError(
            f"local rank {info.local_rank} needs GPU {info.local_rank} but this node shows "
            f"{torch.cuda.device_count()}; start at most that many processes per node "
            f"(--nproc_per_node / --ntasks-per-node) and let each see all the node's GPUs"
        )
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(info.local_rank)
        # rank and world size explicitly: under SLURM they are not in the environment (env:// reads
        # only MASTER_ADDR / MASTER_PORT then)
        dist.init_process_group(
            backend=backend, rank=info.rank, world_size=info.world_size, timeout=timedelta(seconds=timeout_s)
        )
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


class StopVote:
    """Whether any rank asked to stop, agreed between micro-batches without waiting for the device.

    Each rank's flag is summed over a CPU (gloo) group, asynchronously: the sum started after micro-batch
    i is read after micro-batch i + 1, so no rank stalls mid-update for the others, and every rank reads
    the same sum and so stops after the same micro-batch (DDP needs that: a rank that stopped alone would
    leave the others in the last micro-batch's gradient all-reduce). In a single process it reads the
    flag directly."""

    def __init__(self, info: DistInfo) -> None:
        self._group = None
        if info.enabled:  # collective: every rank creates it, in the same order as any other group
            self._group = dist.new_group(backend="gloo")  # its own group: never queued behind DDP's all-reduces
        self._pending: tuple[torch.Tensor, object] | None = None

    def start(self, flag: bool) -> None:
        """Send this rank's flag (after a micro-batch that is not the update's last)."""
        if self._group is not None:
            t = torch.tensor([float(flag)])
            self._pending = (t, dist.all_reduce(t, group=self._group, async_op=True))

    def stop(self, flag: bool) -> bool:
        """Whether to stop now: the previous `start`'s sum over ranks (or `flag` in a single process)."""
        if self._group is None:
            return flag
        assert self._pending is not None, "StopVote.stop() without a start()"
        t, work = self._pending
        self._pending = None
        work.wait()  # type: ignore[attr-defined]
        return bool(t.item() > 0)  # a CPU tensor: no device sync


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
