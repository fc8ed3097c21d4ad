"""Where the inline elements of a run of HTML text go in its translation (aiayn.documents.html reads the
runs and their sentences; this puts the translated text back into the tree).

An element over whole words of one sentence covers the words of the translation they are linked to
(`Links`, one set of target words per source word: aiayn.decode.align), from the first to the last,
with the translation's punctuation at its edges only where the source element has its own. Any other
(part of a word, across sentences, no usable links) and every empty one (br, img, a comment) maps by
position: its start and end go to the same relative place in the sentence's translation, snapped to
the nearest place of the same shape (a word's start, its end, before punctuation). Elements nest as
they did; sibling elements that the links place the other way round change places, each with its
content and tail.
"""

from __future__ import annotations

import bisect
import math
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Links = list[frozenset[int]] | None  # per source word, the target words it is linked to (aiayn.decode.align)
# What a place of another shape costs, in characters of distance: about a short word, so "<b>Hund</b>."
# closes before the translation's "." rather than after it, but never a word away from where it maps
_MISMATCH = 3


@dataclass
class Run:
    """One run of inline content: where its text lives (`slots`: (element, "text" | "tail"), in
    document order, the first being where the run starts) and its inline elements, each with its
    start and end in the run's plain text."""

    slots: list[tuple[Any, str]] = field(default_factory=list)
    text: str = ""
    starts: dict[int, int] = field(default_factory=dict)  # id(element) -> offset
    ends: dict[int, int] = field(default_factory=dict)
    events: list[tuple[str, Any]] = field(default_factory=list)  # ("text", slot) / ("start"|"end", el)
    synthetic: set[int] = field(default_factory=set)  # offsets of spaces the source has no character for
    breaks: list[int] = field(default_factory=list)  # those of them that end a line: a <br>'s


def _kind(text: str, i: int) -> str:
    """What character `i` of `text` is: "space" (the text's edges count as space), "word" or "punct"."""
    if i < 0 or i >= len(text) or text[i].isspace():
        return "space"
    return "punct" if unicodedata.category(text[i]).startswith("P") else "word"


def _sides(text: str, x: int, skip: frozenset[int] = frozenset()) -> tuple[str, str]:
    """The kinds of character before and after offset `x` (`skip`: synthetic characters not looked at)."""
    return _kind(text, x - 1), _kind(text, x + 1 if x in skip else x)


def _boundaries(text: str, what: str) -> list[tuple[int, tuple[str, str]]]:
    """Offsets where the kind of character changes (a word starts or ends, punctuation starts or ends),
    with the kinds on both sides: where a tag may open (`what` "start": text follows), close ("end":
    text precedes) or sit ("point")."""
    out = []
    for i in range(len(text) + 1):
        sides = _sides(text, i)
        if sides[0] == sides[1]:
            continue
        if (what == "start" and sides[1] == "space") or (what == "end" and sides[0] == "space"):
            continue
        out.append((i, sides))
    return out or [(0, ("space", "space"))]


def _snap(source: str, x: int, target: str, what: str, skip: frozenset[int]) -> int:
    """Offset `x` inside the sentence `source` -> the place of the same shape nearest to the same
    relative position in its translation `target` (see `_mapper`)."""
    y = round(x * len(target) / max(1, len(source)))
    sides = _sides(source, x, skip)

    def cost(bound: tuple[int, tuple[str, str]]) -> tuple[int, int]:
        b, shape = bound
        return abs(b - y) + _MISMATCH * sum(u != v for u, v in zip(shape, sides)), b

    return min(_boundaries(target, what), key=cost)[0]


def _mapper(
    source: str, target: str, pairs: list[tuple[int, int, int, int]], skip: frozenset[int]
) -> Callable[[int, str], int]:
    """A map from offsets in `source` to offsets in `target`, given the (source start, source end, target
    start, target end) of each sentence. Inside a sentence by relative position, snapped to the nearest
    place of the same shape: a tag that closes before "." in the source closes before the translation's
    "." ("<b>Hund</b>." -> "<b>dog</b>."), one that opens a word opens a word. In the whitespace
    between sentences by the same offset (gaps are copied as they are)."""

    def f(x: int, what: str) -> int:
        prev_src_end, prev_tgt_end = 0, 0
        for s0, s1, t0, t1 in pairs:
            if x < s0:  # in the gap before this sentence
                return min(prev_tgt_end + (x - prev_src_end), t0)
            if x in (s0, s1):  # a sentence's ends are its translation's
                return t0 if x == s0 else t1
            if x < s1:
                return t0 + _snap(source[s0:s1], x - s0, target[t0:t1], what, frozenset(k - s0 for k in skip))
            prev_src_end, prev_tgt_end = s1, t1
        return min(len(target), prev_tgt_end + (x - prev_src_end))

    return f


