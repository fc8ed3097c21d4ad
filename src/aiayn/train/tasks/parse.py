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
from torch import Tensor

from aiayn.config import Config, ConfigError, DataConfig
from aiayn.data.encoded import EncodedSplit
from aiayn.data.io import read_lines
from aiayn.data.pairs import Prepared, prepare
from aiayn.data.pipeline import Options
from aiayn.data.treebank import markup_tokens, split_words, treebank_dir, write_parallel
from aiayn.decode import Translator
from aiayn.decode.parser import PARSE_META, WORD_START, Parser, TreeConstraint, parse_lines, score_trees
from aiayn.fileio import atomic_write
from aiayn.train.tasks import translate
from aiayn.train.tasks.spec import Predict, TaskSpec, register, task_options
from aiayn.train.tasks.translate import TranslationTask

# Validation's output limit, in tokens a source piece and more: a tree is at most 3 tokens a leaf (the leaf,
# and the open and close of at most one branching constituent above it) and a few unary brackets; every
# tree of CRAFT's dev split fits (docs/parsing.md, Validation)
VALID_LEN_A, VALID_LEN_B = 3.0, 10


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


class ParseTask(TranslationTask):
    """Translation's loss over linearised trees; validation: loss, nll, perplexity over the first
    train.eval_max_sentences validation pairs (eval_pairs) and the EVALB F1 of constrained greedy parses
    of the first train.eval_max_sentences validation sentences of at most task.eval_max_words words
    (eval_sentences), so that validation costs a small share of training.

    With task.loss_on_forced false the loss (training and validation alike) leaves out the target
    positions the decoding constraint forces (TreeConstraint.forced: a copied word's later pieces, and
    EOS), and so does the token count that normalises it: the loss is a mean per decision."""

    def __init__(self, cfg: Config, *rest: Any) -> None:  # TranslationTask's arguments
        super().__init__(cfg, *rest)
        own = task_options(cfg, ParseSettings)
        self.leaves, self.decode = own.tree_leaves, cfg.decode
        self.directory = treebank_dir(cfg.data, self.leaves, own.ptb_root)[0]
        self.markup = markup_tokens(read_lines(self.directory / "train.tree"), self.leaves)
        self.max_words = own.eval_max_words
        self.constraint = None  # on the host, where batches are built: what the loss skips
        if not own.loss_on_forced:
            self.constraint = TreeConstraint.build(
                self.prepared.tokenizer, self.markup, self.leaves, self.model_config, "cpu"
            )
            if self.constraint is None:
                raise ConfigError("task.loss_on_forced: false needs the markup as pieces of the run's BPE")

    def scored(self, tgt_out: Tensor) -> Tensor:
        keep = super().scored(tgt_out)
        return keep if self.constraint is None else keep & ~self.constraint.forced(tgt_out)

    def tokens(self, batch: Any) -> int:
        return batch.tgt_tokens if self.constraint is None else int(self.scored(batch.tgt_out).sum())

    @torch.no_grad()
    def validate(self, model: torch.nn.Module) -> dict[str, float | None]:
        return {**self.valid_loss(model, self.eval_pairs()), "f1": self._greedy_f1(model)}

    def eval_pairs(self) -> EncodedSplit:
        """The first train.eval_max_sentences validation pairs (all with 0), for the validation loss: over
        the whole CRAFT dev split it cost more than a tenth of a short run's training (docs/parsing.md)."""
        full, n = self.prepared.splits["valid"], self.eval_max_sentences
        if not n or n >= len(full):
            return full
        return EncodedSplit(
            full.src,
            full.src_offsets[: n + 1],
            full.tgt,
            full.tgt_offsets[: n + 1],
            full.index[:n],
            full.src_lengths[:n],
            full.tgt_lengths[:n],
        )

    def _greedy_f1(self, model: torch.nn.Module) -> float:
        words, gold = self.eval_sentences()
        tokenizer = self.prepared.tokenizer
        constraint = TreeConstraint.build(tokenizer, self.markup, self.leaves, model.config, self.device)
        translator = Translator(model, tokenizer, device=self.device, decode=self.decode, constraint=constraint)
        with self.autocast():
            # At most VALID_LEN_A tokens a source piece (+ VALID_LEN_B), not decode's limit: the constraint lets a
            # half-trained model open brackets until the limit forces it to close them all, and decode's
            # (the paper's source + 300) made such parses several times longer than any tree
            trees = parse_lines(translator, words, self.leaves, beam=1, max_len_a=VALID_LEN_A, max_len_b=VALID_LEN_B)
        return score_trees(gold, trees)[0]

    def eval_sentences(self) -> tuple[list[str], list[str]]:
        """The validation sentences (words, gold trees) that validation F1 parses: the first
        train.eval_max_sentences of those with at most task.eval_max_words words (0: no limit)."""
        words, gold = read_lines(self.directory / "valid.words"), read_lines(self.directory / "valid.gold")
        pairs = [(w, g) for w, g in zip(words, gold) if not self.max_words or len(split_words(w)) <= self.max_words]
        pairs = pairs[: self.eval_max_sentences or len(pairs)]
        return [w for w, _ in pairs], [g for _, g in pairs]


def trees(run: str, device: str | None) -> Predict:
    """Each line's tree, on one line (`aiayn parse` has every option)."""
    parser = Parser.load(run, device)
    return lambda lines: [str(t) for t in parser.parse(lines)]


SPEC = register(
    TaskSpec(
        name="parse",
        summary="constituency parsing as translation (sentence -> linearised tree, §6.3)",
        model_kind="encoder-decoder",
        settings=ParseSettings,
        measures={"f1": True},
        default_metric="f1",
        corpora=("craft", "wsj", "trees"),
        prepare=prepare_parse,
        longest_row=translate.SPEC.longest_row,
        build=ParseTask,
        predictor=trees,
    )
)
