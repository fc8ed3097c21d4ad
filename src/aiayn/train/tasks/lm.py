"""Language modelling with the decoder-only model (GPT): predict every next token, left to right."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiayn.config import Config, ConfigError, DataConfig
from aiayn.data.errors import DataError
from aiayn.registry import Later
from aiayn.train.tasks.spec import TEXT_CORPORA, TaskSpec, task_options

if TYPE_CHECKING:
    import numpy as np

    from aiayn.data.pipeline import Options
    from aiayn.data.text import PreparedText


@dataclasses.dataclass
class LMSettings:
    """The `task:` section of an lm run."""

    # train on contiguous blocks of this many tokens drawn at random from the text (nanoGPT's way);
    # None: one example per line, batched under data.max_tokens like sentences
    block_size: int | None = None
    batch_size: int = 12  # blocks per batch and rank (with block_size)

    def __post_init__(self) -> None:
        if (self.block_size is not None and self.block_size < 2) or self.batch_size < 1:
            raise ConfigError("task.block_size must be >= 2 (or null) and task.batch_size >= 1")


def settings(cfg: Config) -> LMSettings:
    return task_options(cfg, LMSettings)


def document_stream(split: Any) -> np.ndarray:
    """A document split's token stream: its one example's ids without the closing EOS (memory-mapped)."""
    return split.src[: int(split.src_offsets[1]) - 1]


def prepare(cfg: Config, data: DataConfig, run_dir: Path | None, options: Options) -> PreparedText:
    from aiayn.data.text import prepare_text

    blocks = settings(cfg).block_size is not None
    if blocks and data.text_unit != "document":
        raise ConfigError(
            "task.block_size draws blocks from running text: set data.text_unit: document "
            "(or task.block_size: null for one sentence per example)"
        )
    prepared = prepare_text(data, run_dir, options=options)
    valid = prepared.splits["valid"]
    if blocks and (len(valid) == 0 or len(document_stream(valid)) < 2):
        raise DataError(
            "the validation text has fewer than 2 tokens, so there is no next token to predict: "
            "give data.text_valid more text (or raise data.valid_fraction)"
        )
    return prepared


def longest_row(cfg: Config) -> tuple[int, str, str]:
    block_size = settings(cfg).block_size
    if block_size is not None:
        return block_size, "task.block_size", "task.block_size"
    return cfg.data.max_len, "BOS + data.max_len - 1 text tokens", "data.max_len"


SPEC = TaskSpec(
    name="lm",
    summary="language modelling (decoder-only, next token)",
    hub_tag="text-generation",
    model_kind="decoder-only",
    settings=LMSettings,
    corpora=TEXT_CORPORA,
    prepare=prepare,
    train_batches=Later("aiayn.train.tasks.lm_task:train_batches"),
    longest_row=longest_row,
    build=Later("aiayn.train.tasks.lm_task:LMTask"),
    predictor=Later("aiayn.train.tasks.lm_task:continuations"),
    commands="aiayn.cli.lm",
)
