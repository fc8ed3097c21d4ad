"""Documents (issue #47): sentence segmentation that keeps the layout, and the one-batch translation of
every sentence of a text, rejoined. The segmenter is the real one (sentencex); the gold set is
tests/segment_gold.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from aiayn.data.sentence_starts import SentenceStarts, learn_sentence_starts
from aiayn.documents.flow import translate_now, translate_texts
from aiayn.documents.segment import segment
from segment_gold import GOLD, HELD_OUT, HELD_OUT_2, parse


def _boundaries(text: str, sentences: list[str]) -> set[int]:
    """Where the sentences after the first start in `text`."""
    out, pos = [], 0
    for s in sentences:
        pos = text.index(s, pos)
        out.append(pos)
        pos += len(s)
    return set(out[1:])


def _score(gold_set: dict[str, list[str]]) -> tuple[int, int, int]:
    tp = fp = fn = 0
    for lang, items in gold_set.items():
        for marked in items:
            text, gold = parse(marked)
            got = _boundaries(text, segment(text, lang).sentences)
            tp, fp, fn = tp + len(got & set(gold)), fp + len(got - set(gold)), fn + len(set(gold) - got)
    return tp, fp, fn


def test_gold_boundaries() -> None:
    """Every boundary of the gold set and the first held-out set right (their misses were fixed against
    them), at least 95 % of boundary decisions, tp / (tp + fp + fn), on the second held-out set, and
    at least 98 % over all three (issue #47's goal; docs/serving.md)."""
    assert _score(GOLD)[1:] == (0, 0)
    assert _score(HELD_OUT)[1:] == (0, 0)
    tp, fp, fn = _score(HELD_OUT_2)
    assert tp / (tp + fp + fn) >= 0.95, (tp, fp, fn)
    tp, fp, fn = (sum(x) for x in zip(*(_score(s) for s in (GOLD, HELD_OUT, HELD_OUT_2))))
    assert tp / (tp + fp + fn) >= 0.98, (tp, fp, fn)


def test_the_cases_by_name() -> None:
    # the paragraph of issue #47, abbreviations, a number, quotes, an ellipsis, lines without a full stop
    cases = {
        ("de", "Ein Mann fährt Fahrrad. Zwei Kinder spielen im Park. Eine Frau liest ein Buch."): [
            "Ein Mann fährt Fahrrad.",
            "Zwei Kinder spielen im Park.",
            "Eine Frau liest ein Buch.",
        ],
        ("de", "Dr. Müller kommt z. B. am 1. Mai. Der Preis stieg um 3.5 Prozent."): [
            "Dr. Müller kommt z. B. am 1. Mai.",
            "Der Preis stieg um 3.5 Prozent.",
        ],
        ("en", 'Mr. Smith likes fruit, e.g. apples. He said, "Fine." She waited... Nobody came.'): [
            "Mr. Smith likes fruit, e.g. apples.",
            'He said, "Fine."',
            "She waited...",
            "Nobody came.",
        ],
        ("de", "Er kam an\u2026 Zu spät."): ["Er kam an\u2026", "Zu spät."],
        # a compound of abbreviations, and a full stop with no space after it, end no sentence
        ("de", "Der Dr.-Ing. kam. Dann ging er."): ["Der Dr.-Ing. kam.", "Dann ging er."],
        ("en", "See report.Final for it. Done."): ["See report.Final for it.", "Done."],
        ("en", "A heading\nA line without a stop\n\nA paragraph."): [
            "A heading",
            "A line without a stop",
            "A paragraph.",
        ],
    }
    for (lang, text), want in cases.items():
        assert segment(text, lang).sentences == want


def test_the_layout_is_kept_exactly() -> None:
    text = "  Ein Hund rennt.  Eine Frau liest.\r\n\tZeile zwei\n\n\nAbsatz.   Noch einer.\n"
    seg = segment(text, "de")
    assert seg.sentences == ["Ein Hund rennt.", "Eine Frau liest.", "Zeile zwei", "Absatz.", "Noch einer."]
    assert seg.gaps == ["  ", "  ", "\r\n\t", "\n\n\n", "   ", "\n"]
    assert seg.join(["A.", "B.", "C", "D.", "E."]) == "  A.  B.\r\n\tC\n\n\nD.   E.\n"
    assert segment("", "de").sentences == [] and segment(" \n\t ", "de").join([]) == " \n\t "
    with pytest.raises(ValueError):
        seg.join(["too few"])


def test_a_sentence_without_a_stop_is_cut_where_the_next_one_starts_with_a_learnt_start() -> None:
    """Step 3 of aiayn.documents.segment: two captions run together on one line ("... in der Hand Zwei braune
    Hunde ...") are cut before a learnt sentence start, with the line's own whitespace kept; a word that
    ends in punctuation, a side of under three words, or a word not learnt leaves the text whole."""
    learnt = ["Ein Hund rennt.", "Zwei Hunde rennen.", "Sie sehen den Hund."] * 20 + ["Heute sehen Sie Hunde."] * 19
    learnt += ["Er geht zu den Hunden."] * 100  # "zu": 100 times, never last
    learnt += ["Vier Hunde bellen."] * 200 + ["Es bellen Vier Hunde."]  # inside once in 200: at the bound
    starts = learn_sentence_starts([*learnt, "Morgen sehen Sie Hunde."])
    # "Sie" starts 20 lines and follows a word in 20; "Heute" starts 19; "Vier" follows one at 0.5 % of its starts
    assert starts.words == {"Ein", "Zwei", "Er", "Vier"}
    assert "zu" in starts.never_last and not {"hund", "hunde", "rennt", "hunden"} & starts.never_last
    text = "Mann erklettert Mauer mit Feuer in der Hand  Zwei braune Hunde rennen. Ein Hund schläft"
    seg = segment(text, "de", starts=starts)
    first = "Mann erklettert Mauer mit Feuer in der Hand"
    assert seg.sentences == [first, "Zwei braune Hunde rennen.", "Ein Hund schläft"]
    assert seg.gaps == ["", "  ", " ", ""] and seg.join(seg.sentences) == text
    assert segment(text, "de").sentences == [text[: text.index(" Ein")], "Ein Hund schläft"]  # without starts
    for whole in (
        "Ich sah den Film „Zwei Hunde rennen“ gestern",  # quoted: the quote is no letter
        "Er sah Zwei Hunde im Park",  # two words before it
        "Er sieht im Park Zwei Hunde",  # two words after it
        "Er sieht im Park, Zwei Hunde rennen da",  # punctuation before it: sentencex's to judge
        "Er sieht im Park Drei Hunde rennen",  # not learnt
        "Er geht mit Freude zu Zwei Hunden hin",  # "zu" never ends a sentence
    ):
        assert segment(whole, "de", starts=starts).sentences == [whole]
    # exactly three words are enough, on either side (RUN_ON_MIN_WORDS)
    for left, right in (("Er sah ihn", "Zwei Hunde rennen heute"), ("Gestern sah er ihn", "Zwei Hunde rennen")):
        assert segment(f"{left} {right}", "de", starts=starts).sentences == [left, right]
    # in HTML text a line break is a space, and the cut is made across it
    seg = segment("Ein Hund rennt hier\nZwei Hunde rennen da", "de", lines=False, starts=starts)
    assert seg.sentences == ["Ein Hund rennt hier", "Zwei Hunde rennen da"] and seg.gaps == ["", "\n", ""]


_PIECES = st.sampled_from(
    ["Ein", "Hund", "rennt", "z. B.", "Dr.", "3.5", "1.", "Mai", "e.g.", "…", "...", "?", "!", ".", '"', "„", "“"]
    + ["-", "a)", "iv."]  # list markers
)
_SPACE = st.sampled_from([" ", "  ", "\n", "\n\n", "\r\n", "\t", " \n ", "\u2028", "\u00a0", ""])


@given(
    st.lists(st.tuples(_PIECES, _SPACE), max_size=30),
    st.sampled_from(["de", "en", "fr"]),
    st.sampled_from([SentenceStarts(), SentenceStarts(frozenset({"Ein", "Mai"}), frozenset({"dr."}))]),
    st.booleans(),
)
@example([("Ein", " "), ("Hund", " "), ("rennt", "  ")] * 3, "de", SentenceStarts(frozenset({"Ein"})), True)  # again
def test_any_text_is_sentences_and_whitespace_that_rejoin_to_it(
    parts: list[tuple[str, str]], lang: str, starts: SentenceStarts, lines: bool
) -> None:
    text = "".join(p + s for p, s in parts)
    seg = segment(text, lang, lines, starts)
    assert len(seg.gaps) == len(seg.sentences) + 1
    assert seg.join(seg.sentences) == text
    # a gap is whitespace and the list markers (of the pieces) that start lines
    at = 0
    for gap, sentence in zip(seg.gaps, [*seg.sentences, ""]):
        x = at
        for marker in gap.split():
            x = text.index(marker, x)
            before = (text[:x] + "|").splitlines()[-1][:-1] if lines else text[:x]  # in the marker's line
            numbered = marker.endswith(".") and marker[:-1].replace(".", "").isdigit()  # "1.", "3.51."
            assert (numbered or marker in ("-", "a)", "iv.")) and not before.strip()
            x += len(marker)
        at += len(gap) + len(sentence)
    assert all(s == s.strip() and s for s in seg.sentences)
    assert not lines or all(len(s.splitlines()) == 1 for s in seg.sentences)
    # a run-on cut only ever adds boundaries, each before a start, never removes one
    if starts:
        plain = segment(text, lang, lines)
        assert _boundaries(text, plain.sentences) <= _boundaries(text, seg.sentences)
        added = _boundaries(text, seg.sentences) - _boundaries(text, plain.sentences)
        assert all(text[i:].split(maxsplit=1)[0] in starts.words for i in added)


def test_all_sentences_of_all_texts_go_to_one_call_and_come_back_in_place() -> None:
    calls: list[list[str]] = []

    def translate(sentences: list[str]) -> list[str]:
        calls.append(sentences)
        return [f"<{s.upper()}>" for s in sentences]

    texts = ["Ein Hund rennt. Eine Frau liest.\n\nZwei Männer.", "", "Ein Kind schläft.  "]
    out = translate_texts(texts, "de", translate)
    assert calls == [["Ein Hund rennt.", "Eine Frau liest.", "Zwei Männer.", "Ein Kind schläft."]]
    assert out == ["<EIN HUND RENNT.> <EINE FRAU LIEST.>\n\n<ZWEI MÄNNER.>", "", "<EIN KIND SCHLÄFT.>  "]
    assert translate_texts(["  \n"], "de", translate) == ["  \n"] and len(calls) == 1  # nothing to decode
    with pytest.raises(ValueError, match="5 translations for 4 sentences"):
        translate_now([segment(t, "de") for t in texts], lambda sentences: ["one"] * 5)


def test_the_flow_decodes_once_aligns_once_and_renders_each_kth_hypothesis() -> None:
    """aiayn.documents.flow, as the server awaits it: one decode call for the sentences of all documents,
    one align call for the tagged ones only (with their best translations), and a plain text rendered
    once per hypothesis rank (a sentence with fewer hypotheses gives its last)."""
    import asyncio
    from typing import NamedTuple

    from aiayn.documents.flow import translate
    from aiayn.documents.html import HtmlDocument

    class Hyp(NamedTuple):
        text: str
        score: float

    decoded: list[list[str]] = []
    aligned: list[tuple[list[str], list[str]]] = []

    async def decode(sentences: list[str]) -> list[list[Hyp]]:
        decoded.append(sentences)
        return [[Hyp(s.upper(), 0.0)] + ([Hyp(s.lower(), -1.0)] if "Hund" in s else []) for s in sentences]

    async def align(sources: list[str], targets: list[str]) -> list[None]:
        aligned.append((sources, targets))
        return [None] * len(sources)

    text = segment("Ein Hund rennt. Eine Frau liest.", "de")
    done = asyncio.run(translate([text], decode, align, n_best=2))
    assert done[0].renders == ["EIN HUND RENNT. EINE FRAU LIEST.", "ein hund rennt. EINE FRAU LIEST."]
    assert [h[0].score for h in done[0].hypotheses] == [0.0, 0.0] and aligned == []  # a text has no tags
    page = HtmlDocument("<p>Ein <b>Hund</b> rennt. Eine Frau liest.</p>", "de")
    done = asyncio.run(translate([segment("Zwei Männer.", "de"), page], decode, align))
    assert decoded[-1] == ["Zwei Männer.", "Ein Hund rennt.", "Eine Frau liest."]
    assert aligned == [(["Ein Hund rennt."], ["EIN HUND RENNT."])]
    assert done[1].renders == ["<p>EIN <b>HUND</b> RENNT. EINE FRAU LIEST.</p>"]


def test_the_plain_driver_refuses_a_flow_that_waits() -> None:
    """translate_now runs the flow without an event loop, which holds only while the functions it is
    handed answer at once; a coroutine that waits on something is refused, not left half run."""
    import asyncio

    from aiayn.documents.flow import run_now

    async def waits() -> int:
        await asyncio.sleep(0)
        return 1

    async def answers() -> int:
        return 2

    assert run_now(answers()) == 2
    with pytest.raises(RuntimeError, match="run it with await"):
        run_now(waits())


def test_one_map_of_file_names_to_formats() -> None:
    """What `aiayn translate --input NAME` and the server's /translate_file read a file as."""
    from aiayn.documents.formats import FORMATS, format_of

    assert [format_of(n) for n in ("a.TXT", "b.htm", "c.Html", "d.docx", "e.pptx", "f.pdf", "g", "")] == [
        "text",
        "html",
        "html",
        "docx",
        "pptx",
        None,
        None,
        None,
    ]
    assert sorted(FORMATS) == [".docx", ".htm", ".html", ".pptx", ".txt"]


@pytest.mark.needs_mirror
def test_language_detection_on_multi30k() -> None:
    """py3langid on the first 1,000 Multi30k test2016 lines of each language: at least 99 % right
    (measured: en 99.9, de 100, fr 100, cs 99.0 %, the misses Slovak)."""
    import gzip

    from aiayn.documents.language import detect
    from conftest import multi30k_mirror

    for lang in ("en", "de", "fr", "cs"):
        with gzip.open(multi30k_mirror() / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f][:1000]
        right = sum(detect(line, top=1)[0][0] == lang for line in lines)
        assert len(lines) == 1000 and right >= 990, (lang, right)


# -- HTML ---------------------------------------------------------------------------------------------

_VOID = {"br", "img", "wbr", "hr", "input", "meta", "link"}


def _balanced(html: str) -> bool:
    """Well-formed by Python's own HTML parser: every opened non-void tag closed, in order."""
    from html.parser import HTMLParser

    stack: list[str] = []
    ok = [True]

    class Check(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list) -> None:
            if tag not in _VOID:
                stack.append(tag)

        def handle_endtag(self, tag: str) -> None:
            if not stack or stack.pop() != tag:
                ok[0] = False

    Check(convert_charrefs=True).feed(html)
    return ok[0] and not stack


def _tags(html: str) -> Counter:
    """The multiset of (tag, attributes) by lxml, alt and title by name only (they are translated)."""
    from lxml import html as lxml_html

    root = lxml_html.fragment_fromstring(html, create_parent="div")
    return Counter(
        (el.tag, tuple(sorted((k, "" if k in ("alt", "title") else v) for k, v in el.attrib.items())))
        for el in root.iter()
        if isinstance(el.tag, str)
    )


def _text(html: str) -> str:
    """The words a reader sees: the text, with a line break (<br>) between the words around it."""
    from lxml import html as lxml_html

    root = lxml_html.fragment_fromstring(html, create_parent="div")
    for br in root.iter("br"):
        br.tail = "\n" + (br.tail or "")
    return " ".join(root.text_content().split())


def _upper(sentences: list[str]) -> list[str]:
    return [f"[{s.upper()}]" for s in sentences]


def _recording(translate: Callable[[list[str]], list[str]]) -> tuple[list[list[str]], Callable]:
    """`translate`, and the list of what each of its calls was given."""
    calls: list[list[str]] = []

    def recorded(sentences: list[str]) -> list[str]:
        calls.append(sentences)
        return translate(sentences)

    return calls, recorded


def test_html_keeps_markup_and_translates_whole_sentences() -> None:
    from aiayn.documents.html import translate_html

    calls, translate = _recording(_upper)

    page = (
        '<div class="x"><h1 title="Die Überschrift">Ein Titel</h1>\n'
        '  <p>Ein Hund <b>rennt</b> über die <a href="/wiese?a=1&amp;b=2">grüne <i>Wiese</i></a>.\n'
        "  Eine Frau<br>liest. <code>ls -l</code> zeigt alles.</p>"
        '<script>var s = "Ein Hund.";</script><style>p { color: red }</style>'
        '<pre>Vorformatiert.  Bleibt.</pre><img src="h.png" alt="Ein Bild"><!-- Kommentar. --></div>'
    )
    out = translate_html(page, "de", translate)
    assert calls == [  # one call, whole sentences, markup out; code, script, style, pre, comments untouched
        [
            "Ein Titel",
            "Ein Hund rennt über die grüne Wiese.",
            "Eine Frau",  # a <br> ends a line, so a sentence, as "\n" does in text
            "liest. zeigt alles.",  # the code was a word of it: what is left does not start a sentence
            "Die Überschrift",
            "Ein Bild",
        ]
    ]
    assert _balanced(out) and _tags(out) == _tags(page)
    assert "<b>RENNT</b>" in out and "<i>WIESE" in out and 'title="[DIE ÜBERSCHRIFT]"' in out
    assert 'alt="[EIN BILD]"' in out and 'href="/wiese?a=1&amp;b=2"' in out
    assert '<script>var s = "Ein Hund.";</script>' in out and "<pre>Vorformatiert.  Bleibt.</pre>" in out
    assert "<code>ls -l</code>" in out and "<!-- Kommentar. -->" in out
    # a tag around a whole sentence wraps its whole translation
    assert translate_html("<p><b>Ein Hund rennt.</b> Eine Frau.</p>", "de", _upper) == (
        "<p><b>[EIN HUND RENNT.]</b> [EINE FRAU.]</p>"
    )
    page = "<!DOCTYPE html>\n<html><head><title>Seite</title></head><body><p>Hallo Welt.</p></body></html>"
    assert translate_html(page, "de", _upper) == (
        "<!DOCTYPE html>\n<html><head><title>[SEITE]</title></head><body><p>[HALLO WELT.]</p></body></html>"
    )
    assert translate_html("", "de", _upper) == "" and translate_html("Nur Text.", "de", _upper) == "[NUR TEXT.]"
    # escaped markup in the text stays text, also before a fragment's first tag (it came back as a live tag)
    out = translate_html("&lt;img src=x onerror=alert(1)&gt; ist <b>Text</b>.", "de", lambda x: x)
    assert "<img" not in out and _tags(out) == _tags("<b></b>") and out.startswith("&lt;img src=x")
    assert translate_html("5 &lt; 6 &amp; mehr.", "de", lambda x: x) == "5 &lt; 6 &amp; mehr."
    # a lone surrogate is replaced, not the end of the text
    assert translate_html("<p>Ein\ud800Hund rennt.</p>", "de", lambda x: x) == "<p>Ein?Hund rennt.</p>"


def test_html_leaves_what_the_page_marks_untranslated_and_says_its_new_language() -> None:
    """translate="no" and the notranslate class: the element, its content, its alt and title and its
    descendants' are not translated (an inline one is a point in its sentence). lang / xml:lang naming
    the source language name the target; other languages' and the marked elements' stay."""
    from aiayn.documents.html import translate_html

    calls, translate = _recording(_upper)

    page = (
        '<html lang="de-DE"><body><p>Wir nutzen <span translate="no">Hund Katze</span> täglich.</p>'
        '<div class="box notranslate"><p lang="de">Nicht übersetzen.</p><img alt="Kein Bild"></div>'
        '<p translate="NO" title="Kein Titel">Auch nicht.</p><img alt="Ein Bild" title="Ein Titel">'
        '<p lang="fr">Bonjour.</p><div xml:lang="de">Hallo.</div><pre lang="de">Vorformatiert.</pre></body></html>'
    )
    out = translate_html(page, "de", translate, target="en")
    assert calls == [["Wir nutzen täglich.", "Bonjour.", "Hallo.", "Ein Bild", "Ein Titel"]]
    retagged = page.replace('<html lang="de-DE">', '<html lang="en">').replace('xml:lang="de"', 'xml:lang="en"')
    assert _tags(out) == _tags(retagged)  # every tag and attribute, two languages changed
    assert '<span translate="no">Hund Katze</span>' in out and "Nicht übersetzen." in out and "Auch nicht." in out
    assert 'alt="Kein Bild"' in out and 'title="Kein Titel"' in out and 'alt="[EIN BILD]"' in out
    assert '<html lang="en">' in out and 'xml:lang="en"' in out and 'lang="fr"' in out
    assert '<p lang="de">Nicht' in out  # inside a marked element: its content is still German
    assert '<pre lang="de">Vorformatiert.</pre>' in out  # and so is what is never translated
    assert '<html lang="de-DE">' in translate_html(page, "de", _upper)  # no target: no language changed


def test_html_tags_keep_their_side_of_spaces_and_punctuation() -> None:
    """A tag that closes before punctuation closes before the translation's; an empty element (code kept
    as it is, br, img, a comment) keeps the spaces around it, so it never glues two words together."""
    from aiayn.documents.html import translate_html

    def up(sentences: list[str]) -> list[str]:
        return [s.upper() for s in sentences]

    cases = {
        "<p>Ein <b>Hund</b>. Zwei <i>Katzen</i>!</p>": "<p>EIN <b>HUND</b>. ZWEI <i>KATZEN</i>!</p>",
        "<p>Ein Hund <b>rennt</b>.</p>": "<p>EIN HUND <b>RENNT</b>.</p>",
        "<p>„<b>Hund</b>“, sagte er.</p>": "<p>„<b>HUND</b>“, SAGTE ER.</p>",
        "<p>Siehe <code>x</code> hier.</p>": "<p>SIEHE <code>x</code> HIER.</p>",
        "<p>Siehe <code>x = 1</code>, dann <b>weiter</b>.</p>": "<p>SIEHE <code>x = 1</code>, DANN <b>WEITER</b>.</p>",
        "<p>Ein <br>Hund.</p>": "<p>EIN <br>HUND.</p>",
        # the space the model reads for a <br> is not written: the source has none there
        "<p>Ein Hund.<br>Zwei Katzen.</p>": "<p>EIN HUND.<br>ZWEI KATZEN.</p>",
        "<p>Ein Hund.<br> Zwei Katzen.</p>": "<p>EIN HUND.<br> ZWEI KATZEN.</p>",
        "<p>Eine Frau<br>liest.</p>": "<p>EINE FRAU<br>LIEST.</p>",
        "<p>Ein<br><br>Hund.</p>": "<p>EIN<br><br>HUND.</p>",
        "<p>Ein <b>Hund<br></b>rennt.</p>": "<p>EIN <b>HUND<br></b>RENNT.</p>",
        "<p>Ein<img src=x> Hund.</p>": '<p>EIN<img src="x"> HUND.</p>',
        "<p>Ein <!-- c --> Hund.</p>": "<p>EIN <!-- c --> HUND.</p>",
    }
    for source, expected in cases.items():
        assert translate_html(source, "de", up) == expected, source


def test_html_pages_are_told_from_fragments_by_their_first_tag() -> None:
    """A page: a doctype, or html/head/body as the first tag, after comments or an XHTML page's XML
    declaration (with an encoding, which lxml refuses in a str); "<html" inside a fragment's text is text."""
    from aiayn.documents.html import translate_html

    xhtml = (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Titel</title></head>'
        "<body><p>Ein Hund.</p></body></html>"
    )
    out = translate_html(xhtml, "de", _upper)
    assert "<title>[TITEL]</title>" in out and "<p>[EIN HUND.]</p>" in out and _balanced(out)
    assert 'encoding="utf-8"' in out  # kept, as the comment an HTML parser reads it as

    page = "<!-- " + "lang " * 400 + "-->\n<html><body><p>Ein Hund.</p></body></html>"
    assert translate_html(page, "de", _upper) == page.replace("\n", "").replace("Ein Hund.", "[EIN HUND.]")

    fragment = "<p>Das Element <code>&lt;html&gt;</code> beginnt.</p>"
    assert translate_html(fragment, "de", _upper) == "<p>[DAS ELEMENT <code>&lt;html&gt;</code> BEGINNT.]</p>"
    assert translate_html("<body><p>Hallo.</p></body>", "de", _upper) == ("<html><body><p>[HALLO.]</p></body></html>")
    # a page that starts with its head: read as a fragment, it lost the head and its title
    page = "<head><title>Titel</title></head><body><p>Hallo.</p></body>"
    assert translate_html(page, "de", _upper) == (
        "<html><head><title>[TITEL]</title></head><body><p>[HALLO.]</p></body></html>"
    )


_WORDS = ["Ein", "Hund", "rennt", "über", "die", "Wiese.", "Zwei", "Männer", "spielen", "Fußball."]
_INLINE = [("b", ""), ("i", ""), ("a", ' href="/x?y=1"'), ("span", ' class="k"'), ("em", ""), ("strong", "")]


@given(
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 5)), max_size=6),
    st.booleans(),
    st.booleans(),
)
# nested <a> over one word: the parser closes the outer one, an empty point; it put a space inside "FUSSBALL."
@example(spans=[(0, 6, 0), (7, 7, 2), (7, 7, 2)], br=False, aligned=False)
# a tag that ends before a <br> but is placed elsewhere took the space after it for the <br>'s
@example(spans=[(7, 9, 0)], br=True, aligned=True)
def test_any_inline_markup_comes_back_well_formed_with_every_tag(spans: list, br: bool, aligned: bool) -> None:
    """Nested and adjacent inline tags over random word ranges, a reversing 'translation' (words move),
    tags placed by position or through the reversal's word links (which cross every tag order):
    the output is balanced, has the same tags and attributes, and its text is the translation."""
    from aiayn.documents.html import translate_html

    opens: dict[int, list[str]] = {}
    closes: dict[int, list[str]] = {}
    for a, b, k in spans:  # properly nested by construction: ranges sorted by start, cut to nest
        a, b = min(a, b), max(a, b)
        tag, attr = _INLINE[k]
        opens.setdefault(a, []).append(f"<{tag}{attr}>")
        closes.setdefault(b, []).insert(0, f"</{tag}>")
    words = []
    for i, w in enumerate(_WORDS):
        words.append("".join(opens.get(i, [])) + w + "".join(closes.get(i, [])))
    snippet = "<p>" + " ".join(words) + ("<br>Ende." if br else "") + "</p>"
    assume(_balanced(snippet))  # crossed ranges are not well-formed input: hypothesis draws again

    def reverse(sentences: list[str]) -> list[str]:
        return [" ".join(reversed(s.upper().split())) for s in sentences]

    def links(sources: list[str], targets: list[str]) -> list:
        return [[frozenset({len(x.split()) - 1 - i}) for i in range(len(x.split()))] for x in sources]

    out = translate_html(snippet, "de", reverse, links if aligned else None)
    assert _balanced(out) and _tags(out) == _tags(snippet)
    plain = " ".join(("Ein Hund rennt über die Wiese. Zwei Männer spielen Fußball." + (" Ende." if br else "")).split())
    from aiayn.documents.segment import segment

    assert _text(out) == " ".join(reverse(segment(plain, "de").sentences))


