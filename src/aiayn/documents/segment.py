"""Sentence segmentation that keeps the text's layout: a document -> its sentences and the exact
whitespace between them, so translations rejoin into the source's paragraphs, lines and spacing.

    seg = segment("Ein Hund rennt. Eine Frau liest.\n\nZweiter Absatz.", "de")
    seg.sentences   # ['Ein Hund rennt.', 'Eine Frau liest.', 'Zweiter Absatz.']
    seg.gaps        # ['', ' ', '\n\n', '']: before, between and after the sentences
    seg.join(["A dog runs.", "A woman reads.", "Second paragraph."])
                    # 'A dog runs. A woman reads.\n\nSecond paragraph.'

The model was trained on single sentences, so a paragraph handed to it whole comes back garbled
(issue #47); LibreTranslate splits first as well. Three steps:
1. lines: a line break always ends a sentence. Headings, list items and lines without final
   punctuation are sentences of their own, and every newline stays where it was. (Text hard-wrapped
   inside a sentence is therefore cut at its line ends: `aiayn translate --document` says so.) HTML
   text has no line breaks of its own (a newline there is a space), only its <br>s (`breaks`).
   A list marker that starts a line is layout, not text: a bullet ("-", "*", "•" ...) or an
   enumerator ("1.", "1.2.", "2)", "(3)", "a)", "b.", "iv.", "IV)") followed by a space. It stays as
   it is, in the gap before the line's first sentence, and the rest of the line is cut as a line.
   sentencex cuts "1." off as a sentence of its own, and the model turns it into words ("11 dogs.").
   Not a marker: a letter before an abbreviation or a number ("z. B.", "d. h.", "S. 3"), and a number
   that sentencex reads as part of the sentence (German ordinals: "1. Mai ist ein Feiertag.").
2. within a line, sentencex (Wikimedia's rule-based segmenter: abbreviation lists and rules for about
   300 languages, no model to download). Chosen over pysbd by measurement on tests/segment_gold.py
   (German and English: abbreviations, numbers, quotes, ellipses, lines without final punctuation):
   with step 1 both find the same boundaries there, and sentencex is maintained and ~30x faster
   (docs/benchmarks.md, bench/segmenters.py).

sentencex does not read the ellipsis character U+2026 as an end of sentence (it does "..."), so it is
shown a full stop in its place; and it cuts German compounds of abbreviations ("Dipl.-Ing. Hans"), so
it is shown a space for the hyphen after a full stop, its abbreviation list decides "Ing. Hans", a
cut right after a full stop with no space ("Dipl.|-Ing.") is dropped, and so is a cut after a compound
of abbreviations its list lacks ("Dipl.-Kfm. Schmidt"). It does not cut after a run of "?" and "!"
before "I" in English ("Really?! I had no idea."), so it is shown spaces for all but the run's last
mark. One character for one, so offsets do not move. In German it never cuts before a word that starts
with a digit ("bemalt ist. 3 Jungen"), which keeps "Abb. 3" whole though its list lacks "Abb.", "Kap.",
"Bd."; so a cut is added there after a word of letters (not "3." or "am 3. Mai") that its list does
not hold (it would cut after it before a capital letter), that has a vowel ("Nr.", "Hrsg." have none)
and is not a capitalised word of under four letters ("Abb.", "Kap.", "Tab."), a street ("Goethestr.
12") or one of a few abbreviations written before a number ("inkl.", "max.", "Ziff."). German only:
the capitalisation rule is German's, and English and French cut before a digit already.

3. a sentence without a final stop that runs into the next one on the same line ("... in der Hand Zwei
   braune Hunde rennen ...") is cut where the next sentence's first word is one that, in the run's own
   training text, starts sentences and almost never follows a word inside one ("Ein", "Zwei", "Der",
   not "Mann" or "Sie"): aiayn.data.sentence_starts learns them when the data is prepared (the run's
   data_report.json keeps them) and `segment(..., starts=...)` cuts there. No punctuation rule can, and
   the model turns two sentences run together into one garbled one. The cut needs a word that ends in
   a letter or digit before it (any punctuation is sentencex's to judge), one that the training text
   does end sentences with (not "to", "der", "à"), and at least three words on each side. A title in
   quotes stays whole ("den Film „Das Boot“ gesehen"); one without quotes, after a word that can end a
   sentence and with three words or more from its article on, is cut ("den Film | Das Boot gestern").
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import sentencex

from aiayn.data.sentence_starts import SentenceStarts

_STOP_DIGIT = re.compile(r"\.\s+\d")
# German: a word of letters (not "3.", not part of "z.B." or "Dipl.-Kfm."), a full stop, space, a digit
_DE_DIGIT_START = re.compile(r"(?<![\w.\-])([^\W\d_]+)\.\s+(?=\d)")
# German abbreviations written before a number that sentencex's list lacks and the rules let through
_DE_BEFORE_NUMBER = frozenset(
    "Abschn Aufl Ausg Bestnr Febr Jahrg Ziff Zimm abzgl exkl geb gem gest inkl insg max min mind od".split()
)
# a run-on cut (step 3) leaves at least this many words on each side
RUN_ON_MIN_WORDS = 3
# list markers (step 1): bullets alone, and enumerators (numbers of up to three digits, "1.2", one
# letter, a roman numeral up to 39) before "." or ")" or inside "(...)"
BULLETS = frozenset("-*+•◦▪▫‣⁃·–—●○■□►▸➢")


def _roman(n: int) -> str:
    """`n` in lower-case roman numerals."""
    out = ""
    for value, letters in ((10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i")):
        while n >= value:
            out, n = out + letters, n - value
    return out


_ROMAN = frozenset(_roman(n) for n in range(1, 40))


@dataclass(frozen=True)
class Segmented:
    """A text as `gaps[0] + sentences[0] + gaps[1] + ... + sentences[-1] + gaps[-1]`: every sentence
    stripped of surrounding whitespace, every gap whitespace and the list markers that start its lines
    (step 1 of the module docstring; len(gaps) == len(sentences) + 1)."""

    sentences: list[str]
    gaps: list[str]

    def join(self, translations: Sequence[str]) -> str:
        """The translations in the sentences' places, with the source's whitespace between them."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        out = [self.gaps[0]]
        for t, gap in zip(translations, self.gaps[1:]):
            out += [t, gap]
        return "".join(out)

    # A plain text is a document of aiayn.documents.flow: no sentence holds a tag to place, and its
    # rendering is the join, which may be called again (once for each of the n best).
    @property
    def tagged(self) -> list[int]:
        return []

    def render(self, translations: Sequence[str], links: Mapping[int, object] | None = None) -> str:
        return self.join(translations)


