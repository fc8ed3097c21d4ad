"""Filters for parallel text: small named functions over a batch of pairs, each with its thresholds.

A filter takes the source and the target lines of a batch (and its own keyword settings) and returns one
boolean a pair, True to keep it:

    def no_shouting(src: list[str], tgt: list[str], max_upper: float = 0.5) -> list[bool]:
        return [sum(c.isupper() for c in t) <= max_upper * max(1, len(t)) for t in tgt]

A config or `aiayn data clean --filter` names the built-in ones below, `default` (the rule set
`DEFAULT`), or one of the user's own as "module:function" or "path/to/file.py:function", each with
settings: `[default, {langid: {margin: 0.3}}, {"my_filters.py:no_shouting": {max_upper: 0.4}}]`
(OpusFilter's and Locomotive's shape). A filter that declares `src_lang` / `tgt_lang` gets the corpus's.

The built-in rules (a pair is dropped by the first that fails it, and counted there):
  duplicates      an exact copy of an earlier pair, or (near_duplicates) a copy but for case, digits,
                  punctuation and spacing: 8-byte hashes in sorted arrays, 16 bytes a pair, never the text
  length          a side outside [min_chars, max_chars] characters or [min_words, max_words] words
  length_ratio    the longer side over max_chars times the shorter in characters, or max_words in words
  langid          a side whose most likely language (py3langid) is not the corpus's, by more than margin
  untranslated    the same text both sides, or at least max_overlap of their words shared (min_words up)
  sentences       the two sides hold numbers of sentences (sentencex) over max_diff apart: a glued pair
  digits          the numbers of the two sides differ (as multisets of digit runs)
  urls            the URLs and e-mail addresses of the two sides differ
  markup          a side holds HTML or XML elements or character references (lxml, html.unescape)
  punctuation     over max_share of a side's characters are neither letters, digits nor spaces
  case            the share of upper-case letters of the two sides differs by over max_diff
  contains        a side holds one of `words`
Pairs with an empty side are always dropped first (`empty`).
"""

from __future__ import annotations

import hashlib
import html
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sentencex

from aiayn.data.dedup import DUPLICATE, EMPTY, NEAR_DUPLICATE, letters, pair_hashes
from aiayn.data.errors import DataError
from aiayn.data.formats import primary
from aiayn.data.language import known_languages, language_probabilities

KeepFn = Callable[..., Any]  # (src lines, tgt lines, **settings) -> one bool a pair, True = keep

DEFAULT = (
    "duplicates",
    "length",
    "length_ratio",
    "langid",
    "untranslated",
    "urls",
    "markup",
    "punctuation",
    "sentences",  # last: a URL or a tag's remains cut a line too, and their own filters name them better
)
_DIGITS = frozenset("0123456789")
_ASCII_WORDS = {c: None for c in range(128) if chr(c).isalnum() or chr(c) == " "}


# -- the rules --------------------------------------------------------------------------------------


def length(
    src: Sequence[str],
    tgt: Sequence[str],
    min_chars: int = 1,
    max_chars: int = 1000,
    min_words: int = 1,
    max_words: int = 250,
) -> list[bool]:
    def fits(s: str) -> bool:
        n = len(s.split())
        return min_chars <= len(s) <= max_chars and min_words <= n <= max_words

    return [fits(s) and fits(t) for s, t in zip(src, tgt)]


def length_ratio(src: Sequence[str], tgt: Sequence[str], max_chars: float = 2.0, max_words: float = 3.0) -> list[bool]:
    """Within the ratios, when both sides are written with spaces between words: a script without them
    (Chinese, Japanese, Thai) has neither words to count nor characters of a comparable length. Two in
    characters is Bicleaner's hard rule: a truncated target (half a sentence) is past it, a translation
    rarely is, and a few truncated targets teach a model to stop early (docs/data.md)."""

    def within(a: int, b: int, most: float) -> bool:
        return max(a, b) <= most * max(1, min(a, b))

    def judged(s: str, t: str) -> bool:
        return not unspaced(s) and not unspaced(t)

    return [
        not judged(s, t) or (within(len(s), len(t), max_chars) and within(len(s.split()), len(t.split()), max_words))
        for s, t in zip(src, tgt)
    ]


def unspaced(s: str) -> bool:
    """A line of a script written without spaces: one word, most of its characters letters beyond Latin,
    Greek and Cyrillic (CJK ideographs, kana, Thai)."""
    if " " in s.strip():
        return False
    far = sum(1 for c in s if c.isalpha() and ord(c) >= 0x0E00)
    return far > len(s) // 2


