"""One device resolver for every command: "auto" (or None) is CUDA when present, else the CPU."""

from __future__ import annotations

import os

import torch

from aiayn.errors import AiaynError


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """None or "auto" -> CUDA when present, else CPU; otherwise the named device, checked. On CUDA it also
    sets the attention kernels aiayn runs with (`shape_free_attention`)."""
    if device is None or str(device) == "auto":
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        try:
            dev = torch.device(device)
        except RuntimeError as e:
            raise AiaynError(f"bad device {device!r}: {e}") from None
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise AiaynError(f"device {device!r} requested but CUDA is not available")
    shape_free_attention(dev)
    return dev


def shape_free_attention(device: torch.device) -> None:
    """On CUDA, scaled_dot_product_attention without its cuDNN kernel (FlashAttention and the
    memory-efficient kernel remain). cuDNN builds an execution plan for every new attention shape, and
    aiayn's shapes change all the time: token-budget batches differ in B, S and T from update to update,
    and each decoding step adds a key. On an H100 (torch 2.11) each new shape cost 1.7-2.7 s, so bf16
    training of the base model ran at 11k instead of 340k tokens/s (docs/benchmarks.md, GPU). A process
    where shapes are fixed can turn it back on with AIAYN_CUDNN_SDP=1. Nothing changes on the CPU."""
    if device.type == "cuda" and os.environ.get("AIAYN_CUDNN_SDP") != "1":
        torch.backends.cuda.enable_cudnn_sdp(False)


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
