"""Word links from encoder-decoder attention (aiayn.decode.align, Translator.align), for placing HTML tags."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from aiayn.config import ModelConfig
from aiayn.decode.align import word_links


def test_words_are_linked_where_both_directions_agree() -> None:
    # Ein Mann fährt Fahr·rad·.  ->  A man is riding a bi·cycle·.
    src_words, tgt_words = [0, 1, 2, 3, 3, 3], [0, 1, 2, 3, 4, 5, 5, 5]
    att = np.full((len(tgt_words), len(src_words)), 0.01)
    for j, i in enumerate([1, 1, 2, 2, 3, 4, 4, 5]):  # writing "A", the model already looks at "Mann"
        att[j, i] = 0.7
    att[0, 0] = 0.6  # "Ein" is read most while "A" is written, yet "A" reads "Mann" more
    att[1, 1] = att[3, 2] = 0.9
    links = word_links(src_words, 4, tgt_words, att)
    # "Mann": "A" and "man" read it most (forward), and it is read most by "man" (backward): "man" alone.
    # "Fahrrad.": "a", "bi", "cycle" and "." read it (forward), its pieces are read most by "a" and "bi"
    assert links == [frozenset({0}), frozenset({1}), frozenset({3}), frozenset({4, 5})]
    assert word_links([0, 2], 3, [0], np.ones((1, 2)))[1] == frozenset()  # a word without pieces: no links
    assert word_links(src_words, 4, tgt_words, att[:, :3]) is None  # an attention of another shape
    assert word_links([], 1, [0], np.zeros((1, 0))) is None


@st.composite
def _pairs(draw: st.DrawFn) -> tuple:
    def side() -> list[int]:
        pieces = draw(st.lists(st.integers(1, 3), min_size=1, max_size=8))  # pieces a word
        return [w for w, n in enumerate(pieces) for _ in range(n)]

    s, t = side(), side()
    seed = draw(st.integers(0, 2**32 - 1))
    return s, t, np.random.default_rng(seed).random((len(t), len(s)))


@given(_pairs())
def test_every_source_word_gets_target_words_it_reads_most(pair: tuple) -> None:
    """Every source word is linked, to target words that exist, among those its pieces are read most by."""
    s, t, att = pair
    links = word_links(s, s[-1] + 1, t, att)
    assert links is not None and len(links) == s[-1] + 1
    for w, linked in enumerate(links):
        backward = {t[int(att[:, i].argmax())] for i in range(len(s)) if s[i] == w}
        assert linked and linked <= backward and max(linked) <= t[-1]


class _SamePieces:
    """An engine whose target pieces read the source pieces with the same id: a word is linked to the
    words that spell it the same, if each piece's word is known exactly."""

    name = "same-pieces"
    device = torch.device("cpu")

    def __init__(self, vocab_size: int) -> None:
        self.config = ModelConfig.preset("tiny", vocab_size, max_positions=64)
        self.seen: list[tuple[list[int], list[int]]] = []

    def search(self, sources, d, n_best):  # not used here
        raise NotImplementedError

    def cross_attention(self, sources, targets):
        self.seen += list(zip(sources, targets))
        return [torch.tensor([[float(a == b) for a in s] for b in t]) for s, t in zip(sources, targets)]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    from aiayn.data.tokenizer import Tokenizer

    lines = ["Ein großer Hund rennt über die Wiese.", "Zwei Kinder spielen im Wasser.", "A big dog runs."] * 20
    return Tokenizer.train(lines, Path(tmp_path_factory.mktemp("align")) / "spm.model", vocab_size=330, threads=1)


def test_translator_links_the_words_str_split_sees(tokenizer) -> None:
    """Characters sentencepiece reads otherwise than str.split shift no link onto another word: a zero-width
    space inside a word (two words to sentencepiece) and alone (none), "¨" and "´" (NFKC: a space and a
    mark). Each word is encoded on its own. A sentence past the positions, or an empty one, has no links."""
    from aiayn.decode.translator import Translator

    engine = _SamePieces(tokenizer.vocab_size)
    t = Translator(engine, tokenizer)
    plain = "Ein großer Hund rennt."  # Hund is word 2, rennt. word 3
    cases = {
        "Ein\u200bgroßer Hund \u200b rennt.": {1: {2}, 2: set(), 3: {3}},
        "Ein ¨ großer Hund´ rennt.": {0: {0}, 2: {1}, 3: {2}, 4: {3}},
        plain: {0: {0}, 1: {1}, 2: {2}, 3: {3}},
    }
    for (text, want), links in zip(cases.items(), t.align(list(cases), [plain] * len(cases))):
        assert links is not None and len(links) == len(text.split()), text
        assert {k: set(links[k]) for k in want} == want, text
    assert t.align(["Hund " * 80, "", "Hund"], ["Hund", "Hund", ""]) == [None, None, None]
    assert all(len(s) < 64 and len(t) < 64 for s, t in engine.seen)
