"""Parallel text in the formats users have: translation memories (TMX), localisation files (XLIFF 1.2 and
2.0), spreadsheets (TSV, CSV with named or numbered columns) and JSON lines, each read as a stream of
(source, target) pairs, never the whole file in memory (lxml's iterparse, the csv module, one JSON
object a line). Plain or gzipped files alike (gzip by its magic bytes).

    for line, src, tgt in read_pairs(Path("memory.tmx"), "tmx", "de", "en"): ...

A segment's own line breaks become spaces (a pair is one line of each side downstream); inline markup
of TMX and XLIFF keeps its text (<hi>, <g>, <pc>, <mrk>) and drops native codes (<bpt>, <ept>, <ph>,
<it>, <ut>, <sub>). Languages match by their primary subtag (de-DE is de). What cannot be read is one
DataError line naming the file and the line: XML that is not well-formed, a row without its column, a
JSON line that is not an object with both languages.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from lxml import etree

from aiayn.data.errors import DataError
from aiayn.data.tokenizer import replace_lone_surrogates

FORMATS = ("lines", "tsv", "csv", "tmx", "xliff", "jsonl")
_SUFFIXES = {
    ".tsv": "tsv",
    ".tab": "tsv",
    ".csv": "csv",
    ".tmx": "tmx",
    ".xlf": "xliff",
    ".xliff": "xliff",
    ".sdlxliff": "xliff",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
# inline elements whose content is native markup (a tag of the original document), not text
_NATIVE_CODES = {"bpt", "ept", "ph", "it", "ut", "sub", "bx", "ex", "x", "sc", "ec", "sm", "em", "cp"}


def format_of(path: Path) -> str:
    """A file's format by its name (a .gz suffix aside): tmx, xliff, tsv, csv or jsonl; else lines."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    return _SUFFIXES.get(suffixes[-1], "lines") if suffixes else "lines"


def primary(lang: str) -> str:
    """A language tag's primary subtag, lower case: de-DE, de_AT and DE are de."""
    return lang.replace("_", "-").split("-")[0].lower()


def open_binary(path: Path) -> tuple[IO[bytes], IO[bytes]]:
    """(the decompressed stream, the raw file whose tell() is the bytes read so far)."""
    if not path.is_file():
        raise DataError(f"file not found: {path}")
    raw = open(path, "rb")
    gz = raw.read(2) == b"\x1f\x8b"
    raw.seek(0)
    return (gzip.GzipFile(fileobj=raw) if gz else raw), raw  # type: ignore[return-value]


def one_line(text: str) -> str:
    """A segment's text with its line breaks (any that str.splitlines knows) made spaces, and a lone
    surrogate (a JSON escape can make one) replaced: a pair is one line of UTF-8 each side downstream."""
    return replace_lone_surrogates(" ".join(text.splitlines())) if text else ""


