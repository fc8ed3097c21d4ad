"""The formats a document comes in, by file name (`format_of`: what `aiayn translate --input NAME` and the
server's /translate_file read), and the document of aiayn.documents.flow that each is read into
(`document`).

    doc = document(text, format_of("page.html") or "text", "de", target="en")
    translate_now([doc], translator.translate, translator.align)[0]   # the page, translated
"""

from __future__ import annotations

from pathlib import PurePath

from aiayn.data.sentence_starts import SentenceStarts
from aiayn.documents.flow import Document
from aiayn.documents.html import HtmlDocument
from aiayn.documents.office import KINDS, OfficeDocument
from aiayn.documents.segment import segment

FORMATS = {".txt": "text", ".html": "html", ".htm": "html", ".docx": "docx", ".pptx": "pptx"}
OFFICE = frozenset(KINDS)  # read from bytes (zips of XML parts); the others from text


def format_of(name: str) -> str | None:
    """The format of a file by its suffix (any case), None for a suffix not in FORMATS."""
    return FORMATS.get(PurePath(name).suffix.lower())


def document(
    source: str | bytes, fmt: str, lang: str, target: str | None = None, starts: SentenceStarts | None = None
) -> Document:
    """`source` read as a document of format `fmt` ("text", "html", "docx", "pptx"): the bytes of an
    office file, the text of the others (UTF-8 decoded by the caller, who says how it failed). `lang`:
    the source language, to cut sentences by; `target`: the translation's, for the language marks of
    HTML and office files; `starts`: aiayn.data.sentence_starts. Raises HtmlError or OfficeError for
    what cannot be read whole."""
    if fmt in OFFICE:
        assert isinstance(source, bytes)
        return OfficeDocument(source, fmt, lang, target, starts)
    assert isinstance(source, str)
    if fmt == "html":
        return HtmlDocument(source, lang, target, starts)
    return segment(source, lang, starts=starts)