def test_html_tags_follow_the_word_links_they_are_given() -> None:
    """With `align` (Translator.align's word links), a tag over whole words of one sentence covers the words
    they are linked to; a tag that cuts a word or spans sentences, and a sentence without links, map by
    position, as does one whose links spread over more than twice its words (+1); sentences without tags
    are not aligned at all."""
    from aiayn.documents.html import translate_html

    calls: list[tuple[list[str], list[str]]] = []

    def given(table: dict[str, tuple[str, list]]):
        def translate(sentences: list[str]) -> list[str]:
            return [table[x][0] for x in sentences]

        def align(sources: list[str], targets: list[str]) -> list:
            calls.append((sources, targets))
            return [None if table[x][1] is None else [frozenset(w) for w in table[x][1]] for x in sources]

        return translate, align

    table = {
        "Ein Mann fährt Fahrrad.": ("A man is riding a bicycle.", [{0}, {1}, {2, 3}, {5}]),
        "Er hat das Buch gelesen.": ("He read the book.", [{0}, {1}, {2}, {3}, {1}]),
        "Ein (Hund) rennt.": ("A (dog) runs.", [{0}, {1}, {2}]),
        "Zwei Kinder.": ("Two children.", None),
        "Ein Hund rennt schnell.": ("A dog runs very fast.", [{0}, {0, 3}, {2}, {4}]),
        "Gestern lief er.": ("He ran yesterday.", [{2}, {1}, {0}]),
        "Ein Hund-Leine.": ("A dog leash.", [{0}, {1, 2}]),
        "Nur Text.": ("Just text.", [{0}, {1}]),
        "Sie kocht.": ("She is cooking now.", [{0}, {1, 3}]),
    }
    translate, align = given(table)
    cases = {
        "<p>Ein <b>Mann</b> fährt <i>Fahrrad</i>.</p>": "<p>A <b>man</b> is riding a <i>bicycle</i>.</p>",
        "<p><b>Ein</b> Mann <i>fährt</i> Fahrrad.</p>": "<p><b>A</b> man <i>is riding</i> a bicycle.</p>",
        "<p>Ein Mann fährt <b>Fahrrad.</b></p>": "<p>A man is riding a <b>bicycle.</b></p>",
        # a tag at the sentence's start goes where its word's translation is, not to the start
        "<p><b>Gestern</b> lief er.</p>": "<p>He ran <b>yesterday</b>.</p>",
        "<p>Gestern <b>lief er.</b></p>": "<p><b>He ran</b> yesterday.</p>",
        # the translation reorders the tagged words: the sibling elements change places, tails and all
        "<p>Er hat <b>das Buch</b> <i>gelesen</i>.</p>": "<p>He <i>read</i> <b>the book</b>.</p>",
        "<p>Er <em>hat <b>das Buch</b> <i>gelesen</i></em>.</p>": "<p>He <em><i>read</i> <b>the book</b></em>.</p>",
        # links over exactly twice its words plus one are still an alignment
        "<p>Sie <b>kocht</b>.</p>": "<p>She <b>is cooking now</b>.</p>",
    }
    for source, expected in cases.items():
        assert translate_html(source, "de", translate, align) == expected, source
        assert translate_html(source, "de", translate) != expected, source  # by position it lands elsewhere
    # an element placed by position between or inside them (a comment) keeps the source's order, and so
    # does one the run does not hold (an input in a label): the later tag empty
    assert translate_html("<p>Er hat <b>das Buch</b><!-- c --> <i>gelesen</i>.</p>", "de", translate, align) == (
        "<p>He read <b>the book</b><!-- c --><i></i>.</p>"
    )
    assert translate_html("<p>Er hat <b>das Buch</b> <i>gelesen<!-- c --></i>.</p>", "de", translate, align) == (
        "<p>He read <b>the book</b><i><!-- c --></i>.</p>"
    )
    labelled = '<p>Er hat <label><b>das Buch</b> <input name="q"> <i>gelesen</i></label>.</p>'
    assert translate_html(labelled, "de", translate, align) == (
        '<p>He <label>read <b>the book</b><input name="q"> <i></i></label>.</p>'
    )
    assert translate_html("<p>Ein (<b>Hund</b>) rennt.</p>", "de", translate, align) == "<p>A (<b>dog</b>) runs.</p>"
    assert translate_html("<p>Ein<b> (Hund)</b> rennt.</p>", "de", translate, align) == "<p>A <b>(dog)</b> runs.</p>"
    for by_position in [
        "<p>Ein Mann fährt Fahr<b>rad</b>.</p>",  # cuts a word
        "<p>Ein Mann fährt <b>Fahrrad. Zwei</b> Kinder.</p>",  # across two sentences
        "<p>Zwei <b>Kinder</b>.</p>",  # no links for the sentence
        "<p>Ein <b>Hund</b> rennt schnell.</p>",  # links over 4 words for 1: no alignment
        "<p>Ein <b>Hund</b>-Leine.</p>",  # leaves part of a word out
        "<p>Ein (Hund<b>)</b> rennt.</p>",  # holds punctuation alone
    ]:
        assert translate_html(by_position, "de", translate, align) == translate_html(by_position, "de", translate)
    calls.clear()
    page = "<p>Nur Text.</p><p>Ein Mann fährt<img src=x> Fahrrad.</p>"
    assert translate_html(page, "de", translate, align) == translate_html(page, "de", translate)
    assert calls == []  # no tag over any word (an img is a point, placed by position): nothing to align
    translate_html("<p>Nur Text. Ein <b>Mann</b> fährt Fahrrad.</p>", "de", translate, align)
    assert calls == [(["Ein Mann fährt Fahrrad."], ["A man is riding a bicycle."])]