def sentence_spans(gaps: Sequence[str], sentences: Sequence[str]) -> list[tuple[int, int]]:
    spans, at = [], 0
    for gap, sentence in zip(gaps, sentences):
        at += len(gap)
        spans.append((at, at + len(sentence)))
        at += len(sentence)
    return spans


def sentence_at(spans: Sequence[tuple[int, int]], x: int) -> int | None:
    """The index of the span (sorted, disjoint) that holds position `x`, or None (a gap)."""
    k = bisect.bisect_right(spans, (x, math.inf)) - 1
    return k if k >= 0 and spans[k][0] <= x < spans[k][1] else None


def _read_for_break(text: str, x: int, spans: Sequence[tuple[int, int]], skip: frozenset[int]) -> bool:
    """Whether the translation's space at the place of the synthetic space `x` after a <br> stands for that
    space alone: between sentences the gap is copied, so it holds that very space; inside a sentence the
    translation's own space between words does, unless the source has whitespace of its own beside the
    break (a neighbouring <br>'s synthetic space is not the source's)."""
    if not any(s0 <= x < s1 for s0, s1 in spans):
        return True
    return not any(0 <= i < len(text) and i not in skip and text[i].isspace() for i in (x - 1, x + 1))


def _word_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each word of `text` (what str.split returns)."""
    spans, start = [], None
    for i, ch in enumerate(text + " "):
        if ch.isspace() and start is not None:
            spans.append((start, i))
            start = None
        elif not ch.isspace() and start is None:
            start = i
    return spans


def _projected(
    text: str, translated: str, x0: int, x1: int, src: tuple[int, int], tgt: tuple[int, int], links: Links
) -> tuple[int, int] | None:
    """Where the element over [x0, x1) of `text` goes in `translated` through the sentence's word links:
    from the first to the last target word its words are linked to (a tag over the whole sentence: the
    whole translation). None for an element not inside this sentence, one that leaves part of a word
    out other than its punctuation ("<b>Hund</b>-Leine", "Hund<b>.</b>"), or one without usable links."""
    (s0, s1), (t0, t1) = src, tgt
    if links is None or not (s0 <= x0 < x1 <= s1):
        return None
    sentence, out = text[s0:s1], translated[t0:t1]
    a, b = x0 - s0, x1 - s0
    while a < b and sentence[a].isspace():  # "Ein<b> Hund</b>": the tag's words are what counts
        a += 1
    while b > a and sentence[b - 1].isspace():
        b -= 1
    if a == 0 and b == len(sentence):
        return t0, t1
    words, tw = _word_spans(sentence), _word_spans(out)
    inside = [i for i, (w0, w1) in enumerate(words) if w0 < b and w1 > a]
    if not inside or all(_kind(sentence, i) == "punct" for i in range(a, b)):
        return None
    left_out = sentence[words[inside[0]][0] : a] + sentence[b : words[inside[-1]][1]]
    if any(_kind(c, 0) != "punct" for c in left_out):
        return None
    linked = {j for i in inside if i < len(links) for j in links[i]}
    # links spread over more than twice the words (+1) are a model that does not attend word by word (a
    # small model that memorised its data reads anywhere), not an alignment: by position then
    if not linked or max(linked) >= len(tw) or max(linked) - min(linked) + 1 > 2 * len(inside) + 1:
        return None
    y0, y1 = tw[min(linked)][0], tw[max(linked)][1]
    # the translation's punctuation at the words' edges is inside the tag only where the source's is:
    # "(<b>Hund</b>)" -> "(<b>dog</b>)", "<b>Buch</b> gelesen." -> "<b>book</b>.", "<b>Hund.</b>" -> "<b>dog.</b>"
    if _kind(sentence, a) != "punct":
        while y0 < y1 and _kind(out, y0) == "punct":
            y0 += 1
    if _kind(sentence, b - 1) != "punct":
        while y1 > y0 and _kind(out, y1 - 1) == "punct":
            y1 -= 1
    return t0 + y0, t0 + y1


@dataclass
class _Node:
    """An element of a run with its events: its start (and text), its children's, its end, its tail."""

    el: Any
    head: list[tuple[str, Any]] = field(default_factory=list)
    children: list[_Node] = field(default_factory=list)
    end: list[tuple[str, Any]] = field(default_factory=list)
    tail: list[tuple[str, Any]] = field(default_factory=list)

    def events(self) -> list[tuple[str, Any]]:
        return self.head + [e for c in self.children for e in c.events()] + self.end + self.tail


