"""What a task is: one record (`TaskSpec`, after torchtitan's TrainSpec) holding everything the generic
training loop asks of one kind of run, and the registry that maps `task.name` to it.

A task is one file in this package that builds its record and calls `register`; the loop never
branches on the task's name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from aiayn.config import Config, ConfigError, DataConfig, ModelConfig
from aiayn.data.batching import BatchIterator
from aiayn.data.encoded import EncodedSplit
from aiayn.data.errors import DataError
from aiayn.data.tokenizer import Tokenizer
from aiayn.distributed import DistInfo

Autocast = Callable[[], contextlib.AbstractContextManager]


class PreparedData(Protocol):
    """A task's prepared data (data.prepare.Prepared, data.text.PreparedText): the tokenizer and the
    encoded splits, found again in the cache by `cache_dir` and described by `report`."""

    tokenizer: Tokenizer
    splits: dict[str, EncodedSplit]
    report: dict[str, Any]
    cache_dir: Path


class Task(Protocol):
    def tokens(self, batch: Any) -> int:
        """The count the update's loss is normalised by (known on the host, before any forward)."""

    def loss(self, model: torch.nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
        """(training loss, nll), each summed over this batch's `tokens`: scalars on the device."""

    def validate(self, model: torch.nn.Module) -> dict[str, float | None]:
        """Validation measures of the (unwrapped, eval-mode) model; "loss" at least, lower is better."""


class TrainBatches(Protocol):
    """The training batches: a stateful part (its position is checkpointed), sharded over the ranks."""

    epoch: int  # passes over the training data so far

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def max_tokens_per_batch(cfg: Config) -> int:
    return cfg.data.max_tokens


def require_validation_examples(cfg: Config, prepared: PreparedData) -> None:
    if len(prepared.splits["valid"]) == 0:
        raise DataError(
            "the validation split has no examples (its lines are all empty, or it is missing): "
            "validation needs at least one non-empty line"
        )


@dataclass(frozen=True)
class TaskSpec:
    """Everything the loop asks of one task.

    prepare: the data (tokenizer, encoded splits), cached; spm.model copied into the run directory.
    train_batches: the stateful iterator of training batches for this rank.
    build: the Task (loss of a batch, validation) for the built model.
    longest_row: (positions one training row can take, its layout, the setting that bounds it).
    default_metric: what train.patience_metric=auto watches for this run.
    """

    name: str
    model_kind: str  # the stack it trains: encoder-decoder | decoder-only | encoder-only
    prepare: Callable[[Config, DataConfig, Path | None], PreparedData]
    train_batches: Callable[[Config, Any, DistInfo, torch.device], TrainBatches]
    build: Callable[[Config, ModelConfig, Any, torch.device, Autocast], Task]  # e.g. the Task class itself
    longest_row: Callable[[Config], tuple[int, str, str]]
    default_metric: Callable[[Config], str]
    metrics: tuple[str, ...] = ()  # validation numbers train.patience_metric may name besides loss
    micro_batch_tokens: Callable[[Config], int] = max_tokens_per_batch  # tokens of one micro-batch at most
    check_prepared: Callable[[Config, Any], None] = require_validation_examples  # before any training
    find_unused_parameters: bool = False  # DDP: some parameters get no gradient in some updates


_REGISTRY: dict[str, TaskSpec] = {}


def register(spec: TaskSpec) -> TaskSpec:
    """Make `spec` the task named `spec.name` (a later registration of the name replaces it)."""
    _REGISTRY[spec.name] = spec
    return spec


def task_names() -> list[str]:
    return list(_REGISTRY)


def get_spec(name: str) -> TaskSpec:
    if name not in _REGISTRY:
        raise ConfigError(f"task.name must be one of {' | '.join(sorted(_REGISTRY))}, not {name!r}")
    return _REGISTRY[name]


def spec_for(cfg: Config) -> TaskSpec:
    """The run's task, with the settings that only the task can judge checked before any data work:
    learned positions long enough for its longest training row, and its early-stopping metric."""
    spec = get_spec(cfg.task.name)
    m = cfg.model_config(vocab_size=4, kind=spec.model_kind)
    longest, layout, bound = spec.longest_row(cfg)
    if m.positional == "learned" and longest > m.max_positions:
        raise ConfigError(
            f"a training row can hold {longest} tokens ({layout}) but learned positions stop at "
            f"model.max_positions={m.max_positions}: raise model.max_positions or lower {bound}"
        )
    patience_metric(cfg, spec)
    return spec


def patience_metric(cfg: Config, spec: TaskSpec) -> str:
    """What early stopping watches: train.patience_metric, or the task's default for `auto`."""
    metric = cfg.train.patience_metric
    if metric == "auto":
        return spec.default_metric(cfg)
    if metric != "loss" and metric not in spec.metrics:
        having = [s.name for s in _REGISTRY.values() if metric in s.metrics]
        raise ConfigError(f"train.patience_metric={metric} needs task {' or '.join(having)}, not {spec.name}")
    return metric


def sentence_batches(
    cfg: Config,
    prepared: PreparedData,
    dist: DistInfo,
    device: torch.device,
    collate_fn: Callable[[EncodedSplit, np.ndarray], Any] | None = None,
) -> BatchIterator:
    """Token-budget batches of whole examples from the training split (length-bucketed, shuffled,
    rank-sharded); without `collate_fn` a batch is collated during the update."""
    return BatchIterator(
        prepared.splits["train"],
        cfg.data.max_tokens,
        seed=cfg.train.seed,
        shuffle=True,
        collate_fn=collate_fn,
        prefetch=2,
        rank=dist.rank,
        world_size=dist.world_size,
        pin_memory=device.type == "cuda",
    )
