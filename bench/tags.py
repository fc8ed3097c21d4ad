"""Where HTML tags land, for every word class and for two-word spans, and which attention links best.

    python bench/tags.py -c RUN [--limit 1000] [--layers]

The probe of bench/documents.py (--tags) wraps capitalised German nouns only. This one wraps, one at a
time, every word of the Multi30k test2016 sources whose translation is known and occurs once in the
run's own translation of the sentence (nouns, verbs, adjectives, numerals, function words: a word's
translation is its likeliest English word in the training pairs by the Dice coefficient of their line
counts, at least 0.5, so the reference does not come from the model), and every two adjacent such words
whose translations stand side by side in the translation (`spans`: "roten Hut" -> "red hat"). A tag is
`exact` when it holds that word (the two words) and nothing else. Counts by class: `noun` (capitalised
after the first word), `other` (the rest).

`--layers` measures the links read from each decoder layer's encoder-decoder attention, and from means
of layers, on the torch engine (aiayn.decode.engines.TorchEngine.align_layers), beside what the run's
engine does now. One JSON line each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from aiayn.documents.html import translate_html  # noqa: E402
from documents import PUNCT, _words, lexicon, read  # noqa: E402


def probes(src: list[str], lines: list[str], data: Path) -> list[tuple[int, int, int, list[str], str]]:
    """(sentence, first word, last word, the gold English words, class) of each word and span probe."""
    lex = lexicon(data)
    out = []
    for i, (sentence, translation) in enumerate(zip(src, lines)):
        words = sentence.split(" ")
        lower = _words(sentence)
        target = _words(translation)
        gold: dict[int, str] = {}
        for k, w in enumerate(words):
            core = w.strip(PUNCT)
            dice, g = lex.get(core.lower(), (0.0, ""))
            if core and core.replace("-", "").isalnum() and dice >= 0.5 and target.count(g) == 1:
                if lower.count(core.lower()) == 1:
                    gold[k] = g
        for k, g in gold.items():
            cls = "noun" if k > 0 and words[k].strip(PUNCT)[:1].isupper() else "other"
            out.append((i, k, k, [g], cls))
            if k + 1 in gold and g != gold[k + 1]:
                a, b = target.index(g), target.index(gold[k + 1])
                if abs(a - b) == 1:
                    out.append((i, k, k + 1, [target[min(a, b)], target[max(a, b)]], "span"))
    return out


def page(sentence: str, first: int, last: int) -> str:
    """The sentence with words first..last in <b> (punctuation at its edges left outside)."""
    words = sentence.split(" ")
    lead = len(words[first]) - len(words[first].lstrip(PUNCT))
    tail = len(words[last]) - len(words[last].rstrip(PUNCT))
    words[first] = words[first][:lead] + "<b>" + words[first][lead:]
    end = len(words[last]) - tail
    words[last] = words[last][:end] + "</b>" + words[last][end:]
    return " ".join(words)


def measure(found: list, src: list[str], lines: list[str], align: Any) -> dict[str, Any]:
    from lxml import html as lxml_html

    hits: dict[str, list[int]] = {}
    t0 = time.perf_counter()
    for i, first, last, gold, cls in found:
        html = translate_html(page(src[i], first, last), "de", lambda x, i=i: [lines[i]] * len(x), align)
        b = lxml_html.fragment_fromstring(html, create_parent="div").find(".//b")
        got = _words(b.text_content()) if b is not None else []
        hits.setdefault(cls, []).append(got == gold)
    out = {cls: {"probes": len(h), "exact": round(sum(h) / len(h), 3)} for cls, h in sorted(hits.items())}
    words = hits.get("noun", []) + hits.get("other", [])
    out["words"] = {"probes": len(words), "exact": round(sum(words) / max(1, len(words)), 3)}
    every = words + hits.get("span", [])
    out["all"] = {"probes": len(every), "exact": round(sum(every) / max(1, len(every)), 3)}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-c", "--checkpoint", required=True)
    p.add_argument("--limit", type=int, default=1000)
    p.add_argument("--layers", action="store_true", help="also each decoder layer's links, and means of layers")
    p.add_argument("--data", default=str(ROOT.parent / "shared/data/multi30k"))
    a = p.parse_args()
    from aiayn import Translator

    t = Translator.load(a.checkpoint, device="cpu")
    src = read(Path(a.data), "de", a.limit)
    lines = t.translate(src)
    found = probes(src, lines, Path(a.data))
    print(json.dumps({"links": f"{t.engine} (the run's engine)", **measure(found, src, lines, t.align)}), flush=True)
    if a.layers:
        torch_t = Translator.load(a.checkpoint, device="cpu", engine="torch")
        n = torch_t.searcher.model.config.n_decoder_layers
        choices = [(k,) for k in range(n)] + [tuple(range(n)), tuple(range(1, n)), tuple(range(n - 2, n))]
        for layers in dict.fromkeys(choices):
            torch_t.searcher.align_layers = layers
            print(json.dumps({"links": f"torch, layers {list(layers)}", **measure(found, src, lines, torch_t.align)}))


if __name__ == "__main__":
    main()
