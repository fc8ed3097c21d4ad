"""What a task is: one record (`TaskSpec`, after torchtitan's TrainSpec) holding everything aiayn asks of
one kind of run (its settings, data, loss, validation measures, predictor, evaluation, server, model card
and command-line verbs), and the lookup that maps `task.name` to it.

A task is one module that builds its record, named in one table (aiayn.registry): the built-in ones are
files of this package, others come from any installed distribution through the `aiayn.tasks` entry
points. Nothing outside the task branches on its name. A record is light to import (the command line
reads every task's when it starts, for its verbs): the parts that need torch or the data pipeline (the
loss, the batches, the predictor, the command-line verbs) are named with `aiayn.registry.Later` or a
dotted path and load when used.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from aiayn import registry
from aiayn.config import Config, ConfigError, DataConfig, ModelConfig, TaskConfig, build_section
from aiayn.registry import Later

if TYPE_CHECKING:  # for the types only: a task's record loads without torch, numpy or sentencepiece
    import numpy as np
    import torch
    from torch import Tensor

    from aiayn.data.batching import BatchIterator
    from aiayn.data.encoded import EncodedSplit
    from aiayn.data.pipeline import Options
    from aiayn.data.tokenizer import Tokenizer
    from aiayn.distributed import DistInfo

Autocast = Callable[[], contextlib.AbstractContextManager]
# input lines -> one output each: a line of text, or a JSON value (printed as one JSON line, served as is)
Predict = Callable[[list[str]], list[Any]]
T = TypeVar("T")
P = TypeVar("P")


class PreparedData(Protocol):
    """A task's prepared data (data.pairs.Prepared, data.text.PreparedText): the tokenizer and the
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


class TaskBase(Generic[P]):
    """What every built-in task holds: the model's config, the prepared data (P: data.pairs.Prepared or
    data.text.PreparedText), the device, the autocast context, and the optimisation settings its loss
    reads; a TaskSpec's `build` may be a subclass itself."""

    def __init__(
        self,
        cfg: Config,
        model_config: ModelConfig,
        prepared: P,
        device: torch.device,
        autocast: Autocast = contextlib.nullcontext,
    ) -> None:
        self.model_config, self.prepared, self.device, self.autocast = model_config, prepared, device, autocast
        self.label_smoothing, self.max_tokens = cfg.optim.label_smoothing, cfg.data.max_tokens


class TrainBatches(Protocol):
    """The training batches: a stateful part (its position is checkpointed), sharded over the ranks."""

    epoch: int  # passes over the training data so far

    @property
    def max_tokens(self) -> int:
        """Tokens of one micro-batch at most (what optim.tokens_per_update is divided by); an attribute
        will do."""

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


# The corpora of the data pipeline's two example kinds (aiayn.data.pairs: sentence pairs; aiayn.data.text: lines or
# running text), for the tasks that read them.
PARALLEL_CORPORA = ("multi30k", "files", "sources", "embedded", "wmt14")
TEXT_CORPORA = ("text", "multi30k", "tinyshakespeare")


def require_validation_examples(prepared: PreparedData) -> None:
    """Every task's check of its prepared data, before any training: validation needs an example."""
    from aiayn.data.errors import DataError

    if len(prepared.splits["valid"]) == 0:
        raise DataError(
            "the validation split has no examples (its lines are all empty, or it is missing): "
            "validation needs at least one non-empty line"
        )


def sentence_batches(
    cfg: Config,
    prepared: PreparedData,
    dist: DistInfo,
    device: torch.device,
    collate_fn: Callable[[EncodedSplit, np.ndarray], Any] | None = None,
) -> BatchIterator:
    """Token-budget batches of whole examples from the training split (length-bucketed, shuffled,
    rank-sharded, drawn from the sources by their weights); without `collate_fn` a batch is collated
    during the update."""
    from aiayn.data.batching import BatchIterator
    from aiayn.data.sources import source_mix

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
        mix=source_mix(cfg.data, prepared.report),
    )


@dataclass(frozen=True)
class Card:
    """What a task's model card says of a run besides its Hub tag (aiayn.publish.model_card)."""

    languages: tuple[str, ...] = ()  # the front matter's `language:` list
    what: str = "."  # the end of its first sentence, "... trained with aiayn for the `<task>` task<what>"
    facts: tuple[str, ...] = ()  # list lines after "- Task: <task>"
    usage: tuple[str, ...] = ()  # the lines of its Usage section