def test_a_br_ends_a_sentence_as_a_line_break_does_in_text() -> None:
    """Issue #66: each line of a paragraph broken by <br> is translated as a sentence of its own, the br
    kept between the translations with the source's spacing around it (before, "Ein Hund im Park<br>Am
    Strand ..." was one sentence and its translation ran across the br); a tag across the br is placed
    by position in both."""
    from aiayn.documents.html import translate_html

    calls, translate = _recording(_upper)
    page = "<p>Ein Hund im Park<br>Am Strand spielen zwei Kinder.</p>"
    assert translate_html(page, "de", translate) == "<p>[EIN HUND IM PARK]<br>[AM STRAND SPIELEN ZWEI KINDER.]</p>"
    assert calls == [["Ein Hund im Park", "Am Strand spielen zwei Kinder."]]
    cases = {
        "<p>Ein Hund im Park <br>\n  Am Strand.</p>": "<p>[EIN HUND IM PARK] <br>\n  [AM STRAND.]</p>",
        "<p>Ein Hund<br><br>Am Strand</p>": "<p>[EIN HUND]<br><br>[AM STRAND]</p>",
        "<p><br>Ein Hund<br></p>": "<p><br>[EIN HUND]<br></p>",
        "<p>Ein Hund<br>Zwei <i>Katzen</i> spielen.</p>": "<p>[EIN HUND]<br>[ZWEI <i>KATZEN</i> SPIELEN.]</p>",
        "<p>Ein <b>Hund<br>im</b> Park</p>": "<p>[EIN <b>HUND]<br>[IM</b> PARK]</p>",
    }
    for source, expected in cases.items():
        assert translate_html(source, "de", _upper) == expected, source


