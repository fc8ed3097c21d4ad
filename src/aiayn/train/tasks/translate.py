"""The paper's task: translation with the encoder-decoder (§5), on the loop's task seam. Its loss and
validation (`TranslationTask`) and its predictor live in aiayn.train.tasks.translate_task, loaded when a
run trains or predicts: this record, which `aiayn data prepare` reads, loads no torch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from aiayn.config import Config, DataConfig
from aiayn.registry import Later
from aiayn.train.tasks.spec import PARALLEL_CORPORA, TaskSpec

if TYPE_CHECKING:
    from aiayn.data.pairs import Prepared
    from aiayn.data.pipeline import Options


def prepare_pairs(cfg: Config, data: DataConfig, run_dir: Path | None, options: Options) -> Prepared:
    """Parallel text: joint BPE, encoded splits, cached (aiayn.data.pairs)."""
    from aiayn.data.pairs import prepare

    return prepare(data, run_dir, options=options)


SPEC = TaskSpec(
    name="translate",
    summary="translation (the paper's encoder-decoder)",
    hub_tag="translation",
    model_kind="encoder-decoder",
    measures={"bleu": True},
    default_metric=lambda cfg: "bleu" if cfg.train.eval_bleu else "loss",
    corpora=PARALLEL_CORPORA,
    prepare=prepare_pairs,
    longest_row=lambda cfg: (
        cfg.data.max_len + 1,
        "data.max_len subwords + EOS, or BOS + data.max_len",
        "data.max_len",
    ),
    build=Later("aiayn.train.tasks.translate_task:TranslationTask"),
    predictor=Later("aiayn.train.tasks.translate_task:translations"),
    evaluate=Later("aiayn.cli.translate:evaluate"),
    commands="aiayn.cli.translate",
)
