"""What the loop trains: the seam between a generic training loop and one kind of model.

A task turns a batch into a summed loss (and names the count that sum is normalised by) and says what
validation measures. The loop (accumulation, DDP, AMP, skipping non-finite updates, checkpoints,
early stopping) knows nothing else about the model. `task.name` in the config picks one:

  translate  the paper's encoder-decoder (`TranslationTask`), parallel text
  lm         the decoder-only model (GPT), next token over blocks or sentences (`LMTask`)
  mlm        the encoder-only model (BERT), masked tokens of lines of text (`MLMTask`)
  classify   the encoder-only model with a pooled head, labelled texts or sentence pairs (`ClassifyTask`)

Each brings three things through the functions below: its data (`prepare_data`), the iterator of its
training batches (`train_iterator`, a stateful part that checkpoints its position) and the task object
(`build_task`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from aiayn.config import Config, ConfigError, DataConfig, ModelConfig
from aiayn.data.batching import BatchIterator
from aiayn.data.errors import DataError
from aiayn.data.prepare import prepare
from aiayn.data.text import ENCODER_SPECIALS, prepare_text
from aiayn.data.text_batching import BlockIterator, TextCollate
from aiayn.distributed import DistInfo
from aiayn.fileio import atomic_write
from aiayn.train.tasks.classify import ClassifyTask, encoder_collate
from aiayn.train.tasks.lm import LMTask, document_stream
from aiayn.train.tasks.mlm import MLMTask, masking_collate
from aiayn.train.tasks.translate import TranslationTask


class Task(Protocol):
    def tokens(self, batch: Any) -> int:
        """The count the update's loss is normalised by (known on the host, before any forward)."""

    def loss(self, model: torch.nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
        """(training loss, nll), each summed over this batch's `tokens`: scalars on the device."""

    def validate(self, model: torch.nn.Module) -> dict[str, float | None]:
        """Validation measures of the (unwrapped, eval-mode) model; "loss" at least, lower is better."""


def prepare_data(cfg: Config, data: DataConfig, run_dir: Path | None) -> Any:
    """The task's prepared data (tokenizer, encoded splits), cached; spm.model copied into `run_dir`.
    A validation split with nothing to measure is a DataError here, before any training."""
    prepared = _prepare_data(cfg, data, run_dir)
    valid = prepared.splits["valid"]
    if cfg.task.name == "lm" and cfg.task.block_size is not None:
        if len(valid) == 0 or len(document_stream(valid)) < 2:
            raise DataError(
                "the validation text has fewer than 2 tokens, so there is no next token to predict: "
                "give data.text_valid more text (or raise data.valid_fraction)"
            )
    elif len(valid) == 0:
        raise DataError(
            "the validation split has no examples (its lines are all empty, or it is missing): "
            "validation needs at least one non-empty line"
        )
    return prepared


def _prepare_data(cfg: Config, data: DataConfig, run_dir: Path | None) -> Any:
    if cfg.task.name == "translate":
        return prepare(data, run_dir)

    if cfg.task.name == "lm":
        if cfg.task.block_size is not None and data.text_unit != "document":
            raise ConfigError(
                "task.block_size draws blocks from running text: set data.text_unit: document "
                "(or task.block_size: null for one sentence per example)"
            )
        return prepare_text(data, run_dir)
    if cfg.task.name in ("mlm", "classify"):
        if data.text_unit != "line":
            raise ConfigError(f"task {cfg.task.name} reads one example a line: set data.text_unit: line")
        classify = cfg.task.name == "classify"
        prepared = prepare_text(data, run_dir, labelled=classify, specials=ENCODER_SPECIALS)
        if classify and run_dir is not None:  # what the classify command needs to name its predictions
            save_label_names(run_dir, prepared)
        return prepared
    raise ConfigError(f"task {cfg.task.name!r} is not available")


def save_label_names(run_dir: Path, prepared: Any) -> None:
    """RUN/labels.json: the class names in id order, and whether examples are sentence pairs."""
    import json

    pairs = bool(len(prepared.splits["train"]) and np.asarray(prepared.splits["train"].tgt_lengths).max() > 0)
    text = json.dumps({"labels": list(prepared.label_names), "pairs": pairs}, indent=1) + "\n"
    atomic_write(Path(run_dir) / "labels.json", lambda tmp: Path(tmp).write_text(text))


def n_classes(prepared: Any) -> int | None:
    names = getattr(prepared, "label_names", None)
    return len(names) if names else None


def train_iterator(cfg: Config, prepared: Any, dist: DistInfo, device: torch.device) -> Any:
    """The training batches (stateful: state_dict / load_state_dict), sharded over the ranks."""
    split, seed, rank, world = prepared.splits["train"], cfg.train.seed, dist.rank, dist.world_size
    if cfg.task.name == "lm":
        if cfg.task.block_size is not None:
            return BlockIterator(document_stream(split), cfg.task.block_size, cfg.task.batch_size, seed, rank, world)
        return BatchIterator(
            split,
            cfg.data.max_tokens,
            seed=seed,
            shuffle=True,
            collate_fn=TextCollate(),
            prefetch=2,
            rank=rank,
            world_size=world,
        )
    if cfg.task.name in ("mlm", "classify"):
        collate = (
            masking_collate(prepared, cfg.task, seed)
            if cfg.task.name == "mlm"
            else encoder_collate(prepared.tokenizer, prepared.labels["train"])
        )
        return BatchIterator(
            split,
            cfg.data.max_tokens,
            seed=seed,
            shuffle=True,
            collate_fn=collate,
            prefetch=2,
            rank=rank,
            world_size=world,
            pin_memory=device.type == "cuda",
        )
    return BatchIterator(
        split,
        cfg.data.max_tokens,
        seed=seed,
        shuffle=True,
        prefetch=2,
        rank=rank,
        world_size=world,
        pin_memory=device.type == "cuda",
    )  # collated during the update


def build_task(
    cfg: Config,
    model_config: ModelConfig,
    prepared: Any,
    device: torch.device,
    autocast: Callable[[], contextlib.AbstractContextManager],
) -> Task:
    o, c = cfg.optim, cfg.train
    if cfg.task.name == "lm":
        return LMTask(
            model_config,
            prepared,
            device,
            label_smoothing=o.label_smoothing,
            block_size=cfg.task.block_size,
            batch_size=cfg.task.batch_size,
            max_tokens=cfg.data.max_tokens,
            autocast=autocast,
        )
    if cfg.task.name == "mlm":
        return MLMTask(
            model_config,
            prepared,
            device,
            task=cfg.task,
            label_smoothing=o.label_smoothing,
            max_tokens=cfg.data.max_tokens,
            seed=c.seed,
            autocast=autocast,
        )
    if cfg.task.name == "classify":
        return ClassifyTask(
            model_config,
            prepared,
            device,
            label_smoothing=o.label_smoothing,
            max_tokens=cfg.data.max_tokens,
            autocast=autocast,
        )
    return TranslationTask(
        model_config,
        prepared,
        device,
        label_smoothing=o.label_smoothing,
        max_tokens=cfg.data.max_tokens,
        autocast=autocast,
        compiled=c.compile,
        eval_bleu=c.eval_bleu,
        eval_max_sentences=c.eval_max_sentences,
    )


def micro_batch_tokens(cfg: Config) -> int:
    """Tokens of one micro-batch at most: the token budget, or lm blocks x block size."""
    if cfg.task.name == "lm" and cfg.task.block_size is not None:
        return cfg.task.batch_size * cfg.task.block_size
    return cfg.data.max_tokens


def default_metric(cfg: Config) -> str:
    """What train.patience_metric=auto means for this task: the one validation number users watch."""
    if cfg.train.patience_metric != "auto":
        if cfg.train.patience_metric == "bleu" and cfg.task.name != "translate":
            raise ConfigError(f"train.patience_metric=bleu needs task translate, not {cfg.task.name}")
        if cfg.train.patience_metric == "accuracy" and cfg.task.name not in ("mlm", "classify"):
            raise ConfigError(f"train.patience_metric=accuracy needs task mlm or classify, not {cfg.task.name}")
        return cfg.train.patience_metric
    if cfg.task.name == "translate":
        return "bleu" if cfg.train.eval_bleu else "loss"
    return "accuracy" if cfg.task.name == "classify" else "loss"


__all__ = [
    "Task",
    "TranslationTask",
    "LMTask",
    "MLMTask",
    "ClassifyTask",
    "prepare_data",
    "train_iterator",
    "build_task",
    "n_classes",
    "default_metric",
    "micro_batch_tokens",
    "save_label_names",
]