def predictor_card(spec: TaskSpec, cfg: Config, repo_id: str) -> Card:
    """A task's card unless it says otherwise: its summary, and its model run by `aiayn predict`."""
    return Card(
        what=f": {spec.summary}." if spec.summary else ".",
        usage=("```", f"echo '...' | aiayn predict -c hf://{repo_id}", "```", ""),
    )


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """Everything aiayn asks of one task, in the order a task declares it.

    name: what `task.name` says.
    summary: one line for `aiayn train --help` and the model card ("... trained for <summary>").
    hub_tag: the Hugging Face Hub's pipeline tag for its model card.
    model_kind: the stack it trains: encoder-decoder | decoder-only | encoder-only.
    settings: the task's own settings, a dataclass: the `task:` section's keys besides `name`
      (`--task.KEY VALUE` on the command line), read with `task_options`.
    moved: settings it took over from the global sections, as "SECTION.KEY" (translate: train.eval_bleu):
      a config that still says SECTION.KEY (a saved run's, --train.eval_bleu) sets task.KEY; the run
      of another task ignores it (aiayn.config reads these when a section has a key it does not know).
    measures: its validation numbers besides loss (lower is better), each with True where higher is
      better; train.patience_metric may name them, and the best checkpoint is judged by them.
    default_metric: what train.patience_metric=auto watches: a measure's name, or a function of the
      config where that depends on it.
    check: the task's checks of the rest of the config against its settings (e.g. early stopping on a
      measure the settings turn off), before any data work; raises ConfigError.
    corpora: the data.corpus kinds it reads (empty: it says itself, e.g. it writes its own data).
    prepare: the data (tokenizer, encoded splits), cached; spm.model copied into the run directory; how
      to prepare (worker processes, progress bars) is the caller's `Options`. It refuses data the task
      cannot train on (every task's data needs a validation example besides).
    train_batches: the stateful iterator of training batches for this rank (its `max_tokens` bounds a
      micro-batch); whole examples under data.max_tokens unless the task says otherwise.
    longest_row: (positions one training row can take, its layout, the setting that bounds it).
    model_fields: ModelConfig fields that the prepared data decides (classify: n_classes, its labels'
      count); None: none.
    build: the Task (loss of a batch, validation) for the built model.
    find_unused_parameters: DDP's flag, for a model some of whose parameters get no gradient in some
      updates.
    predictor: (run directory or weights, device) -> a function from input lines to one output each, a
      line of text or a JSON value (`aiayn predict`, and `aiayn serve`'s /v1/predict unless the task
      serves otherwise); None for a task without one.
    evaluate: `aiayn evaluate -c RUN` on its runs: a function of the command's parsed arguments that prints
      the scores and returns the exit status (it lives in the task's command-line module: named with
      Later); None: the task has no evaluation of its own (`aiayn predict` still runs its model).
    commands: the task's own command-line verbs: "module" (or "module:function") whose `register(sub)`
      adds them to aiayn's parser, e.g. aiayn.cli.lm's `aiayn generate`; None: none.
    serve: `aiayn serve` on its runs: (the command's parsed arguments, the run directory, this spec, the
      server's settings) -> the exit status, a CLI function named with Later; by default the predictor
      at POST /v1/predict, and translate's is the translation server (LibreTranslate's API, the page).
    card: what its model card says of a run (`Card`: languages, the first sentence, facts, usage), from
      (this spec, the run's config, the Hub repository); by default its summary and `aiayn predict`.
    """

    name: str
    summary: str = ""
    hub_tag: str = "text2text-generation"
    model_kind: str
    settings: type | None = None
    moved: tuple[str, ...] = ()
    measures: dict[str, bool] = dataclasses.field(default_factory=dict)
    default_metric: str | Callable[[Config], str] = "loss"
    check: Callable[[Config], None] | None = None
    corpora: tuple[str, ...] = ()
    prepare: Callable[[Config, DataConfig, Path | None, Options], PreparedData]
    train_batches: Callable[[Config, Any, DistInfo, torch.device], TrainBatches] = sentence_batches
    longest_row: Callable[[Config], tuple[int, str, str]]
    model_fields: Callable[[Any], dict[str, Any]] | None = None
    build: Callable[[Config, ModelConfig, Any, torch.device, Autocast], Task]  # e.g. the Task class itself
    find_unused_parameters: bool = False
    predictor: Callable[[str, str | None], Predict] | None = None
    evaluate: Callable[[Any], int] | None = None
    commands: str | None = None
    serve: Callable[[Any, Any, TaskSpec, Any], int] = Later("aiayn.cli.serve:serve_predictions")
    card: Callable[[TaskSpec, Config, str], Card] = predictor_card


