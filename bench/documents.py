"""Documents against lines (issue #47): paragraphs and HTML built from Multi30k test2016, translated
as documents, compared with the same sentences translated line by line.

    python bench/documents.py -c RUN [--beam 4] [--engine auto] [--limit 1000] [--html 200]

Paragraphs: the test sentences grouped in order into paragraphs of 1-5 (seeded), joined by a space
or a newline, cut by aiayn.documents.segment and translated in one call (every sentence of every paragraph,
as the server and `aiayn translate --document` do). Each paragraph's sentences are mapped back to the
test sentences by offset: a segment that is exactly one test sentence takes that sentence's
translation; a test sentence cut in two, or merged with its neighbour, counts as different, and for
BLEU the merged translation is re-split two ways: given whole to its first sentence with "" for the
others (pessimistic: the second sentence's words match nothing), and cut at the boundaries that
minimise the word error rate against the covered references (mwerSegmenter's re-segmentation, as
IWSLT scores speech translation: package mweralign, optional, `pip install mweralign`; with the run's
own sentencepiece model, so nothing is downloaded). A test sentence without a final stop joined to the
next by a space is cut where the next one starts with one of the run's learnt sentence starts
(aiayn.documents.segment, step 3; `--run-on 0`: not). Reports the share of sentences identical to line by
line, how many of the others ran into their neighbour because a test sentence has no final stop, and
the sacreBLEU scores.

HTML: `--html N` snippets, each one to three consecutive test sentences in a <p> with inline tags (b,
i, a href, span, em, br, a nested block) over random word ranges, translated with aiayn.documents.html.
Checks that every output is well-formed (Python's html.parser: every non-void tag closed in order),
has the same multiset of tags and attributes (lxml), and reports the sacreBLEU of its text against
the references beside that of the plain sentences.

Tags: does a tag land on the translation of the word it wraps? Every test sentence's capitalised
German words after the first (nouns) whose translation is known and occurs once in the sentence's
translation are wrapped in <b>, one at a time, and placed twice, through the model's word alignment
(Translator.align, what `aiayn translate --format html` and the server do) and by position. A word's
translation is its likeliest English word in the Multi30k training pairs by the Dice coefficient of
their line counts (at least 0.5; "mann" -> "man", "fahrrad" -> "bicycle"), so the reference does not
come from the model. `exact`: the <b> holds that word alone; `with_article`: a, an or the beside it
also count. Pairs: each sentence with two such nouns has the first in <b>, the second in <i>, placed
through the alignment; `both_exact` counts the sentences where each tag holds its word alone, over all
pairs and over those whose translation has the two words the other way round (`reordered`).

Word: `--docx 1` writes one .docx (python-docx) with every test sentence a paragraph and its first
probe noun (as above) in bold, translates it with aiayn.documents.office (what `--format docx` and the
server's /translate_file do), reads it back, and reports how many bold runs hold exactly their word's
translation, how many paragraphs read as the sentence's line-by-line translation, and sacreBLEU.
One JSON line each.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import string
import sys
import time
from collections import Counter
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from aiayn.data.sentence_starts import SentenceStarts, run_sentence_starts  # noqa: E402
from aiayn.documents.html import translate_html  # noqa: E402
from aiayn.documents.segment import segment  # noqa: E402

VOID = {"br", "img", "wbr", "hr"}

Translate = Callable[[list[str]], list[str]]  # sentences -> their translations


def read(data: Path, lang: str, limit: int, split: str = "test_2016_flickr") -> list[str]:
    with gzip.open(data / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [line.strip() for line in f][:limit]


def paragraphs(n: int, rng: random.Random) -> list[tuple[int, int, str]]:
    """(first sentence, end, separator) of consecutive groups of 1-5 sentences."""
    out, i = [], 0
    while i < n:
        k = min(n - i, rng.randint(1, 5))
        out.append((i, i + k, rng.choice([" ", "\n"])))
        i += k
    return out


def mwer_resplit(refs: list[str], merged: str, spm: str | None) -> list[str]:
    """`merged`, the translation of several sentences, cut into len(refs) segments at the boundaries of
    least word error rate against `refs` (mwerSegmenter's algorithm, package mweralign); words split by
    the sentencepiece model `spm`, no boundary inside a word."""
    import sentencepiece
    from mweralign import MwerAlign

    aligner = MwerAlign()
    if spm is None:
        return aligner.align("\n".join(refs), merged).rstrip("\n").split("\n")
    sp = sentencepiece.SentencePieceProcessor(model_file=spm)
    aligner.set_tokenized(True)
    aligner.set_forbid_midword_boundary(True)
    pieces = aligner.align(
        "\n".join(" ".join(sp.encode(r, out_type=str)) for r in refs), " ".join(sp.encode(merged, out_type=str))
    )
    return [sp.decode(seg.split()) for seg in pieces.rstrip("\n").split("\n")]


def measure_paragraphs(
    src: list[str],
    ref: list[str],
    lines: list[str],
    translate: Translate,
    lang: str,
    seed: int,
    spm: str | None = None,
    sentence_starts: SentenceStarts | None = None,
) -> dict:
    import sacrebleu

    groups = paragraphs(len(src), random.Random(seed))
    texts = [sep.join(src[a:b]) for a, b, sep in groups]
    t0 = time.perf_counter()
    parts = [segment(t, lang, starts=sentence_starts) for t in texts]
    sentences = [s for p in parts for s in p.sentences]
    outs = translate(sentences)
    seconds = time.perf_counter() - t0
    hyp = [""] * len(src)
    merges: list[tuple[list[int], str]] = []  # (test sentences, their one translation)
    same = [False] * len(src)
    at = unpunctuated = 0
    for (a, b, sep), part in zip(groups, parts):
        starts, pos = [], 0  # where each test sentence starts in the paragraph
        for i in range(a, b):
            starts.append(pos)
            pos += len(src[i]) + len(sep)
        offset = len(part.gaps[0])
        for k, sentence in enumerate(part.sentences):
            begin, end = offset, offset + len(sentence)
            offset = end + len(part.gaps[k + 1])
            covered = [i for i, s in zip(range(a, b), starts) if s < end and s + len(src[i]) > begin]
            first = covered[0]
            if len(covered) > 1 and all(src[j][-1:] not in ".!?\u2026\"\u201c'" for j in covered[:-1]):
                unpunctuated += len(covered)  # a sentence without a final stop ran into the next one
            hyp[first] = (hyp[first] + " " + outs[at]).strip()
            if len(covered) > 1:
                merges.append((covered, outs[at]))
            if covered == [first] and src[first] == sentence:
                same[first] = outs[at] == lines[first]
            at += 1
    return {
        "kind": "paragraphs",
        "sentences": len(src),
        "paragraphs": len(groups),
        "segments": len(sentences),
        "sentence_starts": len(sentence_starts.words) if sentence_starts else 0,
        "identical_share": round(sum(same) / len(src), 4),
        "merged_after_no_final_stop": unpunctuated,
        "bleu_lines": round(sacrebleu.corpus_bleu(lines, [ref]).score, 2),
        "bleu_documents": round(sacrebleu.corpus_bleu(hyp, [ref]).score, 2),
        **resplit_bleu(hyp, ref, merges, spm),
        "seconds_documents": round(seconds, 1),
    }


class Balance(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.ok = True

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.ok = False


def resplit_bleu(hyp: list[str], ref: list[str], merges: list[tuple[list[int], str]], spm: str | None) -> dict:
    """sacreBLEU with each merged translation re-split by mwer_resplit ({} without mweralign)."""
    import sacrebleu

    try:
        import mweralign  # noqa: F401
    except ImportError:
        return {}
    hyp = list(hyp)
    for covered, merged in merges:
        for i, seg in zip(covered, mwer_resplit([ref[i] for i in covered], merged, spm)):
            hyp[i] = seg
    return {"bleu_documents_mwer_resplit": round(sacrebleu.corpus_bleu(hyp, [ref]).score, 2)}


def well_formed(html: str) -> bool:
    b = Balance()
    b.feed(html)
    b.close()
    return b.ok and not b.stack


def tag_multiset(html: str) -> Counter:
    from lxml import html as lxml_html

    root = lxml_html.fragment_fromstring(html, create_parent="div")
    return Counter(
        (el.tag, tuple(sorted((k, "" if k in ("alt", "title") else v) for k, v in el.attrib.items())))
        for el in root.iter()
        if isinstance(el.tag, str)
    )


def snippet(sentences: list[str], rng: random.Random) -> str:
    """The sentences in a <p>, with 1-3 inline tags over random word ranges (nested, never crossing)."""
    words = " ".join(sentences).split()
    opens: dict[int, list[str]] = {}
    closes: dict[int, list[str]] = {}
    taken: list[tuple[int, int]] = []
    tags = [("b", ""), ("i", ""), ("a", ' href="/x?id=7&amp;k=v"'), ("span", ' class="note"'), ("em", "")]
    for _ in range(rng.randint(1, 3)):
        a = rng.randrange(len(words))
        b = rng.randrange(a, min(len(words), a + 4))
        if any(not (b < x or a > y or (x <= a and b <= y) or (a <= x and y <= b)) for x, y in taken):
            continue  # would cross an earlier tag
        taken.append((a, b))
        tag, attr = rng.choice(tags)
        opens.setdefault(a, []).append(f"<{tag}{attr}>")
        closes.setdefault(b, []).insert(0, f"</{tag}>")
    out = []
    for i, w in enumerate(words):
        out.append("".join(opens.get(i, [])) + w + "".join(closes.get(i, [])))
    body = " ".join(out)
    if rng.random() < 0.3:  # a line break between two words
        cut = body.rfind(" ", 0, max(1, len(body) // 2))
        if cut > 0 and "<" not in body[cut - 1 : cut + 1]:
            body = body[:cut] + "<br>" + body[cut + 1 :]
    if rng.random() < 0.2:
        return f'<div class="box"><p>{body}</p></div>'
    return f"<p>{body}</p>"


def seen_text(root: Any) -> str:
    """The words a reader sees in an lxml element: its text, a line break (<br>) between the words around it."""
    for br in root.iter("br"):
        br.tail = "\n" + (br.tail or "")
    return " ".join(root.text_content().split())


def measure_html(
    src: list[str],
    ref: list[str],
    lines: list[str],
    translate: Translate,
    align: Any,
    n: int,
    seed: int,
    sentence_starts: SentenceStarts | None = None,
) -> dict:
    import sacrebleu
    from lxml import html as lxml_html

    rng = random.Random(seed)
    ok_form = same_tags = 0
    hyps, refs, plain = [], [], []
    i = 0
    t0 = time.perf_counter()
    for _ in range(n):
        k = rng.randint(1, 3)
        group = list(range(i, min(len(src), i + k)))
        i = (i + k) % len(src)
        page = snippet([src[j] for j in group], rng)
        out = translate_html(page, "de", translate, align, starts=sentence_starts)
        ok_form += well_formed(out)
        same_tags += tag_multiset(out) == tag_multiset(page)
        hyps.append(seen_text(lxml_html.fragment_fromstring(out, create_parent="div")))
        refs.append(" ".join(ref[j] for j in group))
        plain.append(" ".join(lines[j] for j in group))
    return {
        "kind": "html",
        "snippets": n,
        "well_formed": ok_form,
        "same_tags_and_attributes": same_tags,
        "bleu_plain_sentences": round(sacrebleu.corpus_bleu(plain, [refs]).score, 2),
        "bleu_html_text": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
        "seconds": round(time.perf_counter() - t0, 1),
    }


PUNCT = string.punctuation + "\u201c\u201d\u201e"
ARTICLES = {"a", "an", "the"}


def _words(text: str) -> list[str]:
    return [w for w in (x.strip(PUNCT).lower() for x in text.split()) if w]


def lexicon(data: Path, min_count: int = 20) -> dict[str, tuple[float, str]]:
    """German word -> (Dice, its likeliest English word) over the line pairs of Multi30k train."""
    de = [set(_words(x)) for x in read(data, "de", 10**9, "train")]
    en = [set(_words(x)) for x in read(data, "en", 10**9, "train")]
    n_de, n_en, both = Counter(), Counter(), Counter()
    for d, e in zip(de, en):
        n_de.update(d)
        n_en.update(e)
        both.update((a, b) for a in d for b in e)
    best: dict[str, tuple[float, str]] = {}
    for (a, b), n in both.items():
        dice = 2 * n / (n_de[a] + n_en[b])
        if n_de[a] >= min_count and dice > best.get(a, (0.0, ""))[0]:
            best[a] = (dice, b)
    return best


def find_probes(src: list[str], lines: list[str], data: Path) -> list[tuple[int, int, str, str]]:
    """(sentence, word index, the German noun, its English word) for every noun of the tags probe."""
    lex = lexicon(data)
    probes = []
    for i, (sentence, translation) in enumerate(zip(src, lines)):
        words = sentence.split(" ")
        for k, w in enumerate(words[1:], 1):
            core = w.strip(PUNCT)
            dice, gold = lex.get(core.lower(), (0.0, ""))
            if core.isalpha() and core[0].isupper() and len(core) > 2 and dice >= 0.5:
                if _words(translation).count(gold) == 1 and _words(sentence).count(core.lower()) == 1:
                    probes.append((i, k, core, gold))
    return probes


def _bold(sentence: str, k: int, core: str, html: bool) -> str | list[tuple[str, bool]]:
    """The sentence with its k-th word's letters in <b> (html), or as (text, bold) runs."""
    words = sentence.split(" ")
    start = words[k].index(core)
    before = " ".join(words[:k] + [words[k][:start]])
    after = " ".join([words[k][start + len(core) :]] + words[k + 1 :])
    if html:
        return f"{before}<b>{core}</b>{after}"
    return [(before, False), (core, True), (after, False)]


def measure_tags(src: list[str], lines: list[str], t: Any, data: Path, lang: str) -> dict:
    from lxml import html as lxml_html

    found = find_probes(src, lines, data)
    probes = [(i, _bold(src[i], k, core, True), gold) for i, k, core, gold in found]
    out: dict[str, Any] = {"kind": "tags", "probes": len(probes)}
    for name, align in (("alignment", t.align), ("position", None)):
        exact = article = 0
        t0 = time.perf_counter()
        for i, page, gold in probes:
            html = translate_html(page, lang, lambda x, i=i: [lines[i]] * len(x), align)
            b = lxml_html.fragment_fromstring(html, create_parent="div").find(".//b")
            covered = _words(b.text_content()) if b is not None else []
            exact += covered == [gold]
            article += [w for w in covered if w not in ARTICLES] == [gold]
        out[name] = {"exact": round(exact / len(probes), 3), "with_article": round(article / len(probes), 3)}
        out[name]["seconds"] = round(time.perf_counter() - t0, 1)
    out["pairs"] = measure_pairs(src, lines, t, found, lang)
    return out


def measure_pairs(src: list[str], lines: list[str], t: Any, found: list[tuple[int, int, str, str]], lang: str) -> dict:
    """Two nouns of one sentence (of the tags probe's `found`), in <b> and <i>: does each tag hold its own
    word's translation?"""
    from lxml import html as lxml_html

    by_sentence: dict[int, list[tuple[int, str, str]]] = {}
    for i, k, core, gold in found:
        by_sentence.setdefault(i, []).append((k, core, gold))
    n = reordered = both = both_reordered = 0
    for i, nouns in by_sentence.items():
        if len(nouns) < 2:
            continue
        (k1, c1, g1), (k2, c2, g2) = nouns[:2]
        words = src[i].split(" ")
        for k, core, tag in ((k2, c2, "i"), (k1, c1, "b")):  # the later first: word k1's index stays
            start = words[k].index(core)
            words[k] = f"{words[k][:start]}<{tag}>{core}</{tag}>{words[k][start + len(core) :]}"
        page = " ".join(words)
        html = translate_html(page, lang, lambda x, i=i: [lines[i]] * len(x), t.align)
        root = lxml_html.fragment_fromstring(html, create_parent="div")
        ok = all(
            el is not None and _words(el.text_content()) == [gold]
            for el, gold in ((root.find(".//b"), g1), (root.find(".//i"), g2))
        )
        translated = _words(lines[i])
        swapped = translated.index(g2) < translated.index(g1)
        n += 1
        both += ok
        reordered += swapped
        both_reordered += ok and swapped
    return {
        "pairs": n,
        "both_exact": round(both / max(1, n), 3),
        "reordered": reordered,
        "both_exact_reordered": round(both_reordered / max(1, reordered), 3),
    }


def measure_docx(src: list[str], ref: list[str], lines: list[str], translate: Translate, t: Any, data: Path) -> dict:
    """One Word document: every test sentence a paragraph, the first probe noun of each (as the tags
    probe finds them) in bold, translated whole with aiayn.documents.office and read back with python-docx."""
    import io

    import docx
    import sacrebleu

    from aiayn.documents.office import translate_office

    first: dict[int, tuple[int, str, str]] = {}
    for i, k, core, gold in find_probes(src, lines, data):
        first.setdefault(i, (k, core, gold))
    d = docx.Document()
    for i, sentence in enumerate(src):
        p = d.add_paragraph()
        for text, bold in _bold(sentence, *first[i][:2], False) if i in first else [(sentence, False)]:
            if text:
                p.add_run(text).bold = bold or None
    buf = io.BytesIO()
    d.save(buf)
    t0 = time.perf_counter()
    out = translate_office(buf.getvalue(), "docx", "de", translate, t.align)
    seconds = time.perf_counter() - t0
    got = docx.Document(io.BytesIO(out)).paragraphs
    hyps = [p.text for p in got]
    exact = sum(_words("".join(r.text for r in got[i].runs if r.bold)) == [gold] for i, (_, _, gold) in first.items())
    return {
        "kind": "docx",
        "paragraphs": len(src),
        "bold_probes": len(first),
        "bold_exact": round(exact / max(1, len(first)), 3),
        "same_text_as_lines": round(sum(h == x for h, x in zip(hyps, lines)) / len(src), 3),
        "bleu_plain_sentences": round(sacrebleu.corpus_bleu(lines, [ref]).score, 2),
        "bleu_docx_text": round(sacrebleu.corpus_bleu(hyps, [ref]).score, 2),
        "bytes_in": len(buf.getvalue()),
        "seconds": round(seconds, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-c", "--checkpoint", required=True)
    p.add_argument("--beam", type=int, default=None, help="default: the run's decode.beam")
    p.add_argument("--engine", default="auto")
    p.add_argument("--limit", type=int, default=1000, help="test sentences (default 1000: all of test2016)")
    p.add_argument("--html", type=int, default=200, help="HTML snippets (0: none)")
    p.add_argument("--tags", type=int, default=1, help="1: measure where tags land (0: skip)")
    p.add_argument("--docx", type=int, default=1, help="1: translate a Word document of the test set (0: skip)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-on", type=int, default=1, help="1: cut run-on sentences at the run's sentence starts")
    p.add_argument("--data", default=str(ROOT.parent / "shared/data/multi30k"))
    a = p.parse_args()
    from aiayn import Translator

    t = Translator.load(a.checkpoint, device="cpu", engine=a.engine)
    src, ref = read(Path(a.data), "de", a.limit), read(Path(a.data), "en", a.limit)

    def translate(sentences: list[str]) -> list[str]:
        return t.translate(sentences, beam=a.beam)

    t0 = time.perf_counter()
    lines = translate(src)
    base = {"engine": t.engine, "beam": a.beam or t.decode.beam, "seconds_lines": round(time.perf_counter() - t0, 1)}
    spm = Path(a.checkpoint) / "spm.model"
    starts = run_sentence_starts(a.checkpoint, "de") if a.run_on else SentenceStarts()
    para = measure_paragraphs(src, ref, lines, translate, "de", a.seed, str(spm) if spm.is_file() else None, starts)
    print(json.dumps({**base, **para}), flush=True)
    if a.html:
        html = measure_html(src, ref, lines, translate, t.align, a.html, a.seed, starts)
        print(json.dumps({**base, **html}), flush=True)
    if a.tags:
        print(json.dumps({**base, **measure_tags(src, lines, t, Path(a.data), "de")}), flush=True)
    if a.docx:
        print(json.dumps({**base, **measure_docx(src, ref, lines, translate, t, Path(a.data))}), flush=True)


if __name__ == "__main__":
    main()
