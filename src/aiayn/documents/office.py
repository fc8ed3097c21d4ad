"""Office documents (.docx, .pptx): every paragraph's text translated, its formatting carried onto the
translation.

Both are zips of XML parts. Text lives in paragraphs (`p`) of runs (`r`): a run is formatting (`rPr`)
and text (`t`). Word puts tabs and line breaks inside runs (`w:tab`, `w:br`), PowerPoint puts line
breaks between them (`a:br`). A paragraph is translated as HTML is (aiayn.documents.html), through a
stand-in HTML paragraph, built as an lxml tree (never written out as text and parsed):
- the text of the runs with the paragraph's most common formatting is plain text;
- a run of other formatting (bold, italic, a colour...) is a `<span>`, placed on the words of the
  translation that its own words are linked to, as an inline HTML tag is;
- a Word hyperlink is an `<a>` around its runs (with its own most common formatting as plain);
  PowerPoint keeps its links in the run's formatting, so they follow their words as spans;
- tabs and line breaks are `<br>`s: the model reads a space there, and they are written in the place
  of the translation's space; a line break (Word's Shift+Enter, PowerPoint's a:br) ends a sentence, as
  an HTML <br> does, a tab does not (its `<br>` is marked as a space);
- whatever else stands in a paragraph (pictures, fields such as page and slide numbers, bookmarks,
  tracked changes, content controls) is a point kept as it is, untranslated.
The translations are written into the stand-in as into an HTML page (aiayn.documents.html's HtmlTree),
then the paragraph's runs are written anew from that tree: each piece of text gets the
formatting of the run it stands for. Paragraph properties (and PowerPoint's end-of-paragraph
formatting, kept last), tables, sections, styles, pictures and every other part of the zip are copied
unchanged.

Parts read: Word's body, headers, footers, footnotes, endnotes and comments; PowerPoint's slides and
speaker notes. Given the target language, the language marks that name the source language (Word's
`w:lang`, in those parts and in the styles' defaults; PowerPoint's `lang` and `altLang`) name the
target instead, with the region the target's locale has by default ("en" -> "en-US"): otherwise the
application spell-checks the translation as the source language. Spell-check marks (Word's
`w:proofErr`, PowerPoint's `err` and `dirty` flags, which do not count as formatting) and Word's cached
page-break positions are dropped or ignored: they describe the old text, and the application writes
them anew.

    doc = OfficeDocument(data, "docx", "de", "en")   # data: the file's bytes
    doc.sentences                                     # what to translate (and align: doc.tagged)
    out = doc.render(translations, links)             # the translated file's bytes (aiayn.documents.flow)
"""

from __future__ import annotations

import contextlib
import copy
import io
import locale
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiayn.data.sentence_starts import SentenceStarts
from aiayn.documents.flow import translate_now
from aiayn.documents.html import SPACE_BR, HtmlTree, parser_stop
from aiayn.documents.language import same_language
from aiayn.documents.tag_placement import Links

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
A = "http://schemas.openxmlformats.org/drawingml/2006/main"  # PowerPoint's text
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
MAX_XML_BYTES = 64 << 20  # the text parts, unpacked: a small zip can unpack to gigabytes
MAX_UNPACKED = 256 << 20  # every part, unpacked (pictures included)
_DROPPED = frozenset({f"{{{W}}}proofErr", f"{{{W}}}lastRenderedPageBreak"})
_NOT_FORMATTING = ("err", "dirty")  # PowerPoint's spell-check and layout flags on a run's rPr


def _w(tag: str) -> str:
    return f"{{{W}}}{tag}"


