"""The rule filters of parallel text (aiayn.data.filters): each drops what it is for and keeps its near
miss, settings and the user's own filters, deduplication in corpus order, and the batched language
identifier, which must give py3langid's own probabilities."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.data import DataError
from aiayn.data import dedup as D
from aiayn.data import filters as F
from aiayn.data.language import BatchedIdentifier, identifier

# (filter, settings, a pair it drops, the near pair it keeps)
CASES = [
    ("length", {"max_words": 5}, ("eins zwei drei vier fünf sechs", "one"), ("eins zwei drei vier fünf", "one")),
    ("length", {"min_chars": 3}, ("Ja", "Yes"), ("Jaa", "Yes")),
    ("length_ratio", {}, ("Ein Hund.", "A dog runs through the tall grass of a park."),
     ("Ein Hund rennt.", "A dog runs.")),
    ("length_ratio", {}, ("Ein Hund rennt über die große Wiese.", "A dog runs over."),  # truncated: 2.2x
     ("Ein Hund rennt über die Wiese.", "A dog runs over.")),  # 1.9x
    ("length_ratio", {"max_words": 2}, ("Hund", "a dog runs"), ("Hund", "a dog")),
    ("length_ratio", {"max_words": 9, "max_chars": 2.0}, ("Hund rennt", "the big dog runs far away"),
     ("Hund rennt", "the dog runs")),
    ("length", {"max_chars": 10}, ("Ein Hund rennt", "A dog"), ("Ein Hund", "A dog")),
    ("length", {"min_words": 2}, ("Hund", "dog"), ("Ein Hund", "A dog")),
    ("langid", {}, ("Ein Hund rennt über die Wiese.", "Un chien court dans la prairie."),
     ("Ein Hund rennt über die Wiese.", "A dog runs across the meadow.")),
    ("langid", {}, ("A dog runs across the meadow.", "A dog runs across the meadow."),
     ("Ein Hund rennt über die Wiese.", "A dog is running across the meadow.")),
    ("untranslated", {}, ("Ein Hund rennt über die Wiese.", "ein hund rennt über die wiese!"),
     ("Ein Hund rennt über die Wiese.", "A dog runs across the meadow.")),
    ("untranslated", {}, ("Berlin Hauptbahnhof Gleis neun", "Berlin Hauptbahnhof Gleis nine"),
     ("Berlin Hauptbahnhof", "Berlin central station")),
    ("sentences", {}, ("Ein Hund rennt. Eine Frau liest.", "A dog runs."),  # glued on one side
     ("Ein Hund rennt, eine Frau liest.", "A dog runs.")),
    ("sentences", {}, ("Er kommt am 3. Mai. Sie bleibt.", "He comes on May 3."),
     ("Er kommt am 3. Mai.", "He comes on May 3.")),  # an ordinal's full stop ends no sentence
    ("sentences", {"max_diff": 1}, ("Ein Hund rennt. Eine Frau liest. Es regnet.", "A dog runs."),
     ("Ein Hund rennt. Eine Frau liest.", "A dog runs.")),
    ("digits", {}, ("Zimmer 12 im 3. Stock", "Room 12 on the 4th floor"),
     ("Zimmer 12 im 3. Stock", "Room 12, floor 3")),
    ("urls", {}, ("Mehr auf www.example.de.", "More at www.example.com."),
     ("Mehr auf www.example.de.", "More at www.example.de")),
    ("urls", {}, ("Schreiben Sie an a@b.de", "Write to c@d.de"), ("Schreiben Sie an a@b.de", "Write to a@b.de")),
    ("markup", {}, ("Ein <b>Hund</b>", "A <b>dog</b>"), ("Ein Hund < Katze", "A dog < cat")),
    ("markup", {}, ("Steine &amp; Fliesen", "stone &amp; tile"), ("Steine & Fliesen", "stone & tile")),
    ("punctuation", {}, ("*** !!! ---", "*** !!! ---"), ("Hallo, Welt!", "Hello, world!")),
    ("punctuation", {"max_share": 0.3}, ("a.b.c.d", "a.b.c.d"), ("ab.cd.e", "ab.cd.e")),
    ("case", {}, ("EIN HUND RENNT", "a dog runs"), ("Ein Hund rennt", "A dog runs")),
    ("case", {"max_diff": 0.2}, ("EIN Hund", "a dog"), ("Ein Hund", "A dog")),
    ("contains", {"words": ["Cookies"]}, ("Wir nutzen Cookies.", "We use cookies."),
     ("Wir nutzen Kekse.", "We use cookies.")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "conf", "drop", "keep"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_filter_drops_its_pair_and_keeps_the_near_one(name, conf, drop, keep):
    (f,) = F.parse_filters([{name: conf}], "de", "en")
    assert f.keep([drop[0], keep[0]], [drop[1], keep[1]]).tolist() == [False, True]


@pytest.mark.needs_mirror
def test_the_default_rules_keep_real_captions():
    from conftest import multi30k_mirror

    d = multi30k_mirror()
    de, en = ([x.decode() for x in gzip.open(d / f"train.{lang}.gz").read().splitlines()] for lang in ("de", "en"))
    fs = F.parse_filters(["default"], "de", "en")
    chain = F.Chain(tuple(fs), F.reasons_of([fs]))
    codes = D.Deduplicator(chain.reasons)(chain.verdicts(de, en))
    # Multi30k's own few: "&amp;" left in 16 captions, 5 copies, 15 whose one side is over twice the
    # other's length in characters ("Man cutting cake on a pink mat.", a German "@@", two captions glued),
    # and 68 written as two sentences on one side and one on the other
    assert (codes != 0).sum() < 0.004 * len(de)
    assert (codes == 1 + chain.reasons.index("sentences")).sum() < 0.003 * len(de)


def test_langid_drops_a_wrong_language_only_past_its_margin():
    """ "Hallo Welt" is a near tie between languages: dropped with no margin, kept with the default one."""
    from aiayn.data.language import language_probabilities

    short, long_ = "Tor!", "Ein Hund rennt über die grüne Wiese im Park."
    top, p_top, p_de = language_probabilities([short, long_], "de")
    assert top[0] != "de" and 0 < p_top[0] - p_de[0] < 0.5 and top[1] == "de"  # the premise: a near tie
    for margin, kept in ((0.0, [False, True]), (0.5, [True, True])):
        assert (
            F.langid([short, long_], ["Hello, my friend.", "A dog runs."], "de", "en", margin=margin).tolist() == kept
        )


def test_length_ratio_leaves_scripts_without_spaces_alone():
    zh = ["我今天早上去商店买了一些苹果和香蕉。", "他们在公园里踢足球。"]
    en = [
        "This morning I went to the store and bought some apples and bananas.",
        "They are playing football in the park.",
    ]
    assert F.length_ratio(zh, en) == [True, True]
    assert F.length_ratio(["Hund"], ["This morning I went to the store and bought some apples."]) == [False]


def test_langid_reads_region_tags_as_their_language():
    (langid,) = [f for f in F.parse_filters(["default"], "de-DE", "en_GB") if f.name == "langid"]
    assert (langid.settings["src_lang"], langid.settings["tgt_lang"]) == ("de", "en")


def test_repeated_empty_pairs_count_as_empty():
    fs = F.parse_filters(["duplicates"], "de", "en")
    chain = F.Chain(tuple(fs), F.reasons_of([fs]))
    codes = D.Deduplicator(chain.reasons)(chain.verdicts(["", "", "Hund", "Hund"], ["dog", "dog", "dog", "dog"]))
    assert [chain.reasons[c - 1] if c else "kept" for c in codes.tolist()] == ["empty", "empty", "kept", "duplicates"]


def test_settings_replace_and_default_expands_once():
    fs = F.parse_filters(["default", {"langid": {"margin": 0.2}}, "default"], "de", "en")
    names = [f.name for f in fs]
    assert names.count("langid") == 1 and set(F.DEFAULT) <= set(names)
    (langid,) = [f for f in fs if f.name == "langid"]
    assert langid.settings == {"src_lang": "de", "tgt_lang": "en", "margin": 0.2}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (["nonsense"], "unknown filter 'nonsense'"),
        ([{"length": {"max_word": 3}}], r"filter length has no setting max_word; its settings: \['min_chars'"),
        ([{"duplicates": {"x": 1}}], "duplicates has no settings"),
        ([["length"]], r"is not a filter name or \{name: \{setting: value\}\}"),
        (["no_such_module_here:f"], "cannot be loaded"),
    ],
)
def test_filter_mistakes_are_one_line(spec, message):
    with pytest.raises(DataError, match=message):
        F.parse_filters(spec, "de", "en")


def test_a_users_filter_from_a_file_runs_in_worker_processes(tmp_path, home):
    from aiayn.data.clean import clean_source
    from aiayn.data.pairs import LinePair
    from aiayn.data.pipeline import Options

    (tmp_path / "mine.py").write_text(
        "def no_shouting(src, tgt, max_upper=0.5):\n"
        "    return [sum(c.isupper() for c in t) <= max_upper * max(1, len(t)) for t in tgt]\n"
    )
    n = 30_000  # a file over 4 MiB: filtered in worker processes
    src = [f"Satz Nummer {i} mit etwas mehr Text, damit die Datei groß genug wird." for i in range(n)]
    tgt = [
        f"SENTENCE NUMBER {i} SHOUTED" if i % 7 == 0 else f"Sentence number {i} with some more text." for i in range(n)
    ]
    (tmp_path / "c.de").write_text("\n".join(src) + "\n")
    (tmp_path / "c.en").write_text("\n".join(tgt) + "\n")
    fs = F.parse_filters([{f"{tmp_path / 'mine.py'}:no_shouting": {"max_upper": 0.3}}], "de", "en")
    out = clean_source(
        LinePair(tmp_path / "c.de", tmp_path / "c.en"), "c", fs, "de", "en", tmp_path / "out", Options(workers=2)
    )
    assert out.removed == {"no_shouting": len(range(0, n, 7))}
    kept = (tmp_path / "out" / "c.en").read_text().split("\n")[:-1]
    assert kept == [t for i, t in enumerate(tgt) if i % 7]


def test_a_filter_answering_for_the_wrong_number_of_pairs_is_refused(tmp_path):
    (tmp_path / "bad_filter.py").write_text("def one(src, tgt):\n    return [True]\n")
    (f,) = F.parse_filters([f"{tmp_path / 'bad_filter.py'}:one"], "de", "en")
    with pytest.raises(DataError, match="filter one returned 1 values for 2 pairs"):
        f.keep(["a", "b"], ["a", "b"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=300), st.lists(st.integers(1, 50), min_size=1, max_size=20))
def test_the_hash_set_says_which_came_before(values, cuts):
    s, seen, at, k = D.HashSet(), set(), 0, 0
    while at < len(values):
        batch = values[at : at + cuts[k % len(cuts)]]
        got = s.add(np.asarray(batch, dtype=np.uint64))
        want = []
        for v in batch:
            want.append(v in seen)
            seen.add(v)
        assert got.tolist() == want
        at, k = at + len(batch), k + 1
    assert len(s) == len(seen)


def test_copies_count_as_duplicates_whatever_else_they_are():
    fs = F.parse_filters(["duplicates", "untranslated"], "de", "en")
    chain = F.Chain(tuple(fs), F.reasons_of([fs]))
    dedup = D.Deduplicator(chain.reasons)
    src = ["Ein Hund.", "Seite 3 von 9", "gleich gleich gleich", "Ein Hund.", "Seite 4 von 9", "gleich gleich gleich"]
    tgt = ["A dog.", "Page 3 of 9", "gleich gleich gleich", "A dog.", "Page 4 of 9", "gleich gleich gleich"]
    codes = dedup(chain.verdicts(src[:3], tgt[:3])).tolist() + dedup(chain.verdicts(src[3:], tgt[3:])).tolist()
    names = ["kept" if c == 0 else chain.reasons[c - 1] for c in codes]
    assert names == ["kept", "kept", "untranslated", "duplicates", "near_duplicates", "duplicates"]


def _texts() -> list[str]:
    from synthetic_text import captions

    en, de = captions(300, seed=2)
    return (
        en
        + de
        + ["", " ", "12345", "ÄÖÜ HALLO WELT", "日本語のテキストです", "Привет, мир", "x", "\u0301a", "a\ud800b"]
    )


def _agree(ident, texts: list[str], batch: int) -> None:
    """Every label's probability as py3langid's rank gives it (an aliased label: its first column)."""
    got = BatchedIdentifier(ident, batch=batch).probabilities(texts)
    for text, row in zip(texts, got):
        mine: dict[str, float] = {}
        for label, p in zip(ident.nb_classes, row.tolist()):
            mine.setdefault(label, p)
        want = dict(ident.rank(text))
        assert mine.keys() == want.keys()
        assert max(abs(mine[k] - want[k]) for k in want) < 1e-4, text


def test_the_batched_identifier_gives_py3langids_probabilities():
    _agree(identifier(), _texts(), batch=64)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=80), min_size=1, max_size=12))
def test_the_batched_identifier_agrees_on_any_text(texts):
    _agree(identifier(), texts, batch=5)
