"""Word alignment read from the encoder-decoder attention, for carrying markup onto a translation.

The last decoder layer's encoder-decoder attention (§3.2.3), averaged over its heads, is a soft
alignment of the pieces a model writes with the pieces it reads (the alignment-like figures of the
paper; Garg et al., 2019, read alignments from one layer this way). A source word is linked to the
target words that the argmaxes of both directions agree on: each target piece's likeliest source piece,
and each source piece's likeliest target piece; where the two share no word, the second alone (so every
source word has a link). Words are what whitespace separates, as sentencepiece's "▁" marks them.

    links = word_links("Ein Mann fährt Fahrrad.", src_pieces, "A man rides a bike.", tgt_pieces, att)
    links[1]   # -> frozenset({1}): "Mann" is "man"

docs/serving.md measures it against placing tags by relative position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

WORD_START = "\u2581"  # sentencepiece's mark of a piece that starts a word


def piece_words(pieces: Sequence[str]) -> list[int]:
    """The word of each piece: a piece that starts with "▁" starts the next word."""
    out, word = [], -1
    for p in pieces:
        if p.startswith(WORD_START) or word < 0:
            word += 1
        out.append(word)
    return out


def word_links(
    source: str, src_pieces: Sequence[str], target: str, tgt_pieces: Sequence[str], attention: Any
) -> list[frozenset[int]] | None:
    """Per word of `source` (str.split), the words of `target` it is linked to, from `attention`, a
    (len(tgt_pieces), len(src_pieces)) array: row j the attention while target piece j is written. None
    when the pieces do not spell the texts' words (a cut input, an empty side)."""
    ws, wt = piece_words(src_pieces), piece_words(tgt_pieces)
    n_src, n_tgt = len(source.split()), len(target.split())
    if not ws or not wt or ws[-1] + 1 != n_src or wt[-1] + 1 != n_tgt:
        return None
    if tuple(attention.shape) != (len(tgt_pieces), len(src_pieces)):
        return None
    to_source = attention.argmax(1).tolist()  # per target piece, its likeliest source piece
    to_target = attention.argmax(0).tolist()  # per source piece, its likeliest target piece
    forward: list[set[int]] = [set() for _ in range(n_src)]
    backward: list[set[int]] = [set() for _ in range(n_src)]
    for j, i in enumerate(to_source):
        forward[ws[i]].add(wt[j])
    for i, j in enumerate(to_target):
        backward[ws[i]].add(wt[j])
    return [frozenset(f & b or b) for f, b in zip(forward, backward)]
