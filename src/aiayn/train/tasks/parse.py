"""English constituency parsing as translation (paper §6.3; Vinyals et al., 2015): the encoder-decoder
reads a sentence's words and writes its tree linearised (aiayn.data.treebank), trained exactly as
translation is; validation adds the EVALB bracket F1 (aiayn.evalb, COLLINS.prm) of greedy parses.

The paper's WSJ setting: 4 layers, d_model 1024, a 16K vocabulary, beam 21, length penalty 0.3 and
at most input + 300 output tokens (the wsj_parse recipe); the craft_parse recipe sizes it for a CPU.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from aiayn.config import Config, DataConfig
from aiayn.fileio import atomic_write
from aiayn.registry import Later
from aiayn.train.tasks import translate
from aiayn.train.tasks.spec import TaskSpec, task_options

if TYPE_CHECKING:
    from aiayn.data.pairs import Prepared
    from aiayn.data.pipeline import Options


@dataclasses.dataclass
class ParseSettings:
    """The `task:` section of a parse run."""

    tree_leaves: Literal["pos", "xx", "words"] = "pos"  # what stands for a word in the linearised tree
    ptb_root: str | None = None  # data.corpus wsj: LDC99T42's root (parsed/mrg/wsj/NN/*.mrg): 02-21 / 22 / 23
    # whether the loss also covers the target tokens the decoding constraint forces (a copied word's pieces
    # after its first, and EOS); false trains only the decoder's choices (docs/parsing.md)
    loss_on_forced: bool = True
    # validation F1 parses only the validation sentences of at most this many words (0: all), the first
    # train.eval_max_sentences of them, so that validation fits a training budget (docs/parsing.md)
    eval_max_words: int = 40


def prepare_parse(cfg: Config, data: DataConfig, run_dir: Path | None, options: Options) -> Prepared:
    """The treebank written once as words / linearised trees / gold trees, then prepared as parallel
    text (joint BPE, encoded splits, cached) like any translation corpus."""
    from aiayn.data.io import read_lines
    from aiayn.data.pairs import prepare
    from aiayn.data.tokenizer import WORD_START
    from aiayn.data.treebank import PARSE_META, markup_tokens, treebank_dir, write_parallel

    own = task_options(cfg, ParseSettings)
    leaves = own.tree_leaves
    directory, load = treebank_dir(data, leaves, own.ptb_root)
    files = write_parallel(load(), directory, leaves)
    markup = markup_tokens(read_lines(files["train_tgt"]), leaves)
    if run_dir is not None:  # what Parser.load needs to read the run's outputs as trees, and to constrain them
        text = json.dumps({"leaves": leaves, "markup": markup}) + "\n"
        atomic_write(Path(run_dir) / PARSE_META, lambda tmp: Path(tmp).write_text(text))
    as_files = dataclasses.replace(
        data,
        corpus="files",
        train_src=files["train_src"],
        train_tgt=files["train_tgt"],
        valid_src=files["valid_src"],
        valid_tgt=files["valid_tgt"],
        test_src=files.get("test_src"),
        test_tgt=files.get("test_tgt"),
    )
    # Each markup token one piece of the joint BPE: given with sentencepiece's word-start mark, so
    # "(NP" is one piece rather than "▁" and "(NP"; left to itself, sentencepiece cuts "(NP" at the
    # change of script (docs/parsing.md, Linearisation).
    return prepare(as_files, run_dir, options=options, symbols=[WORD_START + t for t in markup])


SPEC = TaskSpec(
    name="parse",
    summary="constituency parsing as translation (sentence -> linearised tree, §6.3)",
    model_kind="encoder-decoder",
    settings=ParseSettings,
    moved=("data.ptb_root",),  # in data: until the task owned it
    measures={"f1": True},
    default_metric="f1",
    corpora=("craft", "wsj", "trees"),
    prepare=prepare_parse,
    longest_row=translate.SPEC.longest_row,
    build=Later("aiayn.train.tasks.parse_task:ParseTask"),
    predictor=Later("aiayn.train.tasks.parse_task:trees"),
    evaluate=Later("aiayn.cli.parsing:evaluate"),
    commands="aiayn.cli.parsing",
)
