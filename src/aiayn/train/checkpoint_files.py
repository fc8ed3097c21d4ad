"""Training checkpoints: weights (safetensors) + training state (torch.save of tensors and plain
containers only, loaded with `weights_only=True`, so nothing arbitrary is ever unpickled).

    RUN/checkpoints/step_XXXXXXXX.safetensors   model weights (aiayn.checkpoint.save_weights)
    RUN/checkpoints/step_XXXXXXXX.state.pt      optimizer, scheduler, RNG, data position, counters

The weights are written first and the state last, each atomically; a step counts as checkpointed
only when both files exist and load, so a kill at any moment leaves the previous one intact.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from aiayn.checkpoint import CheckpointError, list_checkpoints
from aiayn.fileio import atomic_write


def prune(run_dir: str | Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` step checkpoints (best.safetensors is separate)."""
    ckpts = list_checkpoints(run_dir)
    for _, weights, state in ckpts[: max(len(ckpts) - keep_last, 0)]:
        state.unlink(missing_ok=True)  # state first: a half-deleted pair is then never "complete"
        weights.unlink(missing_ok=True)


# -- RNG --------------------------------------------------------------------------------------------


def capture_rng(device: torch.device | None = None) -> dict[str, Any]:
    """Host RNGs, plus the CUDA generator of `device` (this rank's GPU) when training on one. Only
    that one: saving every visible GPU's state made a resume with fewer visible GPUs fail."""
    np_state = np.random.get_state()
    assert isinstance(np_state, tuple)  # the legacy form (the default)
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "key": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": _plain(random.getstate()),
    }
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state: dict[str, Any], device: torch.device | None = None) -> None:
    """Inverse of `capture_rng`. The CUDA state goes to `device` only."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    cuda = state.get("cuda")
    if cuda is None or device is None or device.type != "cuda":
        return  # saved on CPU, or resumed on CPU: no GPU stream to continue
    torch.cuda.set_rng_state(cuda, device)


def _plain(obj: Any) -> Any:
    """Tuples -> lists recursively (weights_only unpickling accepts both; lists keep it obvious)."""
    if isinstance(obj, (tuple, list)):
        return [_plain(o) for o in obj]
    return obj


# -- state files ------------------------------------------------------------------------------------


def save_state(path: str | Path, state: dict[str, Any]) -> Path:
    return atomic_write(path, lambda tmp: torch.save(state, tmp))


def load_state(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"training state not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, bad pickle, disallowed global: all mean "unusable file"
        raise CheckpointError(
            f"corrupted or truncated training state {path}: {type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    if not isinstance(state, dict) or "step" not in state:
        raise CheckpointError(f"{path} is not an aiayn training state")
    return state


def warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr, flush=True)