@dataclass(frozen=True)
class _Kind:
    """What differs between the formats: the namespace of p, r, rPr, t; the part that must be there and
    the parts that hold text; whether text needs xml:space; what stays at a paragraph's end."""

    name: str
    ns: str
    main: str
    folders: tuple[str, ...]  # text parts: <folder>/<prefix>*.xml
    prefixes: tuple[str, ...]
    preserve_space: bool
    last: tuple[str, ...] = ()
    styles: tuple[str, ...] = ()  # parts with default formatting, read for their language marks alone
    lang_tags: tuple[str, ...] = ()  # the elements that carry language marks
    lang_attributes: tuple[str, ...] = ()  # and their attributes that do

    def q(self, tag: str) -> str:
        return f"{{{self.ns}}}{tag}"

    def is_text_part(self, name: str) -> bool:
        folder, _, base = name.rpartition("/")
        return folder in self.folders and base.endswith(".xml") and base.startswith(self.prefixes)


KINDS = {
    "docx": _Kind(
        "docx",
        W,
        "word/document.xml",
        ("word",),
        ("document", "header", "footer", "footnotes", "endnotes", "comments"),
        True,
        styles=("word/styles.xml",),
        lang_tags=(f"{{{W}}}lang",),
        lang_attributes=(f"{{{W}}}val", f"{{{W}}}eastAsia", f"{{{W}}}bidi"),
    ),
    "pptx": _Kind(
        "pptx",
        A,
        "ppt/presentation.xml",
        ("ppt/slides", "ppt/notesSlides"),
        ("slide", "notesSlide"),
        False,
        ("endParaRPr",),
        lang_tags=(f"{{{A}}}rPr", f"{{{A}}}endParaRPr", f"{{{A}}}defRPr"),
        lang_attributes=("lang", "altLang"),
    ),
}


def office_language(lang: str) -> str:
    """The tag Word and PowerPoint expect for the language `lang` ("de-AT" as it is; "en" -> "en-US"):
    a language with the region its locale has by default (Python's locale table), as those applications
    pick proofing tools by language and region."""
    if "-" in lang or "_" in lang:
        return lang.replace("_", "-")
    name = locale.normalize(lang).split(".")[0]  # "en_US", or `lang` itself when the table has no entry
    language, _, region = name.partition("_")
    # AA is a private-use code (the table's "ar_AA"), not a region
    if language.lower() == lang.lower() and len(region) == 2 and region.isalpha() and region != "AA":
        return f"{lang.lower()}-{region.upper()}"
    return lang


class OfficeError(ValueError):
    """The upload is not a document of its kind that can be read."""


def _rpr_key(run: Any, kind: _Kind) -> bytes:
    """A run's formatting, as bytes to compare (empty: the paragraph style's own)."""
    from lxml import etree

    rpr = run.find(kind.q("rPr"))
    if rpr is None:
        return b""
    if any(a in rpr.attrib for a in _NOT_FORMATTING):
        rpr = copy.deepcopy(rpr)
        for a in _NOT_FORMATTING:
            rpr.attrib.pop(a, None)
    return etree.tostring(rpr, method="c14n")


