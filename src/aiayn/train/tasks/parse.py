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
from typing import Any, Literal

import torch

from aiayn.config import Config, DataConfig
from aiayn.data.io import read_lines
from aiayn.data.prepare import Prepared, prepare
from aiayn.data.treebank import markup_tokens, treebank_dir, write_parallel
from aiayn.decode import Translator
from aiayn.decode.parser import PARSE_META, WORD_START, Parser, TreeConstraint, parse_lines, score_trees
from aiayn.fileio import atomic_write
from aiayn.train.tasks import translate
from aiayn.train.tasks.spec import Predict, TaskSpec, register, sentence_batches, task_options
from aiayn.train.tasks.translate import TranslationTask


@dataclasses.dataclass
class ParseSettings:
    """The `task:` section of a parse run."""

    tree_leaves: Literal["pos", "xx", "words"] = "pos"  # what stands for a word in the linearised tree
    ptb_root: str | None = None  # data.corpus wsj: LDC99T42's root (parsed/mrg/wsj/NN/*.mrg): 02-21 / 22 / 23


def prepare_parse(cfg: Config, data: DataConfig, run_dir: Path | None) -> Prepared:
    """The treebank written once as words / linearised trees / gold trees, then prepared as parallel
    text (joint BPE, encoded splits, cached) like any translation corpus."""
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
    return prepare(as_files, run_dir, symbols=[WORD_START + t for t in markup])


class ParseTask(TranslationTask):
    """Translation's loss over linearised trees; validation: loss, nll, perplexity and the EVALB F1 of
    greedy parses of the first train.eval_max_sentences validation sentences (all with 0)."""

    def __init__(self, cfg: Config, *rest: Any) -> None:  # TranslationTask's arguments
        super().__init__(cfg, *rest)
        own = task_options(cfg, ParseSettings)
        self.leaves, self.decode = own.tree_leaves, cfg.decode
        self.directory = treebank_dir(cfg.data, self.leaves, own.ptb_root)[0]
        self.markup = markup_tokens(read_lines(self.directory / "train.tree"), self.leaves)

    @torch.no_grad()
    def validate(self, model: torch.nn.Module) -> dict[str, float | None]:
        return {**self.valid_loss(model), "f1": self._greedy_f1(model)}

    def _greedy_f1(self, model: torch.nn.Module) -> float:
        words, gold = read_lines(self.directory / "valid.words"), read_lines(self.directory / "valid.gold")
        n = self.eval_max_sentences or len(words)
        tokenizer = self.prepared.tokenizer
        constraint = TreeConstraint.build(tokenizer, self.markup, self.leaves, model.config, self.device)
        translator = Translator(model, tokenizer, device=self.device, decode=self.decode, constraint=constraint)
        with self.autocast():
            trees = parse_lines(translator, words[:n], self.leaves, beam=1)
        return score_trees(gold[:n], trees)[0]


def trees(run: str, device: str | None) -> Predict:
    """Each line's tree, on one line (`aiayn parse` has every option)."""
    parser = Parser.load(run, device)
    return lambda lines: [str(t) for t in parser.parse(lines)]


SPEC = register(
    TaskSpec(
        name="parse",
        model_kind="encoder-decoder",
        prepare=prepare_parse,
        train_batches=lambda cfg, prepared, dist, device: sentence_batches(cfg, prepared, dist, device),
        build=ParseTask,
        longest_row=translate.SPEC.longest_row,
        default_metric=lambda cfg: "f1",
        settings=ParseSettings,
        corpora=("craft", "wsj", "trees"),
        measures={"f1": True},
        predictor=trees,
        summary="constituency parsing as translation (sentence -> linearised tree, §6.3)",
    )
)
