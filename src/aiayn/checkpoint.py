"""Model weights on disk: safetensors files that carry their own ModelConfig.

A weights file is self-describing: its metadata holds the model config (JSON) and the training
step, so `load_model(path)` needs nothing else. Every write is atomic (temp file, fsync, rename):
a crash leaves either the old file or the new one, never half of one. Nothing is unpickled.

A run directory stands for one weights file, resolved in one place (`which_weights`): the file its
weights.json names, else best.safetensors, else model.safetensors, else the newest checkpoint. Every
command and class that takes a run (translate, evaluate, serve, export, push, Translator) loads that.
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
BEST_WEIGHTS = "best.safetensors"  # a run's best weights by validation (aiayn.train.validate)
# RUN/weights.json names the weights `-c RUN` loads and why (set_default_weights), so that a run loads
# what its own final evaluation scored (the quickstart's average), not one checkpoint beside it
DEFAULT_WEIGHTS = "weights.json"
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


def fallback_weights(run: Path) -> tuple[Path, str]:
    """A run directory's weights when it names none (no weights.json): best.safetensors, else
    model.safetensors (a model downloaded from the Hub, see aiayn.hub), else its newest checkpoint."""
    if (run / BEST_WEIGHTS).is_file():
        return run / BEST_WEIGHTS, "the best by validation"
    if (run / HUB_WEIGHTS).is_file():
        return run / HUB_WEIGHTS, "the model's weights, as aiayn push uploads them"
    found = sorted((run / "checkpoints").glob(f"step_*{WEIGHTS_SUFFIX}"))
    if not found:
        raise CheckpointError(
            f"no checkpoint in run directory {run} (looked for {DEFAULT_WEIGHTS}, {BEST_WEIGHTS}, {HUB_WEIGHTS} "
            f"and checkpoints/step_*.safetensors)"
        )
    return found[-1], "the newest checkpoint: no best.safetensors"


def run_relative(run: str | os.PathLike, weights: str | os.PathLike) -> str:
    """`weights` as a path inside `run`, or a CheckpointError: a run's default is its own file, so the
    directory stays self-contained when it is moved or copied."""
    try:
        return Path(weights).resolve().relative_to(Path(run).resolve()).as_posix()
    except ValueError:
        raise CheckpointError(
            f"{weights} is not inside the run directory {run}: a run's default weights are its own file"
        ) from None


def named_weights(run: str | os.PathLike) -> tuple[Path, str] | None:
    """The weights RUN/weights.json names and why, or None when the run has no weights.json. A named
    file that is missing is an error, never a silent fallback to other weights."""
    run = Path(run)
    record_file = run / DEFAULT_WEIGHTS
    if not record_file.is_file():
        return None
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
        name, why = record["weights"], str(record.get("why", ""))
        if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
            raise ValueError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise CheckpointError(
            f'{record_file} is not a weights record ({{"weights": "NAME.safetensors", "why": "..."}}, '
            f"NAME inside the run); remove it to load {BEST_WEIGHTS}"
        ) from None
    if not (run / name).is_file():
        raise CheckpointError(
            f"{record_file} names {name} as the run's weights, but {run / name} is missing; name new ones "
            f"(aiayn average {run} --default) or remove {record_file} to load {BEST_WEIGHTS}"
        )
    return run / name, why


def set_default_weights(run: str | os.PathLike, weights: str | os.PathLike, why: str) -> Path:
    """Make `weights`, a file inside the run directory, what `-c RUN` loads (translate, evaluate, serve,
    export, push): RUN/weights.json, {"weights": its name inside the run, "why": `why`}, written
    atomically. Returns the record's path."""
    run, weights = Path(run), Path(weights)
    name = run_relative(run, weights)
    read_metadata(weights)  # one of ours, complete: never name a file that cannot load
    line = json.dumps({"weights": name, "why": why}, indent=1) + "\n"
    return atomic_write(run / DEFAULT_WEIGHTS, lambda tmp: Path(tmp).write_text(line, encoding="utf-8"))


def which_weights(path: str | os.PathLike) -> tuple[Path, str]:
    """(the weights file `path` stands for, why that one, in words). A weights file is itself. A run
    directory: the file its weights.json names (`set_default_weights`), else best.safetensors, else
    model.safetensors (a Hub download), else its newest checkpoint."""
    path = Path(path)
    if path.is_dir():
        named = named_weights(path)
        if named is not None:
            return named[0], f"{DEFAULT_WEIGHTS}: {named[1]}" if named[1] else DEFAULT_WEIGHTS
        return fallback_weights(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}")
    return path, "the file given"


def resolve_weights(path: str | os.PathLike) -> Path:
    """The one resolution of a weights file or run directory (`which_weights`) -> the file to load."""
    return which_weights(path)[0]


def describe_weights(path: str | os.PathLike) -> str:
    """What `path` loads, for a stderr line: the file, its step, and why that file."""
    file, why = which_weights(path)
    step = read_metadata(file).get("step")
    return f"{file} ({f'step {step}; ' if step is not None else ''}{why})"


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
