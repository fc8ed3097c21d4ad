"""Translate documents, not only lines: segment -> every sentence of the request in one batch ->
decode -> rejoin with the source's exact whitespace (issue #47; DESIGN.md "Documents").

The model was trained on single sentences; a paragraph handed to it whole loses sentences. The CLI
(`aiayn translate --document`, `--format html`) and the server (`aiayn serve`'s /translate,
/translate_file, the web page) go through this one module:

    docs = split_texts(["Ein Hund rennt. Eine Frau liest.\\n\\nZweiter Absatz."], "de")
    out = docs.join(translator.translate(docs.sentences))   # one call: one batch of all sentences

The split and the join are separate so that a caller decodes the sentences its own way (the server
through its batcher, asynchronously; the CLI through `Translator`). HTML lives in aiayn.decode.html.
`starts`, where a sentence without a final stop may run into the next, come from the run
(`run_sentence_starts`): what its training text taught (aiayn.data.segment, step 3).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from aiayn.data.segment import Segmented, SentenceStarts, segment


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


@dataclass(frozen=True)
class SplitTexts:
    """Several texts cut into sentences: `sentences` holds all of them in order, to decode at once."""

    parts: list[Segmented]

    @property
    def sentences(self) -> list[str]:
        return [s for p in self.parts for s in p.sentences]

    def join(self, translations: Sequence[str]) -> list[str]:
        """One translated text per source text, each with its source's layout."""
        out, at = [], 0
        for p in self.parts:
            n = len(p.sentences)
            out.append(p.join(translations[at : at + n]))
            at += n
        if at != len(translations):
            raise ValueError(f"{len(translations)} translations for {at} sentences")
        return out


def split_texts(
    texts: Sequence[str],
    lang: str,
    lines: bool = True,
    starts: SentenceStarts | None = None,
    breaks: Sequence[Collection[int]] | None = None,
) -> SplitTexts:
    """Each text cut into sentences (aiayn.data.segment) in the source language `lang`; `lines` False:
    line breaks are plain whitespace (HTML), and `breaks` (one collection per text) the offsets of the
    characters that end a line all the same (a <br>'s); `starts`: see the module docstring."""
    if breaks is None:
        return SplitTexts([segment(t, lang, lines, starts) for t in texts])
    return SplitTexts([segment(t, lang, lines, starts, b) for t, b in zip(texts, breaks, strict=True)])


def translate_texts(
    texts: Sequence[str],
    lang: str,
    translate: Callable[[list[str]], list[str]],
    starts: SentenceStarts | None = None,
) -> list[str]:
    """Texts (paragraphs, blank lines, any whitespace) translated sentence by sentence with one call of
    `translate` (a list of sentences -> their translations), rejoined in the source's layout."""
    docs = split_texts(texts, lang, starts=starts)
    sentences = docs.sentences
    return docs.join(translate(sentences) if sentences else [])
