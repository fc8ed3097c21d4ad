"""Word links from encoder-decoder attention (aiayn.decode.align), for placing HTML tags."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from aiayn.decode.align import piece_words, word_links


def test_pieces_are_grouped_into_the_words_they_spell() -> None:
    assert piece_words(["▁Ein", "▁Fahr", "rad", ".", "▁", "Ü", "▁x"]) == [0, 1, 1, 1, 2, 2, 3]
    assert piece_words(["Fahr", "rad", "▁x"]) == [0, 0, 1]  # a first piece without the mark starts a word
    assert piece_words([]) == []


def test_words_are_linked_where_both_directions_agree() -> None:
    src = ["▁Ein", "▁Mann", "▁fährt", "▁Fahr", "rad", "."]
    tgt = ["▁A", "▁man", "▁is", "▁riding", "▁a", "▁bi", "cycle", "."]
    att = np.full((len(tgt), len(src)), 0.01)
    for j, i in enumerate([1, 1, 2, 2, 3, 4, 4, 5]):  # writing "A", the model already looks at "Mann"
        att[j, i] = 0.7
    att[0, 0] = 0.6  # "Ein" is read most while "A" is written, yet "A" reads "Mann" more
    att[1, 1] = att[3, 2] = 0.9
    links = word_links("Ein Mann fährt Fahrrad.", src, "A man is riding a bicycle.", tgt, att)
    # "Mann": "A" and "man" read it most (forward), and it is read most by "man" (backward): "man" alone.
    # "Fahrrad.": "a", "bi", "cycle" and "." read it (forward), its pieces are read most by "a" and "bi"
    assert links == [frozenset({0}), frozenset({1}), frozenset({3}), frozenset({4, 5})]
    # pieces that do not spell the text's words, or an attention of another shape: no links
    assert word_links("Ein Mann", src, "A man is riding a bicycle.", tgt, att) is None
    assert word_links("Ein Mann fährt Fahrrad.", src, "A man is riding a bicycle.", tgt, att[:, :3]) is None
    assert word_links("", [], "A", ["▁A"], np.zeros((1, 0))) is None


@st.composite
def _pairs(draw: st.DrawFn) -> tuple:
    def side() -> tuple[str, list[str]]:
        words = draw(st.lists(st.integers(1, 3), min_size=1, max_size=8))  # pieces a word
        pieces = [("▁" if k == 0 else "") + f"p{w}{k}" for w, n in enumerate(words) for k in range(n)]
        return " ".join(f"w{w}" for w in range(len(words))), pieces

    (s, sp), (t, tp) = side(), side()
    seed = draw(st.integers(0, 2**32 - 1))
    return s, sp, t, tp, np.random.default_rng(seed).random((len(tp), len(sp)))


@given(_pairs())
def test_every_source_word_gets_target_words_it_reads_most(pair: tuple) -> None:
    """Every source word is linked, to target words that exist, among those its pieces are read most by."""
    s, sp, t, tp, att = pair
    links = word_links(s, sp, t, tp, att)
    assert links is not None and len(links) == len(s.split())
    ws, wt = piece_words(sp), piece_words(tp)
    for w, linked in enumerate(links):
        backward = {wt[int(att[:, i].argmax())] for i in range(len(sp)) if ws[i] == w}
        assert linked and linked <= backward and max(linked) < len(t.split())