def _run_on_cuts(line: str, a: int, b: int, starts: SentenceStarts) -> list[int]:
    """Offsets in `line[a:b]` (one sentence as sentencex cut it) where a sentence without a final stop
    ends and the next begins (step 3 of the module docstring)."""
    words: list[tuple[int, str]] = []  # (offset in line, word)
    at = a
    for word in line[a:b].split():
        at = line.index(word, at)
        words.append((at, word))
        at += len(word)
    cuts, since = [], 0  # words since the last cut
    for i, (at, word) in enumerate(words):
        if (
            word in starts.words
            and since >= RUN_ON_MIN_WORDS
            and len(words) - i >= RUN_ON_MIN_WORDS
            and words[i - 1][1][-1].isalnum()
            and words[i - 1][1].lower() not in starts.never_last
        ):
            cuts.append(at)
            since = 0
        since += 1
    return cuts


def _spans_in_line(line: str, lang: str, starts: SentenceStarts | None = None) -> list[tuple[int, int]]:
    """(start, end) of each sentence of one line (no line break in it), as sentencex cuts it, whitespace
    around it left out."""
    # see the module docstring: one character for one, so offsets do not move
    shown = line.replace("\u2026", ".").replace(".-", ". ")
    if any(pair in shown for pair in ("?!", "!?", "??", "!!")):  # a character loop only for lines that need it
        shown = "".join(" " if c in "?!" and shown[i + 1 : i + 2] in ("?", "!") else c for i, c in enumerate(shown))
    cuts, at = [], 0
    # sentencex's chunks concatenate to its input, so they cut the original line at the same offsets;
    # the tail after the last chunk is kept too, in case a version drops text.
    for chunk in sentencex.segment(lang, shown):
        at += len(chunk)
        # a full stop with no space after it in the text ("Dipl.-Ing.", "Hallo.Welt") ends no sentence
        glued = not line[at - 1].isspace() and at < len(line) and not line[at].isspace()
        # the last word: a compound of abbreviations ("Dipl.-Kfm.") is one, listed or not
        words = line[max(0, at - 64) : at].split()
        compound = bool(words) and ".-" in words[-1] and words[-1].endswith(".")
        if at < len(line) and not (glued and chunk.rstrip().endswith(".")) and not compound:
            cuts.append(at)
    if lang == "de" and _STOP_DIGIT.search(line):  # see the module docstring; a regex scan only where needed
        cuts = sorted({*cuts, *(m.end() for m in _DE_DIGIT_START.finditer(line) if _ends_de_sentence(m[1]))})
    spans, at = [], 0
    for end in [*cuts, len(line)]:
        piece = line[at:end]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            spans.append((at + lead, at + lead + len(piece.strip())))
        at = end
    if not starts:
        return spans
    out = []
    for a, b in spans:
        for cut in _run_on_cuts(line, a, b, starts):
            out.append((a, len(line[a:cut].rstrip()) + a))
            a = cut
        out.append((a, b))
    return out


