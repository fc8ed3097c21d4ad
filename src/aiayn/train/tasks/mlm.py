"""Masked-token pre-training of the encoder-only model (BERT: Devlin et al., 2019, §3.1 Task #1)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from aiayn.config import Config, ConfigError, DataConfig
from aiayn.registry import Later
from aiayn.train.tasks.spec import TEXT_CORPORA, TaskSpec

if TYPE_CHECKING:
    from aiayn.data.pipeline import Options
    from aiayn.data.text import PreparedText


@dataclasses.dataclass
class MLMSettings:
    """The `task:` section of an mlm run (BERT's masking)."""

    mask_prob: float = 0.15  # share of the non-special tokens chosen for prediction
    mask_token: float = 0.8  # ... of which this share becomes [MASK]
    random_token: float = 0.1  # ... and this share a random token (the rest stays as it was)

    def __post_init__(self) -> None:
        if (
            not 0 < self.mask_prob < 1
            or self.mask_token < 0
            or self.random_token < 0
            or self.mask_token + self.random_token > 1
        ):
            raise ConfigError(
                "task.mask_prob must lie in (0, 1), mask_token and random_token in [0, 1] with a sum <= 1"
            )


def prepare_lines(
    cfg: Config, data: DataConfig, run_dir: Path | None, options: Options, labelled: bool = False
) -> PreparedText:
    """One example a line, encoded with the encoder's specials ([CLS], [SEP], [MASK]): mlm and classify."""
    from aiayn.data.text import prepare_text
    from aiayn.data.tokenizer import ENCODER_SPECIALS

    if data.text_unit != "line":
        raise ConfigError(f"task {cfg.task.name} reads one example a line: set data.text_unit: line")
    return prepare_text(data, run_dir, labelled=labelled, specials=ENCODER_SPECIALS, options=options)


def encoder_row(cfg: Config) -> tuple[int, str, str]:
    return cfg.data.max_len + 2, "[CLS] a [SEP] b [SEP] with a, EOS and b within data.max_len", "data.max_len"


SPEC = TaskSpec(
    name="mlm",
    summary="masked-token pre-training (encoder-only, BERT)",
    hub_tag="fill-mask",
    model_kind="encoder-only",
    settings=MLMSettings,
    measures={"accuracy": True},
    corpora=TEXT_CORPORA,
    prepare=prepare_lines,
    train_batches=Later("aiayn.train.tasks.mlm_task:train_batches"),
    longest_row=encoder_row,
    build=Later("aiayn.train.tasks.mlm_task:MLMTask"),
    predictor=Later("aiayn.train.tasks.mlm_task:filled_masks"),
)