class _Paragraph:
    """One paragraph's stand-in HTML and what each of its `data-k` numbers stands for: a run (its
    formatting), a point (elements kept as they are) or a hyperlink."""

    def __init__(self, p: Any, in_field: int, kind: _Kind) -> None:
        from lxml import etree

        self.p, self.kind = p, kind
        self.things: list[Any] = []
        self.has_text = False
        self.in_field = in_field  # Word fields open at the start (a table of contents spans paragraphs)
        self.last = [c for c in p if c.tag in {kind.q(t) for t in kind.last}]  # PowerPoint's endParaRPr
        self.html = etree.Element("p")  # the stand-in, built as the tree aiayn.documents.html reads
        self.plain = self._inline([c for c in p if c.tag != kind.q("pPr") and c not in self.last], self.html)

    def _add(self, thing: Any) -> int:
        self.things.append(thing)
        return len(self.things) - 1

    def _pieces(self, children: list[Any]) -> list[tuple[str, Any]]:
        """("text", (run, text, its formatting)) | ("break" | "tab" | "point", [elements]) | ("link", hyperlink),
        in order. A Word field (fldChar begin ... end: a page number, a table of contents) is one point,
        untranslated."""
        q = self.kind.q
        pieces: list[tuple[str, Any]] = []
        for child in children:
            if child.tag in _DROPPED:
                continue
            chars = child.findall(_w("fldChar")) if child.tag == _w("r") else []
            if self.in_field or chars:
                for c in chars:
                    self.in_field += {"begin": 1, "end": -1}.get(c.get(_w("fldCharType"), ""), 0)
                self.in_field = max(self.in_field, 0)
                if pieces and pieces[-1][0] == "point" and pieces[-1][1][-1].getnext() is child:
                    pieces[-1][1].append(child)  # the field's runs stay one point
                else:
                    pieces.append(("point", [child]))
            elif child.tag == q("r") and all(c.tag in _RUN_PARTS for c in child):
                for c in child:
                    if c.tag == q("t"):
                        if c.text:
                            pieces.append(("text", (child, c.text, _rpr_key(child, self.kind))))
                    elif c.tag in _SPACES and c.get(_w("type"), "textWrapping") == "textWrapping":
                        # read as a space, written in its place; a line break also ends its sentence
                        pieces.append((_SPACES[c.tag], [_run_of(child, c)]))
                    elif c.tag != q("rPr") and c.tag not in _DROPPED:
                        pieces.append(("point", [_run_of(child, c)]))  # a page break, a symbol, a hyphen
            elif child.tag == f"{{{A}}}br":  # PowerPoint's line break, between runs
                pieces.append(("break", [child]))
            elif child.tag == _w("hyperlink"):
                pieces.append(("link", child))
            else:  # a picture, a footnote mark, a bookmark, a tracked change, a content control, a slide number
                pieces.append(("point", [child]))
        return pieces

    def _inline(self, children: list[Any], into: Any) -> Any:
        """The stand-in of `children` (of the paragraph or of a hyperlink) appended to the element `into`:
        text of their most common formatting plain, text of any other in spans; returns a run of that
        most common formatting."""
        from lxml import etree

        pieces = self._pieces(children)
        chars: dict[bytes, int] = {}
        first: dict[bytes, Any] = {}
        for kind, what in pieces:
            if kind == "text":
                run, text, key = what
                chars[key] = chars.get(key, 0) + len(text)
                first.setdefault(key, run)
        plain = max(chars, key=lambda k: chars[k]) if chars else b""
        span: tuple[bytes | None, Any] | None = None  # (formatting, element) of the span open at the end of `into`
        for kind, what in pieces:
            fmt = what[2] if kind == "text" else None
            if span is not None and fmt != span[0]:
                span = None
            if kind == "text":
                self.has_text = self.has_text or bool(what[1].strip())
                if fmt != plain and span is None:
                    span = (fmt, etree.SubElement(into, "span", {"data-k": str(self._add(what[0]))}))
                _append_text(span[1] if span is not None else into, what[1])
            elif kind == "link":
                a = etree.SubElement(into, "a")
                link_plain = self._inline(list(what), a)
                a.set("data-k", str(self._add(what)))
                a.set("data-plain", str(self._add(link_plain)))
            else:
                el = etree.SubElement(into, "img" if kind == "point" else "br", {"data-k": str(self._add(what))})
                if kind == "tab":
                    el.set(SPACE_BR, "")
        return first.get(plain)

    def rebuild(self) -> None:
        """Write the paragraph's runs anew from its stand-in, translated in place."""
        for child in [c for c in self.p if c.tag != self.kind.q("pPr")]:
            self.p.remove(child)
        self._fill(self.p, self.html, self.plain)
        self.p.extend(self.last)

    def _fill(self, parent: Any, el: Any, plain: Any) -> None:
        """Append to `parent` the runs of `el`'s text and children; text outside a span has `plain`'s
        formatting."""
        self._text(parent, plain, el.text)
        for child in el:
            thing = self.things[int(child.get("data-k"))]
            if child.tag == "span":
                self._fill(parent, child, thing)
            elif child.tag == "a":
                for c in list(thing):
                    thing.remove(c)
                parent.append(thing)
                self._fill(thing, child, self.things[int(child.get("data-plain"))])
            else:
                parent.extend(thing)
            self._text(parent, plain, child.tail)

    def _text(self, parent: Any, like: Any, text: str | None) -> None:
        """A run of `like`'s formatting (None: the style's own) holding `text`, appended to `parent`."""
        from lxml import etree

        if not text:
            return
        q = self.kind.q
        run = _run_like(like, q)
        parent.append(run)
        t = etree.SubElement(run, q("t"))
        # a line end in a translation is one "\n", as an XML or HTML parser reads "\r\n" and "\r"
        t.text = text.replace("\r\n", "\n").replace("\r", "\n")
        if self.kind.preserve_space:
            t.set(XML_SPACE, "preserve")