def test_list_markers_that_start_a_line_are_kept_and_the_rest_translated() -> None:
    """Issue #66: sentencex cuts "1." off as a sentence of its own, and the model made words of it
    ("11 dogs."). A list marker at a line's start (bullets, numbers, letters, roman numerals, with "."
    or ")" or in parentheses) stays as it is, in the gap, and the rest of the line is cut as a line;
    in HTML at the start of a block (an <li>) or after a <br>. An abbreviation or a German ordinal at a
    line's start, and a marker inside a line, stay text."""
    from aiayn.documents.html import translate_html

    seg = segment("1. Ein Hund rennt.\n2. Zwei Kinder spielen.", "de")
    assert seg.sentences == ["Ein Hund rennt.", "Zwei Kinder spielen."] and seg.gaps == ["1. ", "\n2. ", ""]
    assert seg.join(["A dog runs.", "Two children play."]) == "1. A dog runs.\n2. Two children play."
    marked = {
        "  • Ein Hund rennt. Er bellt.": ("  • ", ["Ein Hund rennt.", "Er bellt."]),
        "- Ein Hund": ("- ", ["Ein Hund"]),
        "* Ein Hund": ("* ", ["Ein Hund"]),
        "– Ein Hund": ("– ", ["Ein Hund"]),
        "2) Ein Hund": ("2) ", ["Ein Hund"]),
        "(3) Ein Hund": ("(3) ", ["Ein Hund"]),
        "a) Ein Hund": ("a) ", ["Ein Hund"]),
        "b. Ein Hund": ("b. ", ["Ein Hund"]),
        "iv. Ein Hund": ("iv. ", ["Ein Hund"]),
        "IV) Ein Hund": ("IV) ", ["Ein Hund"]),
        "(xii) Ein Hund": ("(xii) ", ["Ein Hund"]),
        "1.2. Ein Hund": ("1.2. ", ["Ein Hund"]),
        "12. Zwei Kinder spielen.": ("12. ", ["Zwei Kinder spielen."]),
        "3.": ("3.", []),  # a marker alone on its line is layout too
    }
    for text, (gap, sentences) in marked.items():
        seg = segment(text, "de")
        assert (seg.gaps[0], seg.sentences) == (gap, sentences), text
    assert segment("1. A dog runs.", "en").sentences == ["A dog runs."]
    for text in (
        "1. Mai ist ein Feiertag.",  # an ordinal: sentencex reads it into the sentence
        "z. B. ein Hund.",  # abbreviations
        "d. h. ein Hund.",
        "S. 3 zeigt einen Hund.",
        "e.g. a dog.",
        "-3 Grad heute.",  # not a marker on its own
        "2015 war kalt.",
        "Ein Hund rennt, a) schnell.",  # not at the line's start
    ):
        seg = segment(text, "de")
        assert seg.sentences == [text] and seg.gaps == ["", ""], text
    assert segment("mix. Ein Hund", "de").sentences == ["mix.", "Ein Hund"]  # not a roman numeral
    calls, translate = _recording(_upper)
    page = "<ol><li>1. Ein Hund rennt.</li><li><b>2.</b> Zwei Kinder spielen.</li><li>• Drei<br>a) Vier</li></ol>"
    assert translate_html(page, "de", translate) == (
        "<ol><li>1. [EIN HUND RENNT.]</li><li><b>2.</b> [ZWEI KINDER SPIELEN.]</li><li>• [DREI]<br>a) [VIER]</li></ol>"
    )
    assert calls == [["Ein Hund rennt.", "Zwei Kinder spielen.", "Drei", "Vier"]]
    assert translate_html("<ul><li>-</li></ul>", "de", translate) == "<ul><li>-</li></ul>" and len(calls) == 1


