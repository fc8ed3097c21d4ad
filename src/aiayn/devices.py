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
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
