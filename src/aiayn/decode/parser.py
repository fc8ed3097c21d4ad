"""Constituency parsing with a `task: parse` run (paper §6.3): sentences in, trees out.

    p = Parser.load("runs/craft_parse")
    p.parse(["The mice were treated with insulin ."])   # [Tree]; str(tree) is one line of brackets

The run's Translator writes each sentence's tree linearised (aiayn.data.treebank); `delinearize`
turns whatever it writes into a tree over exactly the sentence's words, so no sentence is ever lost.
Words are separated by ASCII spaces and tabs (a word may hold other Unicode spaces).
"""

from __future__ import annotations

import json
import os
from typing import Any

from aiayn import evalb
from aiayn.checkpoint import find_in_run
from aiayn.config import Config
from aiayn.data.io import read_lines
from aiayn.data.treebank import Tree, delinearize, parse_tree, retag, split_words, treebank_dir
from aiayn.decode.translator import Translator
from aiayn.errors import AiaynError

PARSE_META = "parse.json"  # in a parse run: {"leaves": ...}, how its targets were linearised


def parse_lines(translator: Translator, lines: list[str], leaves: str, beam: int | None = None) -> list[Tree]:
    """One tree per sentence of space-separated words, whatever the model writes."""
    hyps = translator.translate(lines, beam=beam)
    return [delinearize(h, split_words(s), leaves) for h, s in zip(hyps, lines)]


class Parser:
    """A parse run's Translator and the leaf form its trees were linearised with (task.tree_leaves)."""

    def __init__(self, translator: Translator, leaves: str = "pos") -> None:
        self.translator, self.leaves = translator, leaves

    @classmethod
    def load(cls, path: str | os.PathLike, device: str | None = None, **kw: Any) -> Parser:
        """From a parse run directory (or a weights file in one); `kw` as Translator.load's. The run's
        RUN/parse.json (written when training starts) says how its trees were linearised."""
        found = find_in_run(path, PARSE_META)
        if found is None:
            raise AiaynError(f"{path} is not a parse run (task: parse runs hold {PARSE_META})")
        return cls(Translator.load(path, device, **kw), json.loads(found.read_text())["leaves"])

    def parse(self, sentences: list[str], beam: int | None = None) -> list[Tree]:
        return parse_lines(self.translator, sentences, self.leaves, beam)

    def score_split(self, run: str | os.PathLike, split: str) -> dict[str, Any]:
        """Parse the run's own `split` (test | valid) and score it against the gold trees with EVALB:
        {"f1", "f1_40" (sentences of at most 40 words), "sentences", "trees"}."""
        found = find_in_run(run, "config.yaml")
        if found is None:
            raise AiaynError(f"{run}: no config.yaml, so no data to parse")
        split = {"dev": "valid", "val": "valid"}.get(split, split)
        directory = treebank_dir(Config.load(str(found)).data, self.leaves)[0]
        if not (directory / f"{split}.words").is_file():
            raise AiaynError(f"the run's treebank has no {split} split in {directory}")
        words, gold = read_lines(directory / f"{split}.words"), read_lines(directory / f"{split}.gold")
        trees = self.parse(words)
        f1, f1_40 = score_trees(gold, trees, self.leaves)
        return {"f1": f1, "f1_40": f1_40, "sentences": len(words), "trees": [str(t) for t in trees]}


def score_trees(gold: list[str], trees: list[Tree], leaves: str) -> tuple[float, float]:
    """EVALB F1 (all sentences, length <= 40) of `trees` against the `gold` lines. Trees written with
    placeholder leaves (`xx`, `words`) take the gold POS tags first: EVALB drops punctuation by its tag,
    and a placeholder where gold has `,` would make the sentence a length mismatch, left out of the
    score. Tags themselves are never scored."""
    if leaves != "pos":
        trees = [retag(t, [tag for tag, _ in parse_tree(g).leaves()]) for t, g in zip(trees, gold)]
    return evalb.f1(gold, [str(t) for t in trees])


def is_parse_run(path: str | os.PathLike) -> bool:
    return find_in_run(path, PARSE_META) is not None
