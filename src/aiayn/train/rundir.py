"""The run directory (self-contained: config.yaml, spm.model, checkpoints/, best.safetensors,
metrics.jsonl): checked before training, its resolved config written, its tokenizer kept."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from aiayn import distributed
from aiayn.checkpoint import BEST_WEIGHTS, DEFAULT_WEIGHTS, list_checkpoints
from aiayn.config import Config, ModelConfig
from aiayn.data.pairs import prepare
from aiayn.fileio import atomic_write
from aiayn.train.runtime import TrainingError

# data settings that name files: written absolute into the run's config.yaml
_DATA_PATHS = (
    "data_dir",
    "spm_model",
    "train_src",
    "train_tgt",
    "valid_src",
    "valid_tgt",
    "test_src",
    "test_tgt",
    "text_train",
    "text_valid",
    "text_test",
)


def check_run_dir(run_dir: Path, need_bytes: int = 0) -> None:
    """Fail before training, not at the first checkpoint, if the run directory is unusable."""
    try:
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        probe = atomic_write(run_dir / ".write_test", lambda tmp: Path(tmp).write_bytes(b"ok"))
        probe.unlink()
    except OSError as e:
        raise TrainingError(f"run directory {run_dir} is not writable: {e.strerror or e}") from None
    free = shutil.disk_usage(run_dir).free
    if free < need_bytes:
        raise TrainingError(
            f"run directory {run_dir} has {free / 2**20:.0f} MiB free; checkpoints need about "
            f"{need_bytes / 2**20:.0f} MiB"
        )


def check_new_or_resumed(run_dir: Path, resume: bool) -> None:
    """A new run must not write over another run's checkpoints."""
    check_run_dir(run_dir)
    if not resume and list_checkpoints(run_dir):
        raise TrainingError(
            f"{run_dir} already holds checkpoints; continue it with "
            f"`aiayn train --resume {run_dir}` or choose a new run directory"
        )


def drop_default_weights(run_dir: Path) -> None:
    """A resumed run that trains on leaves behind the weights its weights.json names (an average of the
    checkpoints before this training, scored then): the record goes, so `-c RUN` loads the best weights
    again rather than older ones, until `aiayn average --default` (or the quickstart) names new ones."""
    record = run_dir / DEFAULT_WEIGHTS
    if not record.is_file():
        return
    try:
        named = f" (it named {json.loads(record.read_text(encoding='utf-8'))['weights']})"
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        named = ""
    record.unlink()
    print(
        f"{record} removed{named}: training on leaves those weights behind, so -c {run_dir} loads "
        f"{BEST_WEIGHTS} again; `aiayn average {run_dir} --default` names an average of the new checkpoints",
        file=sys.stderr,
        flush=True,
    )


def prepare_keeping_tokenizer(
    data: Any, run_dir: Path, main: bool, resume: bool, prepare_fn: Callable[[Any, Path | None], Any] | None = None
) -> Any:
    """Prepare the data (every rank, outside any collective: one process per cache builds it under a
    file lock while the others wait on it, and a cold WMT cache takes longer than a collective's
    timeout). Rank 0 copies spm.model into the run; a resumed run must keep its own."""
    spm = run_dir / "spm.model"
    before = spm.read_bytes() if main and resume and spm.is_file() else None
    prepared = (prepare_fn or prepare)(data, run_dir if main else None)
    if before is not None and spm.read_bytes() != before:
        atomic_write(spm, lambda tmp: Path(tmp).write_bytes(before))  # keep the run's own tokenizer
        raise TrainingError(
            f"the prepared data's tokenizer differs from {spm} (data settings changed or "
            f"the data cache was rebuilt); resume with the original data settings"
        )
    return prepared


def check_ranks_agree_on_data(prepared: Any) -> None:
    """Node-local caches must hold the same ids: every rank compares its cache key and tokenizer."""
    mine = (prepared.report["key"], hashlib.sha256(prepared.tokenizer.path.read_bytes()).hexdigest())
    seen = cast(list[tuple[str, str]], distributed.all_gather_object(mine))
    if any(other != seen[0] for other in seen):
        detail = "; ".join(f"rank {r}: cache {k}, spm.model sha256 {h[:12]}" for r, (k, h) in enumerate(seen))
        raise TrainingError(
            f"ranks prepared different data ({detail}); give every node the same corpus and "
            f"data settings, or one shared AIAYN_HOME"
        )


def save_resolved_config(cfg: Config, model_config: ModelConfig, run_dir: Path) -> None:
    """config.yaml with the full model config and absolute data paths: the run is read again from
    other directories (evaluate --split, --resume)."""
    resolved = cfg.to_dict()
    resolved["model"] = {"preset": cfg.model["preset"], **model_config.to_dict()}
    for k in _DATA_PATHS:
        value = resolved["data"].get(k)
        if isinstance(value, list):
            resolved["data"][k] = [os.path.abspath(v) for v in value]
        elif value:
            resolved["data"][k] = os.path.abspath(value)
    Config.from_dict(resolved).save(run_dir / "config.yaml")
