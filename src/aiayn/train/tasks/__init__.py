"""What the loop trains: the seam between a generic training loop and one kind of model.

A task turns a batch into a summed loss (and names the count that sum is normalised by) and says what
validation measures. The loop (accumulation, DDP, AMP, skipping non-finite updates, checkpoints,
early stopping) knows nothing else about the model. `task.name` in the config picks one registered
`TaskSpec` (spec.py); each lives in one file of this package:

  translate  the paper's encoder-decoder (`TranslationTask`), parallel text
  lm         the decoder-only model (GPT), next token over blocks or sentences (`LMTask`)
  mlm        the encoder-only model (BERT), masked tokens of lines of text (`MLMTask`)
  classify   the encoder-only model with a pooled head, labelled texts or sentence pairs (`ClassifyTask`)
  parse      the encoder-decoder on sentences -> linearised constituency trees, EVALB F1 (`ParseTask`, §6.3)

A new task is a new file that builds its TaskSpec and calls `register` (imported below, or by the
user's own code before training).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiayn.config import Config, DataConfig
from aiayn.train.tasks.classify import ClassifyTask
from aiayn.train.tasks.lm import LMTask
from aiayn.train.tasks.mlm import MLMTask
from aiayn.train.tasks.parse import ParseTask
from aiayn.train.tasks.spec import (
    PreparedData,
    Task,
    TaskSpec,
    get_spec,
    patience_metric,
    register,
    spec_for,
    task_names,
)
from aiayn.train.tasks.translate import TranslationTask


def prepare_data(spec: TaskSpec, cfg: Config, data: DataConfig, run_dir: Path | None) -> PreparedData:
    """The task's prepared data (tokenizer, encoded splits), cached; spm.model copied into `run_dir`.
    A validation split with nothing to measure is a DataError here, before any training."""
    prepared = spec.prepare(cfg, data, run_dir)
    spec.check_prepared(cfg, prepared)
    return prepared


def n_classes(prepared: Any) -> int | None:
    """The number of classes of labelled data; None for data without labels."""
    names = getattr(prepared, "label_names", None)
    return len(names) if names else None


def default_metric(cfg: Config) -> str:
    """What early stopping watches for this run (train.patience_metric, `auto` resolved by the task)."""
    return patience_metric(cfg, get_spec(cfg.task.name))


__all__ = [
    "Task",
    "TaskSpec",
    "PreparedData",
    "TranslationTask",
    "LMTask",
    "MLMTask",
    "ClassifyTask",
    "ParseTask",
    "register",
    "get_spec",
    "spec_for",
    "task_names",
    "prepare_data",
    "n_classes",
    "default_metric",
    "patience_metric",
]