def langid(
    src: Sequence[str], tgt: Sequence[str], src_lang: str = "", tgt_lang: str = "", margin: float = 0.5
) -> np.ndarray:
    """Each side's most likely language is its own, or beats it by at most `margin` in probability (short
    lines are often a near tie between related languages)."""
    keep = np.ones(len(src), dtype=bool)
    for lines, lang in ((src, src_lang), (tgt, tgt_lang)):
        top, p_top, p_lang = language_probabilities(lines, lang)
        keep &= (top == lang) | (p_top - p_lang <= margin)
    return keep


def untranslated(src: Sequence[str], tgt: Sequence[str], max_overlap: float = 0.6, min_words: int = 3) -> list[bool]:
    """Not a copy: when both sides have `min_words` distinct words or more, less than `max_overlap` of them
    are shared (Jaccard); shorter ones differ (case, digits and punctuation aside)."""

    def keep(s: str, t: str) -> bool:
        a, b = set(s.casefold().split()), set(t.casefold().split())
        if len(a) < min_words or len(b) < min_words:
            return letters(s) != letters(t)
        return len(a & b) < max_overlap * len(a | b)

    return [keep(s, t) for s, t in zip(src, tgt)]


def sentences(
    src: Sequence[str], tgt: Sequence[str], src_lang: str = "", tgt_lang: str = "", max_diff: int = 0
) -> list[bool]:
    """As many sentences each side, give or take `max_diff`. A crawl glues a line to the next on one side
    only ("Ein Hund rennt. Eine Frau liest." / "A dog runs."), and a model trained on such pairs learns
    to leave sentences out; a translation rarely splits or joins one. OpusFilter's terminal-punctuation
    filter counts the marks; sentencex knows abbreviations and ordinals ("z. B.", "am 3. Mai")."""
    return [abs(sentence_count(s, src_lang) - sentence_count(t, tgt_lang)) <= max_diff for s, t in zip(src, tgt)]


def digits(src: Sequence[str], tgt: Sequence[str]) -> list[bool]:
    return [numbers(s) == numbers(t) for s, t in zip(src, tgt)]


def urls(src: Sequence[str], tgt: Sequence[str]) -> list[bool]:
    return [addresses(s) == addresses(t) for s, t in zip(src, tgt)]


def markup(src: Sequence[str], tgt: Sequence[str]) -> list[bool]:
    return [not has_markup(s) and not has_markup(t) for s, t in zip(src, tgt)]


def punctuation(src: Sequence[str], tgt: Sequence[str], max_share: float = 0.5) -> list[bool]:
    def fine(s: str) -> bool:
        rest = s.translate(_ASCII_WORDS)  # the common characters out first: the loop sees few
        other = sum(1 for c in rest if not c.isalnum() and not c.isspace())
        return other <= max_share * max(1, len(s) - s.count(" "))

    return [fine(s) and fine(t) for s, t in zip(src, tgt)]


def case(src: Sequence[str], tgt: Sequence[str], max_diff: float = 0.5) -> list[bool]:
    def upper(s: str) -> float:
        n = sum(1 for c in s if c.isalpha())
        return sum(1 for c in s if c.isupper()) / max(1, n)

    return [abs(upper(s) - upper(t)) <= max_diff for s, t in zip(src, tgt)]


def contains(src: Sequence[str], tgt: Sequence[str], words: Sequence[str] = ()) -> list[bool]:
    return [not any(w in s or w in t for w in words) for s, t in zip(src, tgt)]


BUILTIN: dict[str, KeepFn] = {
    f.__name__: f
    for f in (length, length_ratio, langid, untranslated, sentences, digits, urls, markup, punctuation, case, contains)
}


# -- what the rules look at -------------------------------------------------------------------------


def sentence_count(s: str, lang: str) -> int:
    """How many sentences sentencex finds in `s` (a language it has no rules for gets its defaults); a
    piece without a letter or digit (a closing tag, a lone "--") is none."""
    return sum(1 for piece in sentencex.segment(lang or "en", s) if any(c.isalnum() for c in piece))


def numbers(s: str) -> list[str]:
    """The runs of ASCII digits in `s`, sorted."""
    if _DIGITS.isdisjoint(s):
        return []
    runs, run = [], ""
    for c in s:
        if c in _DIGITS:
            run += c
        elif run:
            runs.append(run)
            run = ""
    return sorted(runs + [run] if run else runs)