def _enumerator(body: str) -> bool:
    """Whether `body` is what a list marker numbers with: "1", "12", "1.2", "a", "iv", "IV"."""
    if not body.isascii():
        return False
    if all(part.isdigit() and len(part) <= 3 for part in body.split(".")):
        return True
    return (len(body) == 1 and body.isalpha()) or (body.lower() in _ROMAN and (body.islower() or body.isupper()))


def _marker_kind(word: str) -> str:
    """What list marker the word `word` is: "bullet", "paren" ("a)", "(1)"), "stop" ("1.", "iv."), or ""."""
    if word in BULLETS:
        return "bullet"
    if word.endswith(")") and _enumerator(word[1:-1] if word.startswith("(") else word[:-1]):
        return "paren"
    return "stop" if word.endswith(".") and _enumerator(word[:-1]) else ""


def _list_marker(line: str, lang: str) -> int:
    """Where `line`'s text begins after the list marker it starts with (step 1 of the module docstring),
    0 when it starts with none."""
    words = line.split(maxsplit=2)
    kind = _marker_kind(words[0]) if words else ""
    if not kind:
        return 0
    end = line.index(words[0]) + len(words[0])
    after = words[1] if len(words) > 1 else ""
    if kind == "stop" and after:
        if after[0].isdigit() or (after[0].isalpha() and after[1:2] == "."):
            return 0  # "S. 3", "z. B.", "d. h.": an abbreviation
        if words[0][0].isdigit() and all(b != end for _, b in _spans_in_line(line, lang)):
            return 0  # an ordinal inside the sentence, as sentencex reads it ("1. Mai ist ein Feiertag.")
    return end


@lru_cache(maxsize=4096)
def _ends_de_sentence(word: str) -> bool:
    """Whether a German word followed by a full stop and a number ends a sentence there (sentencex never
    cuts before a digit in German)."""
    if word in _DE_BEFORE_NUMBER or word.endswith("str") or not any(c in "aeiouyäöü" for c in word.lower()):
        return False  # listed, a street ("Goethestr. 12"), or no vowel ("Nr", "Hrsg", "zw"): an abbreviation
    if word[0].isupper() and len(word) < 4:
        return False  # a short capitalised word is abbreviation-like ("Abb. 3", "Kap. 3", "Tab. 2")
    # and what sentencex's own list says of the word before a capital letter
    return len(list(sentencex.segment("de", f"Das ist {word}. Der Rest"))) > 1


def segment(
    text: str,
    lang: str,
    lines: bool = True,
    starts: SentenceStarts | None = None,
    breaks: Collection[int] = (),
) -> Segmented:
    """`text` cut into sentences (see the module docstring); `lang` is an ISO 639-1 code ("de"), which
    picks sentencex's abbreviation list (an unknown code: its fallback chain, else no cut in a line).
    `lines` False: a line break is whitespace like any other (HTML text), so a sentence may hold one;
    then `breaks` are the offsets of the characters that end a line all the same (an HTML <br>'s space).
    `starts`: where a sentence without a final stop may run into the next (aiayn.data.sentence_starts)."""
    sentences: list[str] = []
    gaps: list[str] = []
    gap_start = 0  # where the whitespace before the next sentence begins
    line_start = 0
    if lines:
        pieces = text.splitlines(keepends=True)  # every line break Python knows
    else:  # HTML: sentencex is shown spaces for line breaks, one character for one, so offsets stay
        shown = "".join(" " if c.isspace() else c for c in text)
        ends = sorted({x + 1 for x in breaks if 0 <= x < len(text)})
        pieces = [shown[a:b] for a, b in zip([0, *ends], [*ends, len(text)])]
    for line in pieces:
        marker = _list_marker(line, lang)  # kept as it is, in the gap
        for a, b in _spans_in_line(line[marker:], lang, starts) if line[marker:].strip() else []:
            a, b = a + marker, b + marker
            gaps.append(text[gap_start : line_start + a])
            sentences.append(text[line_start + a : line_start + b])
            gap_start = line_start + b
        line_start += len(line)
    gaps.append(text[gap_start:])
    return Segmented(sentences, gaps)
