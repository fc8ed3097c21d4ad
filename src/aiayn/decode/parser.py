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

import torch
from torch import Tensor

from aiayn import evalb
from aiayn.checkpoint import find_in_run
from aiayn.config import BOS_ID, PAD_ID, Config
from aiayn.data.io import read_lines
from aiayn.data.tokenizer import WORD_START, Tokenizer
from aiayn.data.treebank import PARSE_META, Tree, delinearize, parse_tree, retag, split_words, treebank_dir
from aiayn.decode.engines import TorchEngine
from aiayn.decode.translator import Translator
from aiayn.errors import AiaynError


class TreeConstraint:
    """Decoding that can only write a tree over exactly the sentence's words
    (aiayn.decode.search.Constraint). A hypothesis writes only brackets, its leaves and EOS: as many
    leaves as the source has words, no leaf or open bracket once it has them all, no close bracket
    with none open, no open bracket that would leave too little room for the rest before the maximum
    length, and EOS only when every word has its leaf and every bracket is closed.
    Without it a model that loses count of the words it has tagged writes too few or too many
    leaves, and every bracket after the slip spans the wrong words (docs/parsing.md).

    A leaf is a tag token for `pos` and `xx` leaves. For `words` leaves it is the source word itself,
    copied piece by piece: between brackets the next source piece is the only leaf allowed, and
    inside a word (after a piece, before the next word's first) nothing else is, so the model only
    chooses where brackets go. That holds because the source and the target share one BPE, the
    markup is user-defined symbols, and sentencepiece splits every space-separated word alone: a
    word has the same pieces on both sides.

    A source word starts at a piece that starts with WORD_START (sentencepiece marks the first piece
    of every space-separated word)."""

    def __init__(
        self,
        word_start: Tensor,
        leaf: Tensor,
        open_: Tensor,
        close: Tensor,
        eos_id: int,
        copy: bool = False,
        specials: tuple[int, ...] = (PAD_ID, BOS_ID),
    ) -> None:
        self.word_start, self.copy, self.eos_id = (
            word_start,
            copy,
            eos_id,
        )  # (V,) bool; copy: leaves are the source's pieces
        self.leaf, self.open, self.close = leaf.long(), open_.long(), close.long()  # (V,) 0/1
        eos = torch.zeros_like(leaf)
        eos[eos_id] = True
        # the source ids that each take a leaf: a word's first piece, or with `copy` every piece (pad,
        # bos and eos are none)
        self.counted = word_start
        if copy:
            self.counted = ~eos
            self.counted[list(specials)] = False
        # What each kind of state may write, by (no room for another bracket) * 4 + (all words have their
        # leaf) * 2 + (no bracket is open). No room: another open bracket and then the words to go and
        # every close would not fit before the search forces EOS. (With `copy` the leaf set is empty:
        # `banned` allows the next source piece row by row.)
        allowed = [leaf | open_ | close, leaf | open_, close, eos]  # words to go / done x brackets open / not
        self.table = ~torch.stack(allowed + [a & ~open_ for a in allowed])  # (8, V) True where banned

    @classmethod
    def build(
        cls, tokenizer: Tokenizer, markup: list[str], leaves: str, config: Any, device: str | torch.device
    ) -> TreeConstraint | None:
        """From a parse run's tokenizer and markup tokens (RUN/parse.json); None where the markup is not
        one piece each (runs whose BPE was trained without the markup as symbols)."""
        if not markup:
            return None
        ids = [tokenizer.piece_id(WORD_START + t) for t in markup]
        if any(i is None for i in ids):
            return None
        V = config.vocab_size
        kinds = {"(": torch.zeros(V, dtype=torch.bool), ")": torch.zeros(V, dtype=torch.bool)}
        leaf = torch.zeros(V, dtype=torch.bool)
        for t, i in zip(markup, ids):
            kinds.get(t[0], leaf)[i] = True
        copy = leaves == "words"
        leaf &= not copy  # words are copied from the source: no tag is a leaf
        pieces = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
        starts = torch.tensor([p.startswith(WORD_START) for p in pieces] + [False] * (V - len(pieces)))
        dev = torch.device(device)
        tensors = (starts.to(dev), leaf.to(dev), kinds["("].to(dev), kinds[")"].to(dev))
        return cls(*tensors, config.eos_id, copy=copy, specials=(config.pad_id, config.bos_id))

    def forced(self, target: Tensor) -> Tensor:
        """(B, T) gold targets (the tree's tokens, EOS, then pad) -> (B, T) bool: where this constraint
        leaves the decoder no choice, given the gold tokens before. That is EOS (once every leaf is
        written and every bracket closed, nothing else may come) and, with `copy`, every piece of a word
        after its first (inside a word only the next source piece may come). A word's first piece is a
        choice: between words the decoder weighs it against the brackets. Only a tree's closing brackets
        with a single close label, or room running out (which training never meets), would force more.

        Read from the target alone, with no (B, T) step-by-step state: the target's words are the
        source's pieces in order (one BPE for both; see the class), so "inside a word" is a piece that
        does not start a word and comes after some copied piece (the search's k > 0)."""
        eos = target == self.eos_id
        if not self.copy:
            return eos
        piece = self.counted[target] & (self.open + self.close == 0)[target]  # a copied piece, not a bracket
        copied_before = (piece.long().cumsum(1) - piece.long()) > 0  # (B, T)
        return eos | (piece & ~self.word_start[target] & copied_before)

    def start(self, src: Tensor) -> tuple[Tensor, ...]:
        """(leaves to write, leaves written, brackets open), each (B,); with `copy`, leaves are source
        pieces, and the (B, S) source and each row's next piece to copy (B,) ride along."""
        need = self.counted[src].sum(1)  # (B,)
        zero = torch.zeros_like(need)
        return (need, zero, zero.clone()) + ((src, _piece_at(src, zero)) if self.copy else ())

    def banned(self, state: tuple[Tensor, ...], left: Tensor) -> Tensor:
        need, k, d = state[:3]
        tight = (need - k) + d + 2 > left  # an open now, then every leaf and close, then EOS would not fit
        banned = self.table[tight.long() * 4 + (k >= need).long() * 2 + (d == 0).long()]  # (R, V)
        if not self.copy:
            return banned
        nxt = state[4]
        to_go = k < need
        # Inside a word (its next piece does not start one) only that piece may come; between words, it
        # may come beside the brackets. Rows with every piece written keep the table's row.
        banned = banned | (to_go & (k > 0) & ~self.word_start[nxt])[:, None]
        keep = banned.gather(1, nxt[:, None]) & ~to_go[:, None]
        return banned.scatter(1, nxt[:, None], keep)

    def advance(self, state: tuple[Tensor, ...], tokens: Tensor) -> tuple[Tensor, ...]:
        need, k, d = state[:3]
        if not self.copy:
            return need, k + self.leaf[tokens], (d + self.open[tokens] - self.close[tokens]).clamp(min=0)
        src, nxt = state[3:]
        copied = ((k < need) & (tokens == nxt)).long()  # a piece, even one that is markup
        d = (d + (1 - copied) * (self.open[tokens] - self.close[tokens])).clamp(min=0)
        k = k + copied
        return need, k, d, src, _piece_at(src, k)