def addresses(s: str) -> list[str]:
    """The words of `s` that are URLs or e-mail addresses (trailing punctuation aside), sorted."""
    if "://" not in s and "www." not in s and "@" not in s:
        return []
    words = (w.strip(".,;:!?()[]{}<>\"'") for w in s.split())
    return sorted(w for w in words if "://" in w or w.startswith("www.") or ("@" in w and "." in w.split("@")[-1]))


def has_markup(s: str) -> bool:
    """Whether `s` holds an HTML/XML element or a character reference (&amp;, &#39;)."""
    if "<" not in s and "&" not in s:
        return False
    if "&" in s and html.unescape(s) != s:
        return True
    if "<" not in s:
        return False
    from lxml import html as lxml_html

    try:
        parts = lxml_html.fragments_fromstring(s)
    except Exception:  # lxml refuses what it cannot make a fragment of: then there is no element
        return False
    return any(not isinstance(p, str) for p in parts)


# -- filters from settings --------------------------------------------------------------------------


@dataclass(frozen=True)
class Filter:
    """One named filter with its settings; `ref` finds its function ("module:function", "file.py:function"
    or a built-in name), in whichever process applies it."""

    name: str
    ref: str
    settings: dict[str, Any] = field(default_factory=dict)

    def keep(self, src: Sequence[str], tgt: Sequence[str]) -> np.ndarray:
        out = np.asarray(resolve(self.ref)(list(src), list(tgt), **self.settings), dtype=bool)
        if out.shape != (len(src),):
            got = out.shape[0] if out.ndim else "no"
            raise DataError(f"filter {self.name} returned {got} values for {len(src)} pairs")
        return out

    def describe(self) -> dict[str, Any]:
        """What of the filter decides what it keeps (part of the prepared cache's key): its name and
        settings; for a user's own, where it is and a hash of its code's file; for langid and markup,
        the versions of the libraries that judge."""
        out: dict[str, Any] = {"name": self.name, **self.settings}
        if self.ref not in BUILTIN and self.ref != DUPLICATE:
            out["ref"] = self.ref
            out["code"] = code_hash(self.ref)
        elif self.ref in _JUDGES:
            out["library"] = library_version(_JUDGES[self.ref])
        return out


_JUDGES = {"langid": "py3langid", "markup": "lxml", "sentences": "sentencex"}  # a new release may judge anew


def code_hash(ref: str) -> str:
    """sha256 of the file that defines a user's filter (a .py path, or the module's file)."""
    fn = resolve(ref)
    path = inspect.getsourcefile(fn) or ""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return "unknown"


def library_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


_RESOLVED: dict[str, KeepFn] = {}


def resolve(ref: str) -> KeepFn:
    """The function a filter reference names (imported once per process; a file again when it changed)."""
    where = ref.rpartition(":")[0]
    if where.endswith(".py") and Path(where).is_file():
        st = Path(where).stat()
        key = f"{ref}@{st.st_mtime_ns}:{st.st_size}"
    else:
        key = ref
    if key in _RESOLVED:
        return _RESOLVED[key]
    if ref in BUILTIN:
        fn = BUILTIN[ref]
    else:
        where, _, name = ref.rpartition(":")
        if not where or not name:
            raise DataError(
                f"unknown filter {ref!r}; built-in: {', '.join(['default', *BUILTIN])}, "
                f"or your own as module:function or file.py:function"
            )
        try:
            module = _load_file(Path(where)) if where.endswith(".py") else importlib.import_module(where)
            fn = getattr(module, name)
        except (ImportError, AttributeError, OSError) as e:
            raise DataError(f"filter {ref!r} cannot be loaded: {e}") from None
    _RESOLVED[key] = fn
    return fn


