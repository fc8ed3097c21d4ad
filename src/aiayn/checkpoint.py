"""Model weights on disk: safetensors files that carry their own ModelConfig.

A weights file is self-describing: its metadata holds the model config (JSON) and the training
step, so `load_model(path)` needs nothing else. Every write is atomic (temp file, fsync, rename):
a crash leaves either the old file or the new one, never half of one. Nothing is unpickled.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import cast

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model as _st_load_model
from safetensors.torch import save_model as _st_save_model

from aiayn.config import ModelConfig
from aiayn.errors import AiaynError
from aiayn.fileio import atomic_write
from aiayn.model import Transformer, build_model

WEIGHTS_SUFFIX = ".safetensors"
HUB_WEIGHTS = "model.safetensors"  # the weights of a model on the Hugging Face Hub (aiayn push)
_STEP_RE = re.compile(r"^step_(\d{8,})\.safetensors$")


class CheckpointError(AiaynError, RuntimeError):
    """A checkpoint file is missing, truncated or not one of ours."""


def model_config(model: torch.nn.Module) -> ModelConfig:
    """The ModelConfig every aiayn model (Transformer, EncoderOnly, DecoderOnly) carries as `.config`."""
    return cast(ModelConfig, model.config)


def save_weights(
    model: torch.nn.Module, path: str | os.PathLike, step: int | None = None, extra: dict[str, str] | None = None
) -> Path:
    """Write the model's weights (tied tensors stored once) with its config in the metadata."""
    meta = {"format": "aiayn", "model_config": json.dumps(model_config(model).to_dict())}
    if step is not None:
        meta["step"] = str(step)
    meta.update(extra or {})
    return atomic_write(path, lambda tmp: _st_save_model(model, tmp, metadata=meta))


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"corrupted or truncated checkpoint {path}: {e}") from None
    if "model_config" not in meta:
        raise CheckpointError(f"{path} is a safetensors file but not an aiayn checkpoint (no model_config)")
    return meta


def resolve_weights(path: str | os.PathLike) -> Path:
    """A weights file, or a run directory -> its best.safetensors, else model.safetensors (a model
    downloaded from the Hub, see aiayn.hub), else its newest checkpoint."""
    path = Path(path)
    if path.is_dir():
        for name in ("best.safetensors", HUB_WEIGHTS):
            if (path / name).is_file():
                return path / name
        found = sorted((path / "checkpoints").glob(f"step_*{WEIGHTS_SUFFIX}"))
        if not found:
            raise CheckpointError(
                f"no checkpoint in run directory {path} (looked for best.safetensors, {HUB_WEIGHTS} "
                f"and checkpoints/step_*.safetensors)"
            )
        return found[-1]
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}")
    return path


def weights_config(path: str | os.PathLike) -> ModelConfig:
    """The ModelConfig a weights file carries in its metadata."""
    return ModelConfig.from_dict(json.loads(read_metadata(path)["model_config"]))


def load_weights(
    model: torch.nn.Module, path: str | os.PathLike, device: str | torch.device = "cpu", new_heads: tuple[str, ...] = ()
) -> None:
    """The one way weights enter a model (inference, resume, fine-tuning): strict, all keys and shapes,
    except that parameters under the `new_heads` prefixes may be absent from the file (a classifier head
    fine-tuned on a pre-trained encoder keeps its fresh initialisation)."""
    try:
        missing, unexpected = _st_load_model(model, str(path), strict=not new_heads, device=str(device))
    except (SafetensorError, OSError, RuntimeError) as e:
        raise CheckpointError(f"cannot load weights from {path}: {e}") from None
    wrong = [k for k in missing if not k.startswith(new_heads)] + list(unexpected)
    if new_heads and wrong:
        raise CheckpointError(
            f"cannot load weights from {path}: missing or unexpected tensors {', '.join(sorted(wrong)[:8])}"
        )


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu") -> torch.nn.Module:
    """Build the model described by a checkpoint (or run directory) and load its weights, in eval mode:
    a `Transformer`, `EncoderOnly` or `DecoderOnly` as its config's `kind` says."""
    file = resolve_weights(path)
    model = build_model(weights_config(file))
    load_weights(model, file, device)
    return model.to(device).eval()


def load_translation_model(path: str | os.PathLike, device: str | torch.device = "cpu") -> Transformer:
    """`load_model` for the translation commands: refuses encoder-only and decoder-only weights in one line."""
    file = resolve_weights(path)
    kind = weights_config(file).kind
    if kind != "encoder-decoder":
        raise CheckpointError(
            f"{file} holds a {kind} model, not a translation (encoder-decoder) model; "
            f"use `aiayn generate` / `aiayn score` for decoder-only runs"
        )
    return cast(Transformer, load_model(file, device))


def find_in_run(path: str | os.PathLike, name: str) -> Path | None:
    """`name` in a run directory, or next to a weights file or in one of its parent directories."""
    path = Path(path)
    for d in [path] if path.is_dir() else list(path.resolve().parents)[:3]:
        if (d / name).is_file():
            return d / name
    return None


def find_tokenizer(path: str | os.PathLike) -> Path:
    """The run's spm.model (see `find_in_run`)."""
    found = find_in_run(path, "spm.model")
    if found is None:
        raise CheckpointError(
            f"no spm.model found for {path} (looked in the run directory and up to three parents of a weights file)"
        )
    return found


# -- a run directory's step checkpoints (written by aiayn.train.state) ------------------------------


def checkpoint_paths(run_dir: str | os.PathLike, step: int) -> tuple[Path, Path]:
    d = Path(run_dir) / "checkpoints"
    return d / f"step_{step:08d}.safetensors", d / f"step_{step:08d}.state.pt"


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path, Path]]:
    """Complete-looking checkpoints (both files present), oldest first."""
    found = []
    for p in (Path(run_dir) / "checkpoints").glob("step_*.safetensors"):
        m = _STEP_RE.match(p.name)
        if m:
            weights, state = checkpoint_paths(run_dir, int(m.group(1)))
            if state.is_file():
                found.append((int(m.group(1)), weights, state))
    return sorted(found)
