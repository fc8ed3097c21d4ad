"""Where and how a run computes: device, AMP, deterministic kernels, the global batch, and the one
summed all-reduce the loop uses for its statistics."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import torch
from torch import Tensor

from aiayn import distributed
from aiayn.errors import AiaynError


class TrainingError(AiaynError, RuntimeError):
    """Training cannot start or continue; the message says why and what to do."""


def set_deterministic() -> None:
    """train.deterministic: only deterministic kernels, so a GPU run continues bitwise after a resume
    as a CPU run does anyway. cuBLAS reads its workspace setting when its first handle is made."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def allow_tf32(device: torch.device, deterministic: bool) -> None:
    """On CUDA (Ampere and later), float32 matmuls and convolutions in TF32: several times faster, with
    a 10-bit mantissa on the inputs, which training absorbs. Not under train.deterministic (a run that
    asks for reproducible numbers keeps full float32) and never on CPU, where nothing is touched."""
    if device.type == "cuda" and not deterministic:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def resolve_amp(amp: str, device: torch.device) -> str:
    """`auto`: bf16 where the GPU computes in bf16 (compute capability >= 8, or ROCm); fp16 with loss
    scaling on older GPUs, where torch only emulates bf16 (slower than fp32) and its plain
    `is_bf16_supported()` still says yes; none on CPU."""
    if amp == "auto":
        if device.type != "cuda":
            return "none"
        return "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"
    return amp  # fp16 on CPU works too (autocast + GradScaler("cpu")), slowly: it is how the tests reach that path


def autocast_factory(amp: str, device: torch.device) -> Callable[[], contextlib.AbstractContextManager]:
    """A function giving a fresh autocast context for `amp` (a null context for none)."""
    if amp == "none":
        return contextlib.nullcontext
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return lambda: torch.autocast(device.type, dtype=dtype)


def derive_update_freq(tokens_per_update: int, max_tokens: int, world_size: int) -> int:
    """Micro-batches per rank per update whose global batch (max_tokens x update_freq x world_size)
    comes nearest to `tokens_per_update`: the learning-rate schedule is tuned for a batch size, so the
    batch should not grow with the GPU count."""
    return max(1, round(tokens_per_update / (max_tokens * world_size)))


def global_batch_warning(tokens_per_update: int, max_tokens: int, update_freq: int, world_size: int) -> str | None:
    """One line when the effective batch misses the target by more than 1.5x either way (too many
    ranks for the target, or a max_tokens that does not divide it), else None."""
    eff = max_tokens * update_freq * world_size
    if eff > 1.5 * tokens_per_update or 1.5 * eff < tokens_per_update:
        return (
            f"the global batch is {max_tokens:,} x {update_freq} x {world_size} = {eff:,} tokens, "
            f"{eff / tokens_per_update:.2g}x optim.tokens_per_update={tokens_per_update:,}; "
            f"{'lower data.max_tokens or use fewer ranks' if eff > tokens_per_update else 'raise data.max_tokens'}"
            f" to come nearer"
        )
    return None


def sum_stats(values: list[float | Tensor], device: torch.device) -> list[float]:
    """Sum numbers over ranks in one all-reduce, on the training device (NCCL reduces CUDA tensors
    only) and with one host sync for all of them."""
    t = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=device).detach() for v in values])
    return distributed.all_reduce_sum(t).tolist()