def _append_text(el: Any, text: str) -> None:
    """`text` added at the end of what the element `el` holds: its text, or its last child's tail."""
    if len(el):
        el[-1].tail = (el[-1].tail or "") + text
    else:
        el.text = (el.text or "") + text


# a line break, a tab: a <br> in the stand-in, that ends a sentence or not
_SPACES = {_w("tab"): "tab", _w("ptab"): "tab", _w("br"): "break", _w("cr"): "break"}
_RUN_PARTS = frozenset(
    [_w(t) for t in "rPr t tab br cr noBreakHyphen softHyphen lastRenderedPageBreak ptab sym".split()]
    + [f"{{{A}}}{t}" for t in ("rPr", "t")]
)


def _run_like(like: Any, q: Callable[[str], str]) -> Any:
    """A new, empty run with `like`'s formatting (None: the style's own)."""
    from lxml import etree

    run = etree.Element(q("r"))
    rpr = None if like is None else like.find(q("rPr"))
    if rpr is not None:
        run.append(copy.deepcopy(rpr))
    return run


def _run_of(run: Any, child: Any) -> Any:
    """A Word run of `run`'s formatting that holds `child` alone (a tab or a break, kept where it was)."""
    new = _run_like(run, _w)
    new.append(copy.deepcopy(child))
    return new


