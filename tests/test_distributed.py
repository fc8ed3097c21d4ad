"""Launcher detection: torchrun's variables, SLURM's (srun), or a single process; no process group is
created here (init_process_group is recorded, not called)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch

from aiayn import distributed
from aiayn.distributed import DistInfo, LaunchError, launch_info

TORCHRUN = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "n0", "MASTER_PORT": "29500"}
SRUN = {
    "SLURM_PROCID": "5",
    "SLURM_NTASKS": "8",
    "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_LOCALID": "1",
    "MASTER_ADDR": "n0",
    "MASTER_PORT": "29500",
}


def test_torchrun_slurm_and_single_process_are_told_apart():
    assert launch_info({}) == DistInfo()
    assert launch_info(TORCHRUN) == DistInfo(3, 8, 1)
    assert launch_info(SRUN) == DistInfo(5, 8, 1)
    assert launch_info({**SRUN, **TORCHRUN}) == DistInfo(3, 8, 1)  # torchrun inside a SLURM job wins
    # a batch script has only the job's task count; srun's step count wins where both are set
    assert launch_info({k: v for k, v in SRUN.items() if k != "SLURM_STEP_NUM_TASKS"}) == DistInfo(5, 8, 1)
    assert launch_info({**SRUN, "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"}) == DistInfo(1, 2, 1)
    one = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}  # one task: single process, no rendezvous needed
    assert launch_info(one) == DistInfo(0, 1, 0) and not launch_info(one).enabled


def test_slurm_without_a_rendezvous_address_is_one_clear_line():
    env = {k: v for k, v in SRUN.items() if k != "MASTER_ADDR"}
    with pytest.raises(LaunchError, match=r"task 5 of 8 but MASTER_ADDR is not set") as e:
        launch_info(env)
    assert "\n" not in str(e.value)
    with pytest.raises(LaunchError, match="MASTER_ADDR and MASTER_PORT are not set"):
        launch_info({k: v for k, v in SRUN.items() if not k.startswith("MASTER")})
    with pytest.raises(LaunchError, match="do not fit world size"):
        launch_info({**TORCHRUN, "RANK": "8"})
    with pytest.raises(LaunchError, match="SLURM_PROCID='x' is not an integer"):
        launch_info({**SRUN, "SLURM_PROCID": "x"})


def test_init_joins_with_slurms_rank_and_checks_the_local_gpu(monkeypatch):
    calls = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kw: calls.append(kw))
    for k in list(TORCHRUN) + list(SRUN):
        monkeypatch.delenv(k, raising=False)
    for k, v in SRUN.items():
        monkeypatch.setenv(k, v)
    assert distributed.init(torch.device("cpu"), timeout_s=30) == DistInfo(5, 8, 1)
    # rank and world size: not in the environment under SLURM; the timeout is train.dist_timeout_s
    assert calls == [{"backend": "gloo", "rank": 5, "world_size": 8, "timeout": timedelta(seconds=30)}]

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # local rank 1 on a node showing 1 GPU
    with pytest.raises(LaunchError, match="local rank 1 needs GPU 1 but this node shows 1"):
        distributed.init(torch.device("cuda"))
    assert len(calls) == 1
