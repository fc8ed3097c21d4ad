"""The paper's task: translation with the encoder-decoder (§5), on the loop's task seam. Its loss and
validation (`TranslationTask`) and its predictor live in aiayn.train.tasks.translate_task, loaded when a
run trains or predicts: this record, which `aiayn data prepare` reads, loads no torch."""

from __future__ import annotations

from aiayn.data.pairs import prepare
from aiayn.registry import Later
from aiayn.train.tasks.spec import PARALLEL_CORPORA, TaskSpec, register

SPEC = register(
    TaskSpec(
        name="translate",
        summary="translation (the paper's encoder-decoder)",
        hub_tag="translation",
        model_kind="encoder-decoder",
        measures={"bleu": True},
        default_metric=lambda cfg: "bleu" if cfg.train.eval_bleu else "loss",
        corpora=PARALLEL_CORPORA,
        prepare=lambda cfg, data, run_dir, options: prepare(data, run_dir, options=options),
        longest_row=lambda cfg: (
            cfg.data.max_len + 1,
            "data.max_len subwords + EOS, or BOS + data.max_len",
            "data.max_len",
        ),
        build=Later("aiayn.train.tasks.translate_task:TranslationTask"),
        predictor=Later("aiayn.train.tasks.translate_task:translations"),
    )
)
