"""Word alignment read from the encoder-decoder attention, for carrying markup onto a translation.

The last decoder layer's encoder-decoder attention (§3.2.3), averaged over its heads, is a soft
alignment of the pieces a model writes with the pieces it reads (the alignment-like figures of the
paper; Garg et al., 2019, read alignments from one layer this way). A source word is linked to the
target words that the argmaxes of both directions agree on: each target piece's likeliest source piece,
and each source piece's likeliest target piece; where the two share no word, the second alone (so every
source word with pieces has a link).

    links = word_links([0, 1, 2, 3, 3], 4, [0, 1, 2, 3, 4, 5, 5], att)   # the word of each piece
    links[1]   # -> frozenset({1}): "Mann" is "man"

Translator.align encodes each whitespace word on its own, so a piece's word is known exactly, whatever
sentencepiece's normalisation makes of the characters. docs/benchmarks.md measures it against placing
tags by relative position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def word_links(
    src_words: Sequence[int], n_src: int, tgt_words: Sequence[int], attention: Any
) -> list[frozenset[int]] | None:
    """Per source word (0 .. n_src - 1), the target words it is linked to. `src_words[i]`: the word of
    source piece i; `tgt_words[j]`: the word of target piece j; `attention`: a (len(tgt_words),
    len(src_words)) array, row j the attention while target piece j is written. A word without pieces
    has no links; None when either side has no pieces or the attention has another shape."""
    if not src_words or not tgt_words or tuple(attention.shape) != (len(tgt_words), len(src_words)):
        return None
    to_source = attention.argmax(1).tolist()  # per target piece, its likeliest source piece
    to_target = attention.argmax(0).tolist()  # per source piece, its likeliest target piece
    forward: list[set[int]] = [set() for _ in range(n_src)]
    backward: list[set[int]] = [set() for _ in range(n_src)]
    for j, i in enumerate(to_source):
        forward[src_words[i]].add(tgt_words[j])
    for i, j in enumerate(to_target):
        backward[src_words[i]].add(tgt_words[j])
    return [frozenset(f & b or b) for f, b in zip(forward, backward)]
