"""Translate HTML: the text of each block with its inline markup carried onto the translation.

    translate_html('<p>Ein Hund <b>rennt</b>. Eine Frau liest.</p>', "de", translator.translate, translator.align)
    # '<p>A dog <b>runs</b>. A woman reads.</p>'

Parsed with lxml's HTML parser (libxml2), never with regular expressions; a document it cannot read
whole (nested deeper than its limit) is refused with HtmlError, never translated in part.
LibreTranslate (and argos-translate-html) translate text node by node, so "<b>rennt</b>" is
translated without the sentence around it. Here every run of inline content (text, b, i, a, span,
em, strong, br ..., up to the next block element) is one text: its plain text is cut into sentences
(a <br> ends one, as a line break does in text) and translated with all other sentences of the
document in one call (aiayn.documents.flow), so each sentence is translated exactly as it would
be without markup.

The inline tags are then put back (aiayn.documents.tag_placement), as Bergamot projects them, through a
word alignment when the caller gives one (`align`: aiayn.decode.align, read from the model's
encoder-decoder attention): a tag around whole words of one sentence covers the words of the
translation they are linked to, from the first to the last ("Ein <b>Mann</b> fährt Fahrrad." -> "A
<b>man</b> is riding a bicycle."). Other tags (around part of a word, across sentences, without an
alignment) map by position: each start and end in the source text goes to the same relative place in
the sentence's translation, snapped to a word boundary. Tags nest as they did and every tag and
attribute stays (same multiset). Where the links put two sibling elements the other way round, they
change places ("Er hat <b>das Buch</b> <i>gelesen</i>." -> "He <i>read</i> <b>the book</b>.");
otherwise tags keep document order, and the later of two reordered ones can come out empty (not
siblings; a br, img or comment among or inside them; or a parent holding what is not inline text).
Not translated: script, style, code, pre, textarea, template, comments, and what the page marks as
not to translate, HTML's `translate="no"` and the `notranslate` class that Google's and DeepL's
translators honour (an element, its content, its alt and title, its descendants' whatever they say):
one inside a sentence stays where it maps to, its content as it was. Attributes other than alt and
title are not translated (those are, as texts of their own). A `lang` or `xml:lang` that names the
source language is rewritten to the target language, when the caller names it, so that the page
says what language it now holds (for screen readers, spell checkers, hyphenation and fonts); not on
what is not translated, nor inside it.
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Callable, Mapping, Sequence
from html.parser import HTMLParser
from typing import Any

from aiayn.data.sentence_starts import SentenceStarts
from aiayn.data.tokenizer import replace_lone_surrogates
from aiayn.documents.flow import translate_now
from aiayn.documents.language import same_language
from aiayn.documents.segment import Segmented, segment
from aiayn.documents.tag_placement import Links, Run, put_back, sentence_at, sentence_spans

INLINE = frozenset(
    "a abbr b bdi bdo br cite data del dfn em font i img ins kbd label mark q s samp small span strong sub sup "
    "time u var wbr".split()
)
KEEP = frozenset("script style code pre textarea template".split())  # their content is never translated
ATTRIBUTES = ("alt", "title")
LANG_ATTRIBUTES = ("lang", "{http://www.w3.org/XML/1998/namespace}lang", "xml:lang")
# a <br> with this attribute is a space inside its sentence, not a line end: an office document's tab
# in its stand-in HTML (aiayn.documents.office)
SPACE_BR = "data-space"
_CONTROL = {c: "\ufffd" for c in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0xFFFE, 0xFFFF]}
_CONTROL_OUT = {c: " " if chr(c).isspace() else "\ufffd" for c in _CONTROL}


def _is_inline(el: Any) -> bool:
    return isinstance(el.tag, str) and el.tag.lower() in INLINE


def _kept(el: Any) -> bool:
    """An element whose content is not translated: a KEEP one, or one the page marks so (HTML's
    translate="no", the notranslate class)."""
    return el.tag.lower() in KEEP or _marked_no(el)


def _marked_no(el: Any) -> bool:
    return (el.get("translate") or "").strip().lower() == "no" or "notranslate" in (el.get("class") or "").split()


def _runs(root: Any) -> list[Run]:
    """Every run of inline text under `root` (KEEP elements and comments are opaque)."""
    runs: list[Run] = []

    def new_run(slot: tuple[Any, str]) -> Run:
        run = Run()
        runs.append(run)
        add_text(run, slot)
        return run

    def add_text(run: Run, slot: tuple[Any, str]) -> None:
        el, which = slot
        run.slots.append(slot)
        run.events.append(("text", slot))
        run.text += getattr(el, which) or ""

    def inline(run: Run, el: Any) -> None:
        run.starts[id(el)] = len(run.text)
        run.events.append(("start", el))
        if not _kept(el):  # <code> (or translate="no") inside a sentence: a point, its content kept
            add_text(run, (el, "text"))
            for child in el:
                child_in_run(run, child)
        run.ends[id(el)] = len(run.text)
        run.events.append(("end", el))
        if el.tag.lower() == "br":  # a line break separates words: a space the model reads, not written back
            run.synthetic.add(len(run.text))
            if el.get(SPACE_BR) is None:  # and ends a sentence, as "\n" does in text
                run.breaks.append(len(run.text))
            run.text += " "

    def child_in_run(run: Run, child: Any) -> Run:
        """A child inside a run: inline ones join it; anything else ends it and its tail starts a new one."""
        if _is_inline(child) or not isinstance(child.tag, str) or child.tag.lower() == "code":
            if isinstance(child.tag, str):
                inline(run, child)
            else:  # a comment or processing instruction: a point in the text
                run.starts[id(child)] = run.ends[id(child)] = len(run.text)
                run.events += [("start", child), ("end", child)]
            add_text(run, (child, "tail"))
            return run
        block(child)
        return new_run((child, "tail"))

    def block(el: Any) -> None:
        if not isinstance(el.tag, str) or _kept(el):
            return
        run = new_run((el, "text"))
        for child in el:
            run = child_in_run(run, child)

    block(root)
    return [r for r in runs if r.text.strip()]


class _Start(Exception):
    """Raised by `_FirstTag` as soon as it knows."""


class _FirstTag(HTMLParser):
    """Reads up to the first tag or text: a page starts with a doctype or an html, head or body tag
    (after blanks, comments and an XML declaration); anything else is a fragment."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.doctype = False
        self.page = False

    def handle_decl(self, decl: str) -> None:
        self.doctype = self.page = decl.lower().startswith("doctype")
        raise _Start

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.page = tag in ("html", "head", "body")
        raise _Start

    def handle_data(self, data: str) -> None:
        if data.strip():
            raise _Start


