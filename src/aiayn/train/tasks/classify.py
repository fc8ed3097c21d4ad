"""Sequence classification with the encoder-only model: a pooled [CLS] head over one text or a sentence
pair (BERT: Devlin et al., 2019, §3.2 and Figure 4), usually fine-tuned from an `mlm` run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from aiayn.config import Config, DataConfig
from aiayn.fileio import atomic_write
from aiayn.registry import Later
from aiayn.train.tasks.mlm import encoder_row, prepare_lines
from aiayn.train.tasks.spec import TEXT_CORPORA, TaskSpec

if TYPE_CHECKING:
    from aiayn.data.pipeline import Options
    from aiayn.data.text import PreparedText


def save_label_names(run_dir: Path, prepared: PreparedText) -> None:
    """RUN/labels.json: the class names in id order, and whether examples are sentence pairs."""
    import numpy as np

    pairs = bool(len(prepared.splits["train"]) and np.asarray(prepared.splits["train"].tgt_lengths).max() > 0)
    text = json.dumps({"labels": list(prepared.label_names), "pairs": pairs}, indent=1) + "\n"
    atomic_write(Path(run_dir) / "labels.json", lambda tmp: Path(tmp).write_text(text))


def prepare(cfg: Config, data: DataConfig, run_dir: Path | None, options: Options) -> PreparedText:
    prepared = prepare_lines(cfg, data, run_dir, options, labelled=True)
    if run_dir is not None:  # what the classify command needs to name its predictions
        save_label_names(run_dir, prepared)
    return prepared


def classes(prepared: PreparedText) -> dict[str, int | None]:
    """The classification head's size: the count of the labels the data has."""
    return {"n_classes": len(prepared.label_names) if prepared.label_names else None}


SPEC = TaskSpec(
    name="classify",
    summary="text classification (encoder-only with a pooled head, usually from an mlm run)",
    hub_tag="text-classification",
    model_kind="encoder-only",
    measures={"accuracy": True},
    default_metric="accuracy",
    corpora=TEXT_CORPORA,
    prepare=prepare,
    train_batches=Later("aiayn.train.tasks.classify_task:train_batches"),
    longest_row=encoder_row,
    model_fields=classes,
    build=Later("aiayn.train.tasks.classify_task:ClassifyTask"),
    find_unused_parameters=True,  # the masked-token head stays unused under DDP
    predictor=Later("aiayn.train.tasks.classify_task:labels"),
    commands="aiayn.cli.classify",
)
