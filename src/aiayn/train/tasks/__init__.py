"""What the loop trains: the seam between a generic training loop and one kind of model.

A task turns a batch into a summed loss (and names the count that sum is normalised by) and says what
validation measures. The loop (accumulation, DDP, AMP, skipping non-finite updates, checkpoints,
early stopping) knows nothing else about the model. `task.name` in the config picks one `TaskSpec`
(spec.py), found where aiayn.registry says: the built-in ones are one file each in this package
(`aiayn train --help` lists every task with its summary).

A new task is a module that builds its TaskSpec, declared as an `aiayn.tasks` entry point by its own
distribution: the one way a task is registered.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiayn._lazy import lazy_exports
from aiayn.config import Config, DataConfig
from aiayn.train.tasks.spec import (
    Predict,
    PreparedData,
    Task,
    TaskSpec,
    get_spec,
    higher_is_better,
    patience_metric,
    require_validation_examples,
    resolved,
    spec_for,
    task_names,
    task_options,
)

# the loss of translation, a base for outside tasks of the same shape (tests/toy_task.py): it loads torch,
# so it loads when asked for, and a record read for its data (`aiayn data prepare`) loads none
__getattr__ = lazy_exports(__name__, {"translate_task": ("TranslationTask",)})
if TYPE_CHECKING:
    from aiayn.data.pipeline import Options
    from aiayn.train.tasks.translate_task import TranslationTask


def prepare_data(
    spec: TaskSpec, cfg: Config, data: DataConfig, run_dir: Path | None, options: Options | None = None
) -> PreparedData:
    """The task's prepared data (tokenizer, encoded splits), cached; spm.model copied into `run_dir`;
    `options`: how to prepare (default: all cores, bars when stderr is a terminal). A validation split
    with nothing to measure is a DataError here, before any training."""
    from aiayn.data.pipeline import Options

    prepared = spec.prepare(cfg, data, run_dir, options or Options())
    require_validation_examples(prepared)
    return prepared


def run_spec(path: str | Path) -> TaskSpec:
    """The task of a run directory (or weights in one): its config.yaml's task.name; translate for
    weights without a run's config."""
    from aiayn.checkpoint import find_in_run

    found = find_in_run(path, "config.yaml")
    return get_spec(Config.load(str(found)).task.name if found else Config().task.name)


def default_metric(cfg: Config) -> str:
    """What early stopping watches for this run (train.patience_metric, `auto` resolved by the task)."""
    return patience_metric(cfg, get_spec(cfg.task.name))


__all__ = [
    "Task",
    "TaskSpec",
    "PreparedData",
    "TranslationTask",
    "Predict",
    "get_spec",
    "spec_for",
    "task_names",
    "prepare_data",
    "default_metric",
    "patience_metric",
    "higher_is_better",
    "resolved",
    "task_options",
    "run_spec",
]
