"""One device resolver for every command: "auto" (or None) is CUDA when present, else the CPU."""

from __future__ import annotations

import os

import torch

from aiayn.errors import AiaynError


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """None or "auto" -> CUDA when present, else CPU; otherwise the named device, checked."""
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise AiaynError(f"bad device {device!r}: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise AiaynError(f"device {device!r} requested but CUDA is not available")
    return dev


def cpu_cores() -> int:
    """The CPUs this process may use: those it may run on, capped by a container's CPU quota (cgroup v2
    cpu.max or v1 cpu.cfs_quota_us, as `docker --cpus` and Kubernetes limits set it)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(n, quota)) if quota else n


def _cgroup_quota(root: str = "/sys/fs/cgroup") -> int | None:
    """ceil(quota / period) CPUs, or None without a quota."""
    try:
        with open(os.path.join(root, "cpu.max")) as f:  # cgroup v2: "max 100000" or "200000 100000"
            limit, length = f.read().split()[:2]
        return None if limit == "max" else -(-int(limit) // int(length))
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        with open(os.path.join(root, "cpu", "cpu.cfs_quota_us")) as f:
            q = int(f.read())
        with open(os.path.join(root, "cpu", "cpu.cfs_period_us")) as f:
            p = int(f.read())
        return -(-q // p) if q > 0 and p > 0 else None
    except (OSError, ValueError):
        return None