def _page_or_fragment(document: str) -> tuple[bool, bool]:
    """(a whole page, it has a doctype): libxml2 adds an HTML 4 doctype to a page without one."""
    first = _FirstTag()
    with contextlib.suppress(_Start):
        first.feed(document)
    return first.page, first.doctype


class HtmlError(ValueError):
    """An HTML document that cannot be read whole: refused, never translated in part."""


def parser_stop(message: str) -> str:
    """libxml2's message for a limit it stopped at, without its advice to the programmer (XML_PARSE_HUGE)."""
    head, advice, _ = message.strip().partition("XML_PARSE_HUGE")
    return head.rsplit(",", 1)[0] if advice else head


def _read_whole(parser: Any) -> None:
    """Raise HtmlError where libxml2 stopped reading: its HTML parser recovers from broken markup, but at
    a limit (elements nested more than 256 deep, a text node over 10 MB) it stops and returns what it read so
    far, and the rest of the text would be lost without a word."""
    from lxml import etree

    for e in parser.error_log:
        if e.level == etree.ErrorLevels.FATAL:
            raise HtmlError(
                f"cannot read the HTML past line {e.line}, column {e.column} ({parser_stop(e.message)}): "
                "the text from there on would be lost"
            )


class HtmlTree:
    """An HTML tree (lxml) with the sentences to translate (`sentences`: every block's, then every alt's
    and title's); `fill(translations, links)` writes the translations into the tree. An HTML document
    parses its text into one, an office document builds its stand-in paragraphs as one."""

    def __init__(self, root: Any, lang: str, target: str | None = None, starts: SentenceStarts | None = None) -> None:
        """`lang`: the source language (to cut sentences by); `target`: the translation's, which `lang`
        attributes naming `lang` are given (None: they are left as they are); `starts`: the words a
        sentence without a final stop may run into the next (aiayn.data.sentence_starts)."""
        self.root = root
        self.runs = _runs(root)
        self.target = target
        elements = [el for el in root.iter() if isinstance(el.tag, str)]
        marked = [el for el in elements if _marked_no(el)]
        # translate="no" covers the element's own alt and title, and its descendants'
        untouched = {id(x) for el in marked for x in el.iter()}
        self.attrs = [
            (el, name)
            for el in elements
            if id(el) not in untouched
            for name in ATTRIBUTES
            if (el.get(name) or "").strip()
        ]
        # nor is the language of what is kept as it is (pre, code, a marked element... and what they hold)
        kept = {id(x) for el in elements if _kept(el) for x in el.iter()}
        self.langs = [
            (el, name)
            for el in elements
            if id(el) not in kept
            for name in LANG_ATTRIBUTES
            if same_language(el.get(name) or "", lang)
        ]
        texts = [r.text for r in self.runs] + [el.get(name) for el, name in self.attrs]
        breaks = [r.breaks for r in self.runs] + [[] for _ in self.attrs]
        self.parts: list[Segmented] = [segment(t, lang, False, starts, b) for t, b in zip(texts, breaks, strict=True)]
        # HTML whitespace (line breaks and indentation inside a paragraph) is one space to the model
        self.sentences = [" ".join(x.split()) for p in self.parts for x in p.sentences]

    @property
    def tagged(self) -> list[int]:
        """The sentences (indices into `sentences`) that hold an inline element: the ones `fill` places
        tags in through word links, when it is given them."""
        out, at = [], 0
        for run, part in zip(self.runs, self.parts):
            spans = sentence_spans(part.gaps, part.sentences)
            holding = set()
            for key, x0 in run.starts.items():
                k = sentence_at(spans, x0)
                if k is not None and x0 < run.ends[key] <= spans[k][1]:
                    holding.add(k)
            out += [at + k for k in sorted(holding)]
            at += len(spans)
        return out

    def fill(self, translations: Sequence[str], links: Mapping[int, Links] | None = None) -> None:
        """`translations` (one per sentence) written into the tree; `links`: sentence index -> its word
        links (aiayn.decode.align; see `tagged`), to place tags by. Call once."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        # a model may write what XML cannot hold; the words stay the words the links count
        translations = [replace_lone_surrogates(t.translate(_CONTROL_OUT)) for t in translations]
        links = links or {}
        at = 0
        for i, part in enumerate(self.parts):
            n = len(part.sentences)
            mine = translations[at : at + n]
            if i < len(self.runs):
                put_back(self.runs[i], part, part.join(mine), mine, [links.get(k) for k in range(at, at + n)])
            else:
                el, name = self.attrs[i - len(self.runs)]
                el.set(name, part.join(mine))
            at += n
        if self.target:
            for el, name in self.langs:
                el.set(name, self.target)


class HtmlDocument(HtmlTree):
    """One HTML document or fragment, parsed, with the sentences to translate; `render(translations,
    links)` gives the translated HTML (a document of aiayn.documents.flow)."""

    def __init__(
        self, document: str, lang: str, target: str | None = None, starts: SentenceStarts | None = None
    ) -> None:
        """`lang`, `target`, `starts`: as HtmlTree's."""
        from lxml import html as lxml_html

        # libxml2 refuses the control characters XML forbids; HTML5 parsers read them as U+FFFD. A lone
        # surrogate would cut the text short there: replaced as every input line is (replace_lone_surrogates)
        document = replace_lone_surrogates(document.translate(_CONTROL))
        self.whole, self.has_doctype = _page_or_fragment(document)
        # bytes, so that an XHTML page's `<?xml ... encoding=...?>` is read (lxml refuses it in a str)
        data, parser = document.encode("utf-8"), lxml_html.HTMLParser(encoding="utf-8")
        if self.whole:
            root = lxml_html.document_fromstring(data, parser=parser)
        else:
            root = lxml_html.fragment_fromstring(data, create_parent="div", parser=parser)
        _read_whole(parser)
        super().__init__(root, lang, target, starts)

    def render(self, translations: Sequence[str], links: Mapping[int, Links] | None = None) -> str:
        """The document with `translations` in place (`fill`), as HTML. Call once."""
        from lxml import etree
        from lxml import html as lxml_html

        self.fill(translations, links)
        if self.whole:
            # comments (and an XHTML page's XML declaration, a comment to HTML) before <html> are kept
            first = list(self.root.itersiblings(preceding=True))[::-1]
            before = "".join(etree.tostring(x, method="html", encoding="unicode") for x in first)
            doctype = self.root.getroottree().docinfo.doctype + "\n" if self.has_doctype else ""
            return doctype + before + etree.tostring(self.root, method="html", encoding="unicode")
        # the fragment's leading text is the wrapper's, not a node's: escaped here as the serialiser escapes
        # every other text ("&lt;b&gt;" in the source must not come back as a live tag)
        inner = html.escape(self.root.text or "", quote=False)
        return inner + "".join(lxml_html.tostring(c, encoding="unicode", method="html") for c in self.root)


def translate_html(
    document: str,
    lang: str,
    translate: Callable[[list[str]], list[str]],
    align: Callable[[list[str], list[str]], Sequence[Links]] | None = None,
    target: str | None = None,
    starts: SentenceStarts | None = None,
) -> str:
    """`document` (a whole page or a fragment) with its text translated (see the module docstring):
    every sentence of every block, and every alt and title, decoded in one call of `translate`; the
    sentences that hold tags aligned with their translations in one call of `align` (sources,
    translations -> word links, e.g. Translator.align), or tags placed by position without it. `target`:
    the translation's language, written into the `lang` attributes that name `lang`; `starts`: see
    HtmlTree."""
    return translate_now([HtmlDocument(document, lang, target, starts)], translate, align)[0]
