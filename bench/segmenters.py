"""Sentence segmenters on the gold set of tests/segment_gold.py (German and English, issue #47).

    python bench/segmenters.py

For each segmenter, alone on the whole text ("raw") and after cutting at line breaks first ("lines",
what aiayn.documents.segment does), counts the gold boundaries found (tp), the boundaries made where
there is none (fp) and the ones missed (fn), and two rates: `right` = tp / (tp + fp + fn), every
boundary decision that went wrong counted against it, and `candidates_right`, the share of candidate
places (each ., !, ?, ... or line break followed by text, and each gold boundary) decided right.
`aiayn` is aiayn.documents.segment.segment itself. pysbd is measured when it is installed. One JSON line
per segmenter and mode.

    python bench/segmenters.py --multi30k ../shared/data/multi30k

adds the run-on cut (aiayn.documents.segment, step 3) with the sentence starts learnt from each language's
Multi30k training captions: the gold sets again with them (`aiayn+starts`), and per language how many
val and test2016 captions that end in a stop are cut (`cut_whole`: should be 0) and how many pairs of
a caption without a final stop and the next one, joined by a space, are cut where they meet.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

from aiayn.data.sentence_starts import SentenceStarts, learn_sentence_starts  # noqa: E402
from aiayn.documents.segment import segment  # noqa: E402
from segment_gold import GOLD, HELD_OUT, HELD_OUT_2, parse  # noqa: E402


def starts(chunks: list[str], text: str) -> set[int]:
    """Offsets where the chunks after the first start (their first non-space character)."""
    out, pos = [], 0
    for c in chunks:
        if c.strip():
            pos = text.index(c.strip(), pos)
            out.append(pos)
            pos += len(c.strip())
    return set(out[1:])


def candidates(text: str, gold: set[int]) -> set[int]:
    """Places a segmenter decides on: after sentence punctuation or a line break, where text follows."""
    out = set(gold)
    for i, ch in enumerate(text):
        if ch in ".!?\u2026\n":
            j = i + 1
            while j < len(text) and (text[j].isspace() or text[j] in "\"'\u201c\u201d\u201e)"):
                j += 1
            if j < len(text) and j > i + 1:
                out.add(j)
    return out


def by_lines(cut: Callable[[str], list[str]], text: str) -> list[str]:
    return [c for line in text.splitlines() if line.strip() for c in cut(line.strip())]


def cutters() -> dict[str, Callable[[str], Callable[[str], list[str]]]]:
    import sentencex

    out: dict[str, Callable[[str], Callable[[str], list[str]]]] = {
        "sentencex": lambda lang: lambda t: list(sentencex.segment(lang, t)),
    }
    try:
        import pysbd

        out["pysbd"] = lambda lang: pysbd.Segmenter(language=lang, clean=False).segment
    except ImportError:
        print("pysbd not installed: measured without it", file=sys.stderr)
    return out


def measure(
    name: str, mode: str, cut_for: Callable[[str], Callable[[str], list[str]]], gold_set: dict[str, list[str]]
) -> dict:
    tp = fp = fn = cand = cand_right = 0
    wrong = []
    t0 = time.perf_counter()
    for lang, items in gold_set.items():
        cut = cut_for(lang)
        for marked in items:
            text, gold_list = parse(marked)
            gold = set(gold_list)
            chunks = cut(text) if mode == "raw" else by_lines(cut, text)
            pred = starts(chunks, text)
            tp, fp, fn = tp + len(gold & pred), fp + len(pred - gold), fn + len(gold - pred)
            places = candidates(text, gold) | pred
            cand += len(places)
            cand_right += sum((p in gold) == (p in pred) for p in places)
            if pred != gold:
                wrong.append(chunks)
    seconds = time.perf_counter() - t0
    return {
        "segmenter": name,
        "mode": mode,
        "set": {id(GOLD): "gold", id(HELD_OUT): "held out", id(HELD_OUT_2): "held out 2"}[id(gold_set)],
        "texts": sum(len(v) for v in gold_set.values()),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "right": round(tp / (tp + fp + fn), 4),
        "candidates": cand,
        "candidates_right": round(cand_right / cand, 4),
        "ms": round(seconds * 1000, 1),
        "wrong": wrong,
    }


def run_on(data: Path, lang: str, starts: SentenceStarts) -> dict:
    """Multi30k val and test2016 in `lang`: captions with a stop cut anyway, and pairs run together cut right."""
    whole = cut_whole = joined = right = 0
    for split in ("val", "test_2016_flickr"):
        with gzip.open(data / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = [" ".join(x.split()) for x in f]
        for x in lines:
            if x[-1:] in ".!?":
                whole += 1
                cut_whole += len(segment(x, lang, starts=starts).sentences) > 1
        for a, b in zip(lines, lines[1:]):
            if a[-1:].isalnum():  # no final stop: joined by a space, only a run-on cut can part them
                joined += 1
                want = segment(a, lang, starts=starts).sentences + segment(b, lang, starts=starts).sentences
                right += segment(f"{a} {b}", lang, starts=starts).sentences == want
    return {
        "lang": lang,
        "starts": len(starts.words),
        "never_last": len(starts.never_last),
        "whole": whole,
        "cut_whole": cut_whole,
        "joined": joined,
        "cut_right": right,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--multi30k", type=Path, help="a Multi30k directory: also measure the run-on cut")
    a = ap.parse_args()
    rows = []
    learnt: dict[str, SentenceStarts] = {}
    if a.multi30k:
        for lang in ("de", "en", "fr", "cs"):
            with gzip.open(a.multi30k / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
                learnt[lang] = learn_sentence_starts(x.strip() for x in f)
    ours = {"aiayn": lambda lang: lambda t: segment(t, lang).sentences}

    def with_starts(lang: str) -> Callable[[str], list[str]]:
        return lambda t: segment(t, lang, starts=learnt[lang]).sentences

    for gold_set in (GOLD, HELD_OUT, HELD_OUT_2):
        for name, cut_for in cutters().items():
            for mode in ("raw", "lines"):
                rows.append(measure(name, mode, cut_for, gold_set))
        rows.append(measure("aiayn", "lines", ours["aiayn"], gold_set))
        if learnt:
            rows.append(measure("aiayn+starts", "lines", with_starts, gold_set))
    rows += [run_on(a.multi30k, lang, starts) for lang, starts in learnt.items()]
    for r in rows:
        print(json.dumps(r, ensure_ascii=False))


if __name__ == "__main__":
    main()