def read_pairs(
    path: Path, fmt: str, src_lang: str, tgt_lang: str, columns: Any = None, position: list[int] | None = None
) -> Iterator[tuple[int, str, str]]:
    """The (line, source, target) of each pair of one file of format `fmt` (not `lines`: a pair of files
    is read by aiayn.data.io): `line` the file's line (from 1) where the pair is (its row, JSON line, or
    the start of its unit). `columns`: TSV/CSV column names (a header row) or 0-based numbers, or JSON
    keys, as [source, target]; default: the language codes (a header naming them), else columns 0 and
    1. `position[0]` follows the bytes of the file read so far."""
    readers = {"tsv": _delimited, "csv": _delimited, "tmx": _tmx, "xliff": _xliff, "jsonl": _jsonl}
    if fmt not in readers:
        raise DataError(f"{path}: unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    stream, raw = open_binary(path)
    try:
        for found in readers[fmt](path, stream, fmt, primary(src_lang), primary(tgt_lang), columns):
            if position is not None:
                position[0] = raw.tell()
            yield found
    finally:
        stream.close()
        raw.close()


# -- TSV and CSV ------------------------------------------------------------------------------------


def _delimited(
    path: Path, stream: IO[bytes], fmt: str, src: str, tgt: str, columns: Any
) -> Iterator[tuple[int, str, str]]:
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")  # a spreadsheet's BOM is no header text
    rows = csv.reader(text, delimiter="\t", quoting=csv.QUOTE_NONE) if fmt == "tsv" else csv.reader(text)
    try:
        first = next(rows, None)
        if first is None:
            return
        cols, header = _columns(path, first, src, tgt, columns)
        if not header:
            yield (rows.line_num, *_row(path, rows.line_num, first, cols))
        for row in rows:
            if row:  # a blank line between rows is no pair (a pair with an empty side is a row "a<TAB>")
                yield (rows.line_num, *_row(path, rows.line_num, row, cols))
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: line {rows.line_num + 1} is not valid UTF-8 ({e.reason})") from None
    except csv.Error as e:
        raise DataError(f"{path}: line {rows.line_num}: {e}") from None


def _columns(path: Path, first: list[str], src: str, tgt: str, columns: Any) -> tuple[tuple[int, int], bool]:
    """(source column, target column) and whether the first row is a header."""
    if columns is None:
        names = [primary(c.strip()) for c in first]
        if src in names and tgt in names:  # a header naming the languages
            return (names.index(src), names.index(tgt)), True
        return (0, 1), False
    if not isinstance(columns, (list, tuple)) or len(columns) != 2:
        raise DataError(f"{path}: columns must be [source, target] (names of a header row, or numbers from 0)")
    if all(isinstance(c, int) and c >= 0 for c in columns):
        return (columns[0], columns[1]), False
    header = [c.strip() for c in first]
    missing = [c for c in columns if str(c) not in header]
    if missing:
        raise DataError(f"{path}: the header row {header} has no column {', '.join(map(repr, missing))}")
    return (header.index(str(columns[0])), header.index(str(columns[1]))), True


def _row(path: Path, line: int, row: list[str], cols: tuple[int, int]) -> tuple[str, str]:
    if max(cols) >= len(row):
        raise DataError(f"{path}: line {line} has {len(row)} field(s); column {max(cols) + 1} is missing")
    return one_line(row[cols[0]]), one_line(row[cols[1]])


# -- JSON lines -------------------------------------------------------------------------------------


def _jsonl(path: Path, stream: IO[bytes], fmt: str, src: str, tgt: str, columns: Any) -> Iterator[tuple[int, str, str]]:
    if columns is not None and (not isinstance(columns, (list, tuple)) or len(columns) != 2):
        raise DataError(f"{path}: columns must be the [source, target] keys of its JSON objects")
    keys = tuple(columns) if columns is not None else (src, tgt)
    for n, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line.removeprefix(b"\xef\xbb\xbf") if n == 1 else line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{path}: line {n} is not JSON ({e})") from None
        if isinstance(obj, dict) and columns is None and isinstance(obj.get("translation"), dict):
            obj = obj["translation"]  # the Hugging Face datasets' translation records
        if isinstance(obj, dict) and columns is None:
            obj = {primary(k): v for k, v in obj.items()}
        if not isinstance(obj, dict) or not all(isinstance(obj.get(k), str) for k in keys):
            raise DataError(f"{path}: line {n} is not an object with the strings {keys[0]!r} and {keys[1]!r}")
        yield n, one_line(obj[keys[0]]), one_line(obj[keys[1]])


# -- TMX and XLIFF ----------------------------------------------------------------------------------


def _local(el: Any) -> str:
    return etree.QName(el).localname if isinstance(el.tag, str) else ""


def inline_text(el: Any) -> str:
    """An element's text with its inline markup's text, without native codes."""
    parts = [el.text or ""]
    for child in el:
        if _local(child) not in _NATIVE_CODES:
            parts.append(inline_text(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _elements(path: Path, stream: IO[bytes], tags: tuple[str, ...]) -> Iterator[Any]:
    """The elements of the given local names as each ends, freed once used (memory stays flat); an XML
    error is one DataError with the parser's line. No entity expansion, no network: a file is not trusted."""
    parser = etree.iterparse(
        stream, events=("start", "end"), resolve_entities=False, no_network=True, huge_tree=True, recover=False
    )
    try:
        for event, el in parser:
            if event == "end" and _local(el) in tags:
                yield el
                el.clear(keep_tail=True)
                node = el
                while node.getparent() is not None:  # what the tree keeps of earlier units, at every depth
                    while node.getprevious() is not None:
                        del node.getparent()[0]
                    node = node.getparent()
            elif event == "start" and _local(el) in ("file", "xliff"):
                yield el  # XLIFF's languages are attributes of these, known at their start
    except etree.XMLSyntaxError as e:
        raise DataError(f"{path}: not well-formed XML: {e}") from None


def _tmx(path: Path, stream: IO[bytes], fmt: str, src: str, tgt: str, columns: Any) -> Iterator[tuple[int, str, str]]:
    seen: set[str] = set()
    for tu in _elements(path, stream, ("tu",)):
        if _local(tu) != "tu":
            continue
        segs: dict[str, str] = {}
        for tuv in tu:
            if _local(tuv) != "tuv":
                continue
            lang = primary(tuv.get(XML_LANG) or tuv.get("lang") or "")
            seen.add(lang)
            seg = next((c for c in tuv if _local(c) == "seg"), None)
            if seg is not None and lang not in segs:
                segs[lang] = one_line(inline_text(seg))
        if src in segs or tgt in segs:  # a unit in other languages only is no pair of this corpus
            yield tu.sourceline or 0, segs.get(src, ""), segs.get(tgt, "")
    if seen and not {src, tgt} & seen:
        raise DataError(f"{path}: the memory holds {', '.join(sorted(seen))}, not {src} or {tgt}")


def _xliff(path: Path, stream: IO[bytes], fmt: str, src: str, tgt: str, columns: Any) -> Iterator[tuple[int, str, str]]:
    """XLIFF 1.2 (<file source-language target-language> of <trans-unit>s) and 2.0 (<xliff srcLang
    trgLang> of <unit>s of <segment>s). A file translating the other way round gives its pairs swapped;
    a unit without a target is a pair with an empty target (the `empty` filter counts it)."""
    swap: bool | None = None
    for el in _elements(path, stream, ("trans-unit", "segment")):
        name = _local(el)
        if name in ("file", "xliff"):
            langs = (el.get("source-language") or el.get("srcLang"), el.get("target-language") or el.get("trgLang"))
            if langs[0]:
                swap = _direction(path, primary(langs[0]), primary(langs[1] or ""), src, tgt)
            continue
        source = next((c for c in el if _local(c) == "source"), None)
        target = next((c for c in el if _local(c) == "target"), None)
        if source is None:
            continue
        pair = one_line(inline_text(source)), "" if target is None else one_line(inline_text(target))
        yield (el.sourceline or 0, *(pair[::-1] if swap else pair))


def _direction(path: Path, file_src: str, file_tgt: str, src: str, tgt: str) -> bool:
    """Whether a file's pairs are swapped for this corpus; a file in other languages is refused."""
    if (file_src, file_tgt) == (src, tgt) or (file_src == src and not file_tgt):
        return False
    if (file_src, file_tgt) == (tgt, src):
        return True
    raise DataError(f"{path}: the file translates {file_src} -> {file_tgt or '?'}, not {src} -> {tgt}")