def _load_file(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"aiayn_filter_{path.stem}", path.resolve())
    if spec is None or spec.loader is None or not path.is_file():
        raise ImportError(f"no Python file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def parse_filters(specs: Any, src_lang: str, tgt_lang: str, where: str = "filters") -> list[Filter]:
    """Filters from a config list: names, `default`, or {name: {setting: value}}; each setting checked
    against its function's parameters, the corpus languages given to those that take them."""
    if specs is None:
        return []
    if not isinstance(specs, list):
        specs = [specs]
    out: list[Filter] = []
    for spec in specs:
        if spec == "default":
            out += [_checked(n, {}, src_lang, tgt_lang, where) for n in DEFAULT if n not in {f.ref for f in out}]
            continue
        settings: dict[str, Any] = {}
        if isinstance(spec, str):
            name = spec
        elif isinstance(spec, dict) and len(spec) == 1:
            name, settings = next(iter(spec.items()))
            settings = dict(settings or {})
        else:
            raise DataError(f"{where}: {spec!r} is not a filter name or {{name: {{setting: value}}}}")
        f = _checked(str(name), settings, src_lang, tgt_lang, where)
        out = [g for g in out if g.ref != f.ref]  # named again: its settings replace the earlier ones
        out.append(f)
    return out


def _checked(name: str, settings: dict[str, Any], src_lang: str, tgt_lang: str, where: str) -> Filter:
    if name in (DUPLICATE, NEAR_DUPLICATE):
        if settings:
            raise DataError(f"{where}: {name} has no settings")
        return Filter(DUPLICATE, DUPLICATE)
    fn = resolve(name)
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    unknown = [k for k in settings if k not in params and not takes_any]
    if unknown:
        known = [k for k in params if k not in ("src", "tgt", "src_lang", "tgt_lang")]
        raise DataError(f"{where}: filter {name} has no setting {', '.join(unknown)}; its settings: {known or 'none'}")
    for key, value in settings.items():
        default = params[key].default if key in params else None
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise DataError(f"{where}: filter {name}'s {key} is a number, not {value!r}")
        elif isinstance(default, (list, tuple)) and not isinstance(value, (list, tuple)):
            raise DataError(f"{where}: filter {name}'s {key} is a list, not {value!r}")
    for lang_key, lang in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        if lang_key in params and lang_key not in settings:
            settings[lang_key] = primary(lang)  # de-DE is de, to the identifier
    if fn is langid:
        for lang in (settings["src_lang"], settings["tgt_lang"]):
            if lang not in known_languages():
                raise DataError(
                    f"{where}: the language identifier knows no {lang!r} (it knows {len(known_languages())} "
                    f"languages: {', '.join(sorted(known_languages())[:12])}, ...); leave langid out for this corpus"
                )
    return Filter(name.rpartition(":")[2], name, settings)


# -- applying them ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdicts:
    """What a chain says of a batch: each pair's code (0: kept, else 1 + the index of the reason in the
    chain's `reasons`) and, when it deduplicates, each pair's exact and near hashes."""

    codes: np.ndarray  # (N,) uint8
    exact: np.ndarray | None = None  # (N,) uint64
    near: np.ndarray | None = None  # (N,) uint64


@dataclass(frozen=True)
class Chain:
    """The filters of one source in order, as the workers apply them: empty pairs first, then each
    filter on what the earlier ones kept. A code is 1 + the reason's index in `reasons`, the names of
    every source's filters together (`reasons_of`), so that counts add up across sources.
    Deduplication needs the corpus order: the chain hashes every pair, and a `Deduplicator` in the main
    process marks the copies (`duplicates` counts first)."""

    filters: tuple[Filter, ...]
    reasons: tuple[str, ...]

    @property
    def dedup(self) -> bool:
        return any(f.name == DUPLICATE for f in self.filters)

    def verdicts(self, src: Sequence[str], tgt: Sequence[str]) -> Verdicts:
        n = len(src)
        codes = np.zeros(n, dtype=np.uint8)
        empty = np.fromiter((not s.strip() or not t.strip() for s, t in zip(src, tgt)), dtype=bool, count=n)
        codes[empty] = 1 + self.reasons.index(EMPTY)
        for f in self.filters:
            live = np.flatnonzero(codes == 0)
            if f.name == DUPLICATE or not len(live):
                continue
            kept = f.keep([src[i] for i in live.tolist()], [tgt[i] for i in live.tolist()])
            codes[live[~kept]] = 1 + self.reasons.index(f.name)
        if not self.dedup:
            return Verdicts(codes)
        return Verdicts(codes, pair_hashes(src, tgt, exact=True), pair_hashes(src, tgt, exact=False))


def reasons_of(filter_lists: Sequence[Sequence[Filter]], after: Sequence[str] = ()) -> tuple[str, ...]:
    """Every reason a pair can be dropped for, in the order the report lists them: the copies, empty
    pairs, each source's filters (first mention first), then `after` (the pipeline's token limits)."""
    names = [DUPLICATE, NEAR_DUPLICATE, EMPTY]
    for filters in filter_lists:
        names += [f.name for f in filters if f.name not in names]
    return (*names, *(a for a in after if a not in names))