_LOADED: dict[str, TaskSpec] = {}  # the records read in this process, by task name


def task_names() -> list[str]:
    """Every task (aiayn.registry: aiayn's own and those the `aiayn.tasks` entry points declare)."""
    return sorted(registry.task_paths())


def get_spec(name: str) -> TaskSpec:
    """The record of the task `name`, read once a process from where aiayn.registry says it is."""
    if name not in _LOADED:
        path = registry.task_paths().get(name)
        if path is None:
            raise ConfigError(f"task.name must be one of {' | '.join(task_names())}, not {name!r}")
        spec = registry.load(path)
        if not isinstance(spec, TaskSpec) or spec.name != name:
            raise ConfigError(f"the entry point of task {name!r} ({path}) is not a TaskSpec named {name!r}")
        _LOADED[name] = spec
    return _LOADED[name]


def spec_for(cfg: Config) -> TaskSpec:
    """The run's task, with the settings that only the task can judge checked before any data work: its
    own settings (and the task's checks of the rest against them), its corpus, learned positions long
    enough for its longest training row, and its early-stopping metric."""
    spec = get_spec(cfg.task.name)
    task_options(cfg, spec.settings)
    if spec.check is not None:
        spec.check(cfg)
    if spec.corpora and cfg.data.corpus not in spec.corpora:
        raise ConfigError(f"task {spec.name} reads data.corpus {' | '.join(spec.corpora)}, not {cfg.data.corpus!r}")
    m = cfg.model_config(vocab_size=4, kind=spec.model_kind)
    longest, layout, bound = spec.longest_row(cfg)
    if m.positional == "learned" and longest > m.max_positions:
        raise ConfigError(
            f"a training row can hold {longest} tokens ({layout}) but learned positions stop at "
            f"model.max_positions={m.max_positions}: raise model.max_positions or lower {bound}"
        )
    patience_metric(cfg, spec)
    return spec


# The task section every config saved before tasks owned their settings carried, whatever its task.
_SHARED_BEFORE = {"block_size", "batch_size", "mask_prob", "mask_token", "random_token"}


def task_options(cfg: Config, kind: type[T] | None) -> T:
    """The run's own task settings (cfg.task.options) as the task's dataclass `kind`, checked and typed
    like any section. A run directory saved when one section held every task's settings still loads:
    the keys of other tasks are left out."""
    options = dict(cfg.task.options)
    fields = {f.name for f in dataclasses.fields(cast(Any, kind))} if kind is not None else set()
    if _SHARED_BEFORE <= set(options):
        others = (_SHARED_BEFORE | _every_task_setting()) - fields
        options = {k: v for k, v in options.items() if k not in others}
    if kind is None:
        if options:
            raise ConfigError(f"task {cfg.task.name} has no settings; unknown task fields {sorted(options)}")
        return None  # type: ignore[return-value]
    return build_section(kind, options, "task")


def _every_task_setting() -> set[str]:
    """The names of every task's settings (an old shared section held some task's of each)."""
    kinds = [get_spec(name).settings for name in task_names()]
    return {f.name for kind in kinds if kind is not None for f in dataclasses.fields(kind)}


def resolved(cfg: Config, spec: TaskSpec) -> Config:
    """`cfg` with every setting of its task written out (defaults included), as the run saves it."""
    options = dataclasses.asdict(task_options(cfg, spec.settings)) if spec.settings is not None else {}
    return dataclasses.replace(cfg, task=TaskConfig(cfg.task.name, options))


def patience_metric(cfg: Config, spec: TaskSpec) -> str:
    """What early stopping watches: train.patience_metric, or the task's default for `auto`."""
    metric = cfg.train.patience_metric
    if metric == "auto":
        return spec.default_metric if isinstance(spec.default_metric, str) else spec.default_metric(cfg)
    if metric != "loss" and metric not in spec.measures:
        having = [n for n in task_names() if metric in get_spec(n).measures]
        raise ConfigError(
            f"train.patience_metric={metric} needs task {' or '.join(having) or '(none has it)'}, not {spec.name}"
            f"; {spec.name} measures loss{''.join(' | ' + m for m in spec.measures)}"
        )
    return metric


def higher_is_better(spec: TaskSpec, metric: str) -> bool:
    """The direction of one of the task's validation measures (loss: lower is better)."""
    return metric != "loss" and spec.measures[metric]