def _in_placed_order(events: list[tuple[str, Any]], placed: dict[int, tuple[int, int]]) -> list[tuple[str, Any]]:
    """The run's events with sibling elements that the links place in the other order moved into that
    order, in the tree too ("Er hat <b>das Buch</b> <i>gelesen</i>." -> "He <i>read</i> <b>the book</b>."):
    each moves with its content and its tail. Siblings placed on overlapping words, or with an element
    placed by position among or inside them (a br, an img, a comment), keep the source's order."""
    root = _Node(None)
    stack = [root]
    for event in events:
        kind, what = event
        if kind == "start":
            node = _Node(what, [event])
            stack[-1].children.append(node)
            stack.append(node)
        elif kind == "end":
            stack.pop().end.append(event)
        elif what[1] == "tail" and stack[-1].children and stack[-1].children[-1].el is what[0]:
            stack[-1].children[-1].tail.append(event)
        else:
            stack[-1].head.append(event)

    def whole(node: _Node) -> bool:  # every element of it placed by the links, none by position
        return id(node.el) in placed and all(whole(c) for c in node.children)

    def order(node: _Node) -> None:
        for c in node.children:
            order(c)
        at = [i for i, c in enumerate(node.children) if id(c.el) in placed]
        moved = sorted(at, key=lambda i: placed[id(node.children[i].el)])
        spans = [placed[id(node.children[i].el)] for i in moved]
        if moved == at or any(a[1] > b[0] for a, b in zip(spans, spans[1:])):
            return
        # an element placed by position (a br, an img, a comment) among or inside them would be placed
        # against the new order; so would anything of the tree the run does not hold (an input in a label)
        lo, hi = at[0], at[-1] + 1
        old = node.children[lo:hi]
        if at != list(range(lo, hi)) or not all(whole(c) for c in old):
            return
        parent = old[0].el.getparent()
        first = parent.index(old[0].el)
        if list(parent[first : first + len(old)]) != [c.el for c in old]:
            return
        node.children[lo:hi] = [node.children[j] for j in moved]
        for c in old:  # an lxml element takes its tail along
            parent.remove(c.el)
        for k, c in enumerate(node.children[lo:hi]):
            parent.insert(first + k, c.el)

    order(root)
    return root.events()


def put_back(run: Run, source_part: Any, translated: str, translations: Sequence[str], links: Sequence[Links]) -> None:
    """The run's text replaced by `translated`, its inline elements moved to the mapped places: through
    `links` (one per sentence) where they place an element, else by position."""
    src_spans = sentence_spans(source_part.gaps, source_part.sentences)
    tgt_spans = sentence_spans(source_part.gaps, translations)
    skip = frozenset(run.synthetic)
    f = _mapper(run.text, translated, [(a, b, c, d) for (a, b), (c, d) in zip(src_spans, tgt_spans)], skip)
    placed: dict[int, tuple[int, int]] = {}
    for el_id, x0 in run.starts.items():
        k = sentence_at(src_spans, x0)  # the one sentence that can hold the element
        at = (
            None
            if k is None
            else _projected(run.text, translated, x0, run.ends[el_id], src_spans[k], tgt_spans[k], links[k])
        )
        if at is not None:
            placed[el_id] = at
    pos = 0
    slot = run.slots[0]
    pieces: dict[tuple[int, str], str] = {}
    pending = ""  # a space owed to the next piece
    for kind, what in _in_placed_order(run.events, placed) if len(placed) > 1 else run.events:
        if kind == "text":
            slot = what
            continue
        x = run.starts[id(what)] if kind == "start" else run.ends[id(what)]
        # an element empty in the source (br, img, a comment, code) is a point with the source's spacing
        point = run.starts[id(what)] == run.ends[id(what)]
        if id(what) in placed:
            y = max(pos, placed[id(what)][0 if kind == "start" else 1])
            while kind == "start" and y < placed[id(what)][1] and translated[y].isspace():
                y += 1  # moved up to an earlier tag's end: it still opens on its word, not on a space
        else:
            y = max(pos, f(x, "point" if point else kind))  # never before an earlier tag: tags nest as they did
        key = (id(slot[0]), slot[1])
        piece = pending + translated[pos:y]
        pending = ""
        # "Siehe <code>x</code> hier." keeps its spaces: a point that lands beside a space in the translation
        # gets the source's space on its other side too (never inside a word: the text stays the same words)
        if point and (_kind(translated, y - 1) == "space" or _kind(translated, y) == "space"):
            before, after = _sides(run.text, x, skip)
            if kind == "start" and before == "space" and y > 0 and _kind(translated, y - 1) != "space":
                piece += " "
            if kind == "end" and after == "space" and y < len(translated) and _kind(translated, y) != "space":
                pending = " "
        pieces[key] = pieces.get(key, "") + piece
        pos = y
        after_break = point and kind == "end" and x in skip and translated[y : y + 1] == " "
        if after_break and _read_for_break(run.text, x, src_spans, skip):
            pos = y + 1  # the space the model read for the <br>: not the source's, so not written
        slot = (what, "text") if kind == "start" else (what, "tail")
    key = (id(slot[0]), slot[1])
    pieces[key] = pieces.get(key, "") + pending + translated[pos:]
    for el, which in run.slots:
        setattr(el, which, pieces.get((id(el), which)) or None)
