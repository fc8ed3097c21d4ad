"""The paper's task: translation with the encoder-decoder (§5), on the loop's task seam. Its loss and
validation (`TranslationTask`) and its predictor live in aiayn.train.tasks.translate_task, loaded when a
run trains or predicts: this record, which `aiayn data prepare` reads, loads no torch."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from aiayn.config import Config, ConfigError, DataConfig, build_section
from aiayn.registry import Later
from aiayn.train.tasks.spec import PARALLEL_CORPORA, Card, TaskSpec, predictor_card

if TYPE_CHECKING:
    from aiayn.data.pairs import Prepared
    from aiayn.data.pipeline import Options


@dataclasses.dataclass
class TranslateSettings:
    """The `task:` section of a translate run."""

    # validation also scores greedy translations of the first train.eval_max_sentences sentences with
    # BLEU (once train.eval_bleu, which other tasks' recipes turned off)
    eval_bleu: bool = True


def eval_bleu(cfg: Config) -> bool:
    """task.eval_bleu. A task of its own built on TranslationTask (tests/toy_task.py) has other settings:
    it scores BLEU unless its section too says eval_bleu: false."""
    own = {k: v for k, v in cfg.task.options.items() if k == "eval_bleu"}
    return build_section(TranslateSettings, own, "task").eval_bleu


def check(cfg: Config) -> None:
    if cfg.train.patience_metric == "bleu" and not eval_bleu(cfg):
        raise ConfigError("train.patience_metric=bleu needs task.eval_bleu=true")


def prepare_pairs(cfg: Config, data: DataConfig, run_dir: Path | None, options: Options) -> Prepared:
    """Parallel text: joint BPE, encoded splits, cached (aiayn.data.pairs)."""
    from aiayn.data.pairs import prepare

    return prepare(data, run_dir, options=options)


def translation_card(spec: TaskSpec, cfg: Config, repo_id: str) -> Card:
    """The model card of a translation run: its languages, and its model used by Translator, aiayn
    translate and aiayn serve."""
    src, tgt = cfg.data.src_lang, cfg.data.tgt_lang
    usage = (
        "```python",
        "from aiayn import Translator",
        "",
        f'translator = Translator.load("hf://{repo_id}")',
        'print(translator.translate(["..."]))',
        "```",
        "",
        "or on the command line:",
        "",
        "```",
        f"echo '...' | aiayn translate -c hf://{repo_id}",
        f"aiayn serve -c hf://{repo_id}",
        "```",
        "",
    )
    if not (src and tgt):
        return Card(what=predictor_card(spec, cfg, repo_id).what, facts=("- Languages: unknown",), usage=usage)
    return Card((src, tgt), f", translating {src} -> {tgt}.", (f"- Languages: {src} -> {tgt}",), usage)


SPEC = TaskSpec(
    name="translate",
    summary="translation (the paper's encoder-decoder)",
    hub_tag="translation",
    model_kind="encoder-decoder",
    settings=TranslateSettings,
    moved=("train.eval_bleu",),
    measures={"bleu": True},
    default_metric=lambda cfg: "bleu" if eval_bleu(cfg) else "loss",
    check=check,
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
    serve=Later("aiayn.cli.serve:serve_translations"),
    card=translation_card,
)
