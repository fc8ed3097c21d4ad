"""Parsing's loss and validation (§6.3): translation's loss over linearised trees, the EVALB F1 of
constrained greedy parses; and its predictor. The record that names them: aiayn.train.tasks.parse."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from aiayn.config import Config, ConfigError
from aiayn.data.encoded import EncodedSplit
from aiayn.data.io import read_lines
from aiayn.data.treebank import markup_tokens, split_words, treebank_dir
from aiayn.decode import Translator
from aiayn.decode.parser import Parser, TreeConstraint, parse_lines, score_trees
from aiayn.train.tasks.parse import ParseSettings
from aiayn.train.tasks.spec import Predict, task_options
from aiayn.train.tasks.translate_task import TranslationTask

# Validation's output limit, in tokens a source piece and more: a tree is at most 3 tokens a leaf (the leaf,
# and the open and close of at most one branching constituent above it) and a few unary brackets; every
# tree of CRAFT's dev split fits (docs/parsing.md, Validation)
VALID_LEN_A, VALID_LEN_B = 3.0, 10


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
