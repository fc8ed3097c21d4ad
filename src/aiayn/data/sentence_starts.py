"""Where a run's training sentences start and end, as its source text says: learnt when the data is
prepared (`learn_sentence_starts`, kept in the run's data_report.json) and read back from a run
(`run_sentence_starts`). aiayn.documents.segment cuts a sentence without a final stop that runs into
the next one there (its step 3: "... in der Hand Zwei braune Hunde rennen ..."). No punctuation rule
can, and the model turns two sentences run together into one garbled one.

`words`: capitalised words that, in the training text, start sentences and almost never follow a word
inside one ("Ein", "Zwei", "Der"; not "Mann" or "Sie"). `never_last`: frequent words that the training
text almost never ends a sentence with ("to", "der", "à"): no cut is made after one.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

# what may close a sentence after its last word (a stop, quotes, brackets), for counting last words
_CLOSING = ".!?\u2026\"'\u201c\u201d\u2019\u00bb\u00ab)]"


@dataclass(frozen=True)
class SentenceStarts:
    """What a run's training source text says of where its sentences begin and end (see the module
    docstring). `words`: capitalised words that start sentences and almost never follow a word inside
    one ("Ein", "Zwei"; not "Mann" or "Sie"). `never_last`: frequent words, in lower case, that almost
    never end a sentence ("to", "der", "à"); no cut is made after one ("listened to | The Beatles")."""

    words: frozenset[str] = frozenset()
    never_last: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.words)

    def as_json(self) -> dict[str, list[str]]:
        return {"words": sorted(self.words), "never_last": sorted(self.never_last)}

    @classmethod
    def from_json(cls, value: object) -> SentenceStarts:
        """From `as_json`'s dict; anything else (a damaged report) is no starts."""
        if not isinstance(value, dict):
            return cls()

        def strings(key: str) -> frozenset[str]:
            v = value.get(key)
            return frozenset(w for w in v if isinstance(w, str)) if isinstance(v, list) else frozenset()

        return cls(strings("words"), strings("never_last"))


def learn_sentence_starts(
    sentences: Iterable[str],
    min_count: int = 20,
    inside_share: float = 0.005,
    last_min_count: int = 100,
    last_share: float = 0.002,
) -> SentenceStarts:
    """From `sentences` (a language's training text, one sentence or caption a line): the capitalised
    words that start at least `min_count` of them and follow a word that ends in a letter or digit,
    inside a line, at most `inside_share` times as often; and the words seen at least `last_min_count`
    times that end at most `last_share` of their lines (case and closing punctuation aside). A later
    sentence of a line follows a stop, not a letter, so its first word does not count as inside."""
    first: Counter[str] = Counter()
    inside: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    last: Counter[str] = Counter()
    for sentence in sentences:
        words = sentence.split()
        if not words:
            continue
        first[words[0]] += 1
        last[words[-1].rstrip(_CLOSING).lower()] += 1
        seen.update(w.rstrip(_CLOSING).lower() for w in words)
        for before, word in zip(words, words[1:]):
            if word[0].isupper() and before[-1].isalnum():  # only capitalised words can be starts
                inside[word] += 1
    wanted = (w for w, n in first.items() if n >= min_count and w.isalpha() and w[0].isupper())
    return SentenceStarts(
        frozenset(w for w in wanted if inside[w] <= inside_share * first[w]),
        # a word that ends in punctuation ("Mann,") is never cut after anyway
        frozenset(w for w, n in seen.items() if n >= last_min_count and w[-1:].isalnum() and last[w] <= last_share * n),
    )


def run_sentence_starts(run: str | os.PathLike, lang: str) -> SentenceStarts:
    """What the run learnt of where its training source sentences start (its data_report.json), if
    that text is in `lang`; none for a run whose directory has no report with them (a model from the
    Hub) or of another language: then no run-on cut is made."""
    from aiayn.checkpoint import find_in_run  # it loads torch: not for every importer of this module

    found = find_in_run(run, "data_report.json")
    if found is None:
        return SentenceStarts()
    try:
        report = json.loads(found.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return SentenceStarts()  # a damaged report costs the run-on cuts, not the translation
    if not isinstance(report, dict) or report.get("src_lang") != lang:
        return SentenceStarts()
    return SentenceStarts.from_json(report.get("sentence_starts"))