def test_html_nested_past_the_parsers_depth_is_refused_never_emptied() -> None:
    """Issue #66: libxml2 stops reading past 256 levels of elements (or at a text node over 10 MB) and hands
    back what it read: the text after that point was lost, and the page came back translated without it.
    Its error is read: refused, saying where and why. One level less is read and translated whole."""
    from aiayn.documents.html import HtmlError, translate_html

    deepest = "<p>Ein " + "<span>" * 253 + "Hund" + "</span>" * 253 + " rennt.</p>"
    out = translate_html(deepest, "de", _upper)
    assert _text(out) == "[EIN HUND RENNT.]" and _tags(out) == _tags(deepest)
    too_deep = "<p>Ein " + "<span>" * 254 + "Hund" + "</span>" * 254 + " rennt.</p>"
    message = "cannot read the HTML past line 1, column 519 (Excessive depth in document: 256): the text from"
    with pytest.raises(HtmlError, match=message.replace("(", r"\(").replace(")", r"\)")):
        translate_html(too_deep, "de", _upper)
    with pytest.raises(HtmlError, match="cannot read the HTML past line 1"):
        translate_html("<html><body>" + "<div>" * 300 + "Hund</body></html>", "de", _upper)  # a page, unclosed
    with pytest.raises(HtmlError, match="Buffer size limit exceeded"):
        translate_html("<p>" + "Hund " * 2_200_000 + "</p>", "de", _upper)
