"""An embedded, deterministic, offline translation task: numbers 0..999,999 as digits, English words
and German words.

German compounds put units before tens ("einundzwanzig" = one-and-twenty) and glue a whole number
into one word ("dreihundertvierundfünfzigtausend"), so de <-> en needs real reordering and subword
segmentation; digits <-> words needs both. Sizes are drawn so short and long numbers are both common.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aiayn.data.errors import DataError

LANGS = ("de", "digits", "en")
MAX_NUMBER = 999_999
_SEED = 20170612  # fixed: the corpus is the same on every machine (arXiv 1706.03762)

_EN_UNITS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_DE_UNITS = [
    "null",
    "eins",
    "zwei",
    "drei",
    "vier",
    "fünf",
    "sechs",
    "sieben",
    "acht",
    "neun",
    "zehn",
    "elf",
    "zwölf",
    "dreizehn",
    "vierzehn",
    "fünfzehn",
    "sechzehn",
    "siebzehn",
    "achtzehn",
    "neunzehn",
]
_DE_TENS = ["", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"]


def english(n: int) -> str:
    """American style without "and": 354 -> "three hundred fifty-four"."""
    if not 0 <= n <= MAX_NUMBER:
        raise ValueError(f"{n} outside 0..{MAX_NUMBER}")
    if n < 20:
        return _EN_UNITS[n]
    if n < 100:
        t, u = divmod(n, 10)
        return _EN_TENS[t] + (f"-{_EN_UNITS[u]}" if u else "")
    if n < 1000:
        h, r = divmod(n, 100)
        return f"{_EN_UNITS[h]} hundred" + (f" {english(r)}" if r else "")
    k, r = divmod(n, 1000)
    return f"{english(k)} thousand" + (f" {english(r)}" if r else "")


def german(n: int) -> str:
    """One word below a million: 21 -> "einundzwanzig", 101000 -> "einhunderteintausend"."""
    if not 0 <= n <= MAX_NUMBER:
        raise ValueError(f"{n} outside 0..{MAX_NUMBER}")
    if n == 0:
        return "null"
    return _de(n)


def _de(n: int, prefix: bool = False) -> str:
    # prefix=True: the number stands before "hundert"/"tausend", where 1 is "ein", not "eins"
    if n < 20:
        return "ein" if (n == 1 and prefix) else _DE_UNITS[n]
    if n < 100:
        t, u = divmod(n, 10)
        return (("ein" if u == 1 else _DE_UNITS[u]) + "und" if u else "") + _DE_TENS[t]
    if n < 1000:
        h, r = divmod(n, 100)
        return _de(h, True) + "hundert" + (_de(r, prefix) if r else "")
    k, r = divmod(n, 1000)
    return _de(k, True) + "tausend" + (_de(r) if r else "")


_RENDER: dict[str, Callable[[int], str]] = {"digits": str, "en": english, "de": german}


def split_sizes(size: int) -> dict[str, int]:
    n_eval = max(1, min(1000, size // 20))
    return {"train": size - 2 * n_eval, "valid": n_eval, "test": n_eval}


def numbers(size: int) -> dict[str, list[int]]:
    """Distinct numbers per split (disjoint): digit count uniform in 1..6, then uniform within it."""
    if not 3 <= size <= MAX_NUMBER + 1:
        raise DataError(f"embedded_size must lie in 3..{MAX_NUMBER + 1}, not {size}")
    rng = np.random.default_rng(_SEED)
    seen: dict[int, None] = {}  # insertion-ordered set
    while len(seen) < size:
        digits = rng.integers(1, 7, size=size)
        lo = np.where(digits == 1, 0, 10 ** (digits - 1))
        for x in rng.integers(lo, 10**digits).tolist():
            seen.setdefault(x)
            if len(seen) == size:
                break
    pool = list(seen)
    sizes = split_sizes(size)
    v, t = sizes["valid"], sizes["test"]
    return {"train": pool[v + t :], "valid": pool[:v], "test": pool[v : v + t]}


def corpus(src_lang: str, tgt_lang: str, size: int) -> dict[str, tuple[list[str], list[str]]]:
    """split -> (source lines, target lines) for the language pair."""
    for lang in (src_lang, tgt_lang):
        if lang not in LANGS:
            raise DataError(f"the embedded corpus has no {lang!r} text; languages: {', '.join(LANGS)}")
    if src_lang == tgt_lang:
        raise DataError(f"source and target language are both {src_lang!r}")
    fs, ft = _RENDER[src_lang], _RENDER[tgt_lang]
    return {split: ([fs(n) for n in nums], [ft(n) for n in nums]) for split, nums in numbers(size).items()}