def _piece_at(src: Tensor, k: Tensor) -> Tensor:
    """(R, S) source rows, (R,) positions -> (R,) src[row, k] (past the end: the last column)."""
    return src.gather(1, k.clamp(max=src.size(1) - 1)[:, None]).squeeze(1)


def parse_lines(
    translator: Translator,
    lines: list[str],
    leaves: str,
    beam: int | None = None,
    max_len_a: float | None = None,
    max_len_b: float | None = None,
) -> list[Tree]:
    """One tree per sentence of space-separated words, whatever the model writes (an output length
    limit left None: the translator's decode setting)."""
    hyps = translator.translate(lines, beam=beam, max_len_a=max_len_a, max_len_b=max_len_b)
    return [delinearize(h, split_words(s), leaves) for h, s in zip(hyps, lines)]


class Parser:
    """A parse run's Translator and the leaf form its trees were linearised with (its task.tree_leaves)."""

    def __init__(self, translator: Translator, leaves: str = "pos") -> None:
        self.translator, self.leaves = translator, leaves

    @classmethod
    def load(cls, path: str | os.PathLike, device: str | None = None, constrain: bool = True, **kw: Any) -> Parser:
        """From a parse run directory (or a weights file in one); `kw` as Translator.load's. The run's
        RUN/parse.json (written when training starts) says how its trees were linearised. `constrain`:
        search only trees over exactly the sentence's words (TreeConstraint), where the run allows it;
        the torch engine then decodes unless `engine` says otherwise (CTranslate2 cannot constrain)."""
        found = find_in_run(path, PARSE_META)
        if found is None:
            raise AiaynError(f"{path} is not a parse run (task: parse runs hold {PARSE_META})")
        meta = json.loads(found.read_text())
        markup = meta.get("markup", []) if constrain else []
        if markup:
            kw.setdefault("engine", "torch")
        translator = Translator.load(path, device, **kw)
        if markup and isinstance(translator.searcher, TorchEngine):
            config = translator.searcher.config
            translator.searcher.constraint = TreeConstraint.build(
                translator.tokenizer, markup, meta["leaves"], config, translator.device
            )
        return cls(translator, meta["leaves"])

    def parse(self, sentences: list[str], beam: int | None = None) -> list[Tree]:
        return parse_lines(self.translator, sentences, self.leaves, beam)

    def score_split(self, run: str | os.PathLike, split: str, limit: int | None = None) -> dict[str, Any]:
        """Parse the run's own `split` (test | valid; its first `limit` sentences) and score it against
        the gold trees with EVALB: {"f1", "f1_40" (sentences of at most 40 words), "by_length" ([first
        length, sentences, F1] per 10-word bucket), "sentences", "trees"}."""
        found = find_in_run(run, "config.yaml")
        if found is None:
            raise AiaynError(f"{run}: no config.yaml, so no data to parse")
        split = {"dev": "valid", "val": "valid"}.get(split, split)
        cfg = Config.load(str(found))
        directory = treebank_dir(cfg.data, self.leaves, cfg.task.options.get("ptb_root"))[0]
        if not (directory / f"{split}.words").is_file():
            raise AiaynError(f"the run's treebank has no {split} split in {directory}")
        words, gold = read_lines(directory / f"{split}.words"), read_lines(directory / f"{split}.gold")
        words, gold = words[:limit], gold[:limit]
        trees = self.parse(words)
        ev = evalb.scoring(gold, gold_tagged(gold, trees))  # one evaluation: both figures and the buckets
        f1, f1_40 = evalb.f1_of(ev)
        by_length = evalb.f1_by_length(ev)
        return {
            "f1": f1,
            "f1_40": f1_40,
            "by_length": [list(b) for b in by_length],
            "sentences": len(words),
            "trees": [str(t) for t in trees],
        }


def score_trees(gold: list[str], trees: list[Tree]) -> tuple[float, float]:
    """EVALB F1 (all sentences, length <= 40) of `trees` against the `gold` lines, every sentence counted.

    The trees take the gold POS tags first, whatever their leaves. Tags are never scored as brackets;
    EVALB only uses them to drop punctuation, and a sentence whose test tree drops other words than the
    gold tree (a word tagged `,` that gold tags `NN`, a placeholder `XX` where gold has `.`) is a length
    mismatch that EVALB leaves out of its totals. With its own tags, a model that tags badly would be
    scored on the few sentences it tags right (docs/parsing.md, Scoring)."""
    return evalb.f1(gold, gold_tagged(gold, trees))


def gold_tagged(gold: list[str], trees: list[Tree]) -> list[str]:
    """The lines of `trees`, each with its gold tree's POS tags (see score_trees)."""
    return [str(retag(t, [tag for tag, _ in parse_tree(g).leaves()])) for t, g in zip(trees, gold)]