class OfficeDocument:
    """A .docx or .pptx (`kind`), read: a document of aiayn.documents.flow. `page` is the stand-in HTML of
    every paragraph with text (an HtmlTree: its sentences to translate, its tagged ones to align);
    `render(translations, links)` writes them into it and the paragraphs' runs anew from it, and gives
    the translated file's bytes."""

    def __init__(
        self, data: bytes, kind: str, lang: str, target: str | None = None, starts: SentenceStarts | None = None
    ) -> None:
        """`lang`: the source language; `target`: the translation's, given to the language marks that name
        `lang` (None: they are left as they are); `starts`: as HtmlTree's."""
        from lxml import etree

        self.kind = k = KINDS[kind]
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
            names = self.zip.namelist()
        except (zipfile.BadZipFile, ValueError) as e:
            raise OfficeError(f"not a .{k.name} (a zip archive): {e}") from None
        if k.main not in names:
            raise OfficeError(f"not a .{k.name}: the archive has no {k.main}")
        self.parts = [n for n in names if k.is_text_part(n)]
        styles = [n for n in k.styles if n in names] if target is not None else []
        # zipfile reads no more than an entry's stated size (and then finds its checksum wrong)
        if sum(self.zip.getinfo(n).file_size for n in self.parts + styles) > MAX_XML_BYTES:
            raise OfficeError(f"the document's text parts unpack to over {MAX_XML_BYTES >> 20} MiB")
        if sum(info.file_size for info in self.zip.infolist()) > MAX_UNPACKED:
            raise OfficeError(f"the document unpacks to over {MAX_UNPACKED >> 20} MiB")
        # no entity expansion, no network: an upload's XML is not trusted
        parser = etree.XMLParser(resolve_entities=False, no_network=True, remove_blank_text=False)
        self.lang, self.target = lang, target
        self.trees: dict[str, Any] = {}
        self.paragraphs: list[_Paragraph] = []
        for name in styles:
            # only its language marks are wanted: a styles part that cannot be read is copied as it is
            with contextlib.suppress(OfficeError):
                self.trees[name] = self._read(name, parser)
        for name in self.parts:
            self.trees[name] = root = self._read(name, parser)
            in_field = 0
            for p in list(root.iter(k.q("p"))):
                para = _Paragraph(p, in_field, k)
                in_field = para.in_field
                if para.has_text:
                    self.paragraphs.append(para)
        root = etree.Element("div")
        root.extend(p.html for p in self.paragraphs)
        self.page = HtmlTree(root, lang, starts=starts)

    @property
    def sentences(self) -> list[str]:
        return self.page.sentences

    @property
    def tagged(self) -> list[int]:
        return self.page.tagged

    def _read(self, name: str, parser: Any) -> Any:
        from lxml import etree

        try:
            return etree.fromstring(self.zip.read(name), parser=parser)
        except etree.XMLSyntaxError as e:
            # it stops at the first error (a limit too: elements nested more than 256 deep), never reads in part
            last = e.error_log.last_error
            why = parser_stop(last.message if last is not None else str(e.msg))
            raise OfficeError(f"{name} cannot be read past line {e.lineno}, column {e.position[1]} ({why})") from None
        except (zipfile.BadZipFile, ValueError, NotImplementedError, RuntimeError) as e:
            # RuntimeError: an encrypted entry; NotImplementedError: a compression zipfile lacks
            raise OfficeError(f"{name} cannot be read: {e}") from None

    def _retag(self) -> set[str]:
        """The language marks that name the source language name the target (see the module docstring);
        the names of the parts changed."""
        changed: set[str] = set()
        if self.target is None:
            return changed
        tag = office_language(self.target)
        wanted = set(self.kind.lang_tags)
        for part, root in self.trees.items():
            for el in root.iter():
                if el.tag in wanted:
                    for name in self.kind.lang_attributes:
                        if same_language(el.get(name) or "", self.lang):
                            el.set(name, tag)
                            changed.add(part)
        return changed

    def render(self, translations: Sequence[str], links: Mapping[int, Links] | None = None) -> bytes:
        """The translated file: `translations` (one per sentence) and `links` written into the stand-in
        (HtmlTree.fill), each paragraph's runs written anew from it. Call once."""
        from lxml import etree

        self.page.fill(translations, links)
        for para in self.paragraphs:
            para.rebuild()
        # the text parts are written anew; a styles part only where a language mark changed
        written = set(self.parts) | self._retag()
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as z:
            for info in self.zip.infolist():
                if info.filename in written:
                    tree = self.trees[info.filename]
                    z.writestr(info, etree.tostring(tree, xml_declaration=True, encoding="UTF-8", standalone=True))
                else:
                    try:
                        z.writestr(info, self.zip.read(info.filename))
                    except (zipfile.BadZipFile, NotImplementedError, RuntimeError) as e:
                        raise OfficeError(f"{info.filename} cannot be read: {e}") from None
        return out.getvalue()


def translate_office(
    data: bytes,
    kind: str,
    lang: str,
    translate: Callable[[list[str]], list[str]],
    align: Callable[[list[str], list[str]], Sequence[Links]] | None = None,
    target: str | None = None,
    starts: SentenceStarts | None = None,
) -> bytes:
    """The .docx or .pptx `data` with its text translated (see the module docstring): every sentence in
    one call of `translate`, the sentences that hold formatting aligned in one call of `align` (as
    translate_html); `target`, the translation's language, for the language marks; `starts`: as
    HtmlTree's."""
    return translate_now([OfficeDocument(data, kind, lang, target, starts)], translate, align)[0]
