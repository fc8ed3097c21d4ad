"""A run's own data: TMX, XLIFF, TSV, CSV and JSON lines read as pairs, several sources in one run with
their filters and weights, and OPUS corpora by name from a local stand-in for OPUS."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np
import pytest

from aiayn.config import DataConfig
from aiayn.data import DataError, prepare
from aiayn.data.batching import BatchIterator, weighted_draw
from aiayn.data.encoded import EncodedSplit
from aiayn.data.formats import read_pairs
from aiayn.data.pipeline import Options
from local_http import FileServer
from synthetic_text import captions


def _unique(n: int, seed: int, skip: set[tuple[str, str]] = frozenset()) -> tuple[list[str], list[str]]:
    """n distinct caption pairs (the synthetic captions repeat themselves), none of `skip`."""
    pairs = [p for p in dict.fromkeys(zip(*captions(4000, seed))) if p not in skip][:n]
    assert len(pairs) == n
    return [e for e, _ in pairs], [d for _, d in pairs]


EN, DE = _unique(400, seed=3)
VALID_EN, VALID_DE = captions(60, seed=4)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


def tmx(path: Path, src: list[str], tgt: list[str], langs: tuple[str, str] = ("de-DE", "en-GB")) -> Path:
    units = "".join(
        f'<tu><tuv xml:lang="{langs[0]}"><seg>{escape(s)}</seg></tuv><tuv xml:lang="{langs[1]}"><seg>{escape(t)}'
        f"</seg></tuv></tu>\n"
        for s, t in zip(src, tgt)
    )
    path.write_text(
        f'<?xml version="1.0" encoding="UTF-8"?>\n<tmx version="1.4"><header/><body>\n{units}</body></tmx>\n'
    )
    return path


def xliff12(path: Path, src: list[str], tgt: list[str], langs: tuple[str, str] = ("de", "en")) -> Path:
    units = "".join(
        f'<trans-unit id="{i}"><source>{escape(s)}</source><target>{escape(t)}</target></trans-unit>\n'
        for i, (s, t) in enumerate(zip(src, tgt))
    )
    path.write_text(
        '<?xml version="1.0"?>\n<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">'
        f'<file source-language="{langs[0]}" target-language="{langs[1]}" datatype="plaintext" original="x"><body>\n'
        f"{units}</body></file></xliff>\n"
    )
    return path


def xliff20(path: Path, src: list[str], tgt: list[str]) -> Path:
    units = "".join(
        f'<unit id="{i}"><segment><source>{escape(s)}</source><target>{escape(t)}</target></segment></unit>\n'
        for i, (s, t) in enumerate(zip(src, tgt))
    )
    path.write_text(
        '<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="de-AT" trgLang="en">'
        f'<file id="f">{units}</file></xliff>\n'
    )
    return path


def tsv(path: Path, src: list[str], tgt: list[str], header: str = "German\tEnglish\n") -> Path:
    path.write_text(header + "".join(f"{s}\t{t}\n" for s, t in zip(src, tgt)), encoding="utf-8")
    return path


def csv_file(path: Path, src: list[str], tgt: list[str]) -> Path:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "en", "de"])
        for i, (s, t) in enumerate(zip(src, tgt)):
            w.writerow([i, t, s])
    return path


def jsonl(path: Path, src: list[str], tgt: list[str]) -> Path:
    path.write_text("".join(json.dumps({"translation": {"de": s, "en": t}}) + "\n" for s, t in zip(src, tgt)))
    return path


FORMATS = {
    "tmx": lambda d: {"path": str(tmx(d / "m.tmx", DE, EN))},
    "xliff 1.2": lambda d: {"path": str(xliff12(d / "m.xlf", DE, EN))},
    "xliff 1.2, the other way round": lambda d: {"path": str(xliff12(d / "r.xlf", EN, DE, ("en-US", "de")))},
    "xliff 2.0": lambda d: {"path": str(xliff20(d / "m.xliff", DE, EN))},
    "tsv with named columns": lambda d: {"path": str(tsv(d / "m.tsv", DE, EN)), "columns": ["German", "English"]},
    "csv with a header of languages": lambda d: {"path": str(csv_file(d / "m.csv", DE, EN))},
    "json lines": lambda d: {"path": str(jsonl(d / "m.jsonl", DE, EN))},
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_each_format_reads_the_pairs_as_they_are(tmp_path, fmt):
    entry = FORMATS[fmt](tmp_path)
    path = Path(entry["path"])
    kind = {".tmx": "tmx", ".xlf": "xliff", ".xliff": "xliff", ".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl"}
    found = list(read_pairs(path, kind[path.suffix], "de", "en", entry.get("columns")))
    assert [(s, t) for _, s, t in found] == list(zip(DE, EN))
    lines = [n for n, _, _ in found]
    assert lines == sorted(lines) and len(set(lines)) == len(lines) and lines[0] >= 1  # each pair's own line


def _sources_cfg(tmp_path: Path, sources: list, **kw) -> DataConfig:
    valid = (write_lines(tmp_path / "valid.de", VALID_DE), write_lines(tmp_path / "valid.en", VALID_EN))
    return DataConfig(
        corpus="sources",
        src_lang="de",
        tgt_lang="en",
        sources=sources,
        valid_src=str(valid[0]),
        valid_tgt=str(valid[1]),
        vocab_size=400,
        **kw,
    )


ARRAYS = ("src", "tgt", "src_offsets", "tgt_offsets", "index", "src_lengths", "tgt_lengths")


def _digest(prep) -> dict[str, str]:
    d = prep.cache_dir
    files = [f"{s}.{a}.npy" for s in ("train", "valid", "test") for a in ARRAYS] + ["spm.model"]
    return {f: hashlib.sha256((d / f).read_bytes()).hexdigest() for f in files}


def test_every_format_prepares_the_cache_the_same_pairs_in_plain_files_do(tmp_path, home):
    plain = {"src": str(write_lines(tmp_path / "m.de", DE)), "tgt": str(write_lines(tmp_path / "m.en", EN))}
    want = _digest(prepare(_sources_cfg(tmp_path, [plain]), options=Options(workers=1)))
    for fmt, make in FORMATS.items():
        got = _digest(prepare(_sources_cfg(tmp_path, [make(tmp_path)]), options=Options(workers=1)))
        assert got == want, fmt


def test_tmx_keeps_inline_text_and_drops_native_codes(tmp_path):
    path = tmp_path / "inline.tmx"
    path.write_text(
        '<tmx version="1.4"><header/><body>'
        '<tu><tuv xml:lang="DE"><seg>Ein <bpt i="1">&lt;b&gt;</bpt>Hund<ept i="1">&lt;/b&gt;</ept>\n rennt '
        '<ph>{0}</ph>schnell<hi>.</hi></seg></tuv><tuv lang="en-US"><seg>A dog runs fast.</seg></tuv></tu>'
        '<tu><tuv xml:lang="fr"><seg>Un chien.</seg></tuv><tuv xml:lang="es"><seg>Un perro.</seg></tuv></tu>'
        '<tu><tuv xml:lang="de"><seg>Nur Deutsch.</seg></tuv></tu>'
        "</body></tmx>"
    )
    assert [(s, t) for _, s, t in read_pairs(path, "tmx", "de", "en")] == [
        ("Ein Hund  rennt schnell.", "A dog runs fast."),
        ("Nur Deutsch.", ""),
    ]


def test_xliff_units_without_a_target_are_empty_pairs_and_other_languages_are_refused(tmp_path):
    path = tmp_path / "m.xlf"
    path.write_text(
        '<xliff version="1.2"><file source-language="de" target-language="en"><body>'
        '<trans-unit id="1"><source>Ein <g id="1">Hund</g><x id="2"/>.</source></trans-unit>'
        "</body></file></xliff>"
    )
    assert list(read_pairs(path, "xliff", "de", "en")) == [(1, "Ein Hund.", "")]
    with pytest.raises(DataError, match=r"m\.xlf: the file translates de -> en, not fr -> en"):
        list(read_pairs(path, "xliff", "fr", "en"))


@pytest.mark.parametrize(
    ("name", "text", "fmt", "message"),
    [
        ("bad.tmx", "<tmx><body><tu>", "tmx", r"bad\.tmx: not well-formed XML"),
        ("bad.xlf", "not xml at all", "xliff", r"bad\.xlf: not well-formed XML"),
        ("bad.tsv", "Ein Hund\tA dog\nZwei Hunde\n", "tsv", r"bad\.tsv: line 2 has 1 field\(s\); column 2 is missing"),
        ("bad.jsonl", '{"de": "Ein Hund", "en": "A dog"}\n[1, 2]\n', "jsonl", r"bad\.jsonl: line 2 is not an object"),
        ("bad2.jsonl", '{"de": "Ein Hund"\n', "jsonl", r"bad2\.jsonl: line 1 is not JSON"),
        ("latin1.tsv", "Gr\xfc\xdfe\tGreetings\n", "tsv", r"latin1\.tsv: line 1 is not valid UTF-8"),
    ],
)
def test_what_cannot_be_read_is_one_line_naming_the_file_and_line(tmp_path, name, text, fmt, message):
    path = tmp_path / name
    path.write_bytes(text.encode("latin-1") if name.startswith("latin1") else text.encode())
    with pytest.raises(DataError, match=message):
        list(read_pairs(path, fmt, "de", "en"))


def test_a_tmx_is_read_as_a_stream_holding_no_earlier_unit(tmp_path, monkeypatch):
    from aiayn.data import formats

    path = tmx(tmp_path / "big.tmx", DE * 5, EN * 5)
    held = []
    original = formats.inline_text

    def spy(el):
        unit = el.getparent().getparent()  # seg -> tuv -> tu
        held.append(len(list(unit.itersiblings(preceding=True))))  # earlier units still in <body>
        return original(el)

    monkeypatch.setattr(formats, "inline_text", spy)
    assert len(list(read_pairs(path, "tmx", "de", "en"))) == 5 * len(DE)
    assert max(held) <= 1  # the one before, emptied: each unit is freed once read (memory flat in the file)


def test_sources_mistakes_are_one_line_each(tmp_path, home):
    de = str(write_lines(tmp_path / "m.de", DE))
    cases = [
        ([{"src": de}], "give exactly one of `path`, `src` with `tgt`, or `opus`"),
        ([{"path": de, "weight": 0}], r"weight must be a number above 0"),
        ([{"path": str(tmp_path / "none.tmx")}], r"file not found: .*none\.tmx"),
        ([{"path": de, "colour": "red"}], r"unknown keys \['colour'\]"),
        ([{"src": de, "tgt": de, "split": "valid"}], "has no training source"),
        ([{"src": de, "tgt": de}, {"src": de, "tgt": de}], "the name 'm' is given twice"),
        ([{"path": de}], r"is one file of plain lines; give `src` and `tgt`, or its `format`"),
        ([{"src": de, "tgt": de, "filters": [{"langid": {"marg": 1}}]}], r"filter langid has no setting marg"),
        ([{"src": de, "tgt": de, "filters": [{"length": {"max_chars": "many"}}]}], r"length's max_chars is a number"),
        ([{"path": de, "weight": float("inf")}], r"weight must be a number above 0"),
        (
            [{"src": de, "tgt": de}, {"src": de, "tgt": de, "name": "v", "split": "valid", "weight": 2}],
            "a valid source is read as it is",
        ),
    ]
    for sources, message in cases:
        with pytest.raises(DataError, match=message):
            prepare(_sources_cfg(tmp_path, sources), options=Options(workers=1))


def test_two_sources_are_filtered_each_by_its_own_and_counted_by_source(tmp_path, home):
    de_fr = _unique(40, seed=9, skip=set(zip(EN, DE)))[1]  # German where English should be: untranslated
    src = DE[:300] + DE[:50] + de_fr
    tgt = EN[:300] + EN[:50] + de_fr
    crawl = {"src": str(write_lines(tmp_path / "crawl.de", src)), "tgt": str(write_lines(tmp_path / "crawl.en", tgt))}
    memory = {"path": str(tmx(tmp_path / "memory.tmx", DE[300:] + DE[:10], EN[300:] + EN[:10])), "filters": ["length"]}
    cfg = _sources_cfg(tmp_path, [crawl, memory], filters=["duplicates", "untranslated"])
    one, two = (prepare(cfg, options=Options(workers=w, chunk_lines=64)) for w in (1, 2))
    assert _digest(one) == _digest(two)  # deduplication runs in corpus order, whatever the workers
    by = {s["name"]: s for s in one.report["sources"]}
    assert by["crawl"]["lines"] == 390 and by["crawl"]["dropped"] == {"duplicates": 50, "untranslated": 40}
    assert by["memory"]["dropped"] == {"duplicates": 10}  # copies of the crawl's pairs, across sources
    assert by["crawl"]["pairs"] + by["memory"]["pairs"] == len(one.splits["train"]) == 400
    src_kept, _ = one.raw("train")
    assert src_kept == DE[:300] + DE[300:]  # the kept pairs, in order


def test_a_source_its_filters_empty_is_refused_naming_them(tmp_path, home):
    same = str(write_lines(tmp_path / "same.de", DE[:50]))
    crawl = {"src": str(write_lines(tmp_path / "m.de", DE)), "tgt": str(write_lines(tmp_path / "m.en", EN))}
    cfg = _sources_cfg(tmp_path, [crawl, {"src": same, "tgt": same, "name": "copy", "filters": ["untranslated"]}])
    with pytest.raises(DataError, match="source 'copy' has no pairs left after cleaning: untranslated 50"):
        prepare(cfg, options=Options(workers=1))


def test_weights_draw_each_source_weight_times_an_epoch():
    sizes, weights = [100, 1000], [3.0, 0.25]
    seen = np.zeros(1100, dtype=np.int64)
    for epoch in range(8):
        draw = weighted_draw(sizes, weights, seed=1, epoch=epoch)
        assert len(draw) == 300 + 250
        seen += np.bincount(draw, minlength=1100)
    assert (seen[:100] == 24).all()  # three times an epoch
    assert (seen[100:] == 2).all()  # a quarter each epoch, a different quarter, every pair once in 4


def _split(n: int, seed: int = 0) -> EncodedSplit:
    rng = np.random.default_rng(seed)
    rows = [list(rng.integers(4, 50, rng.integers(1, 12))) for _ in range(n)]
    return EncodedSplit.from_ids(rows, rows)


def test_the_batches_take_each_sources_share_and_resume_where_they_were():
    split = _split(1100)
    it = BatchIterator(split, 256, seed=5, mix=[(100, 4.0), (1000, 0.5)])
    ids = np.concatenate([b.ids.numpy() for b in it])
    share = (ids < 100).mean()
    assert abs(share - 400 / 900) < 1e-9  # weight x pairs over the sum
    mid = BatchIterator(split, 256, seed=5, mix=[(100, 4.0), (1000, 0.5)])
    first = [b.ids.numpy() for _, b in zip(range(7), mid)]
    state = mid.state_dict()
    again = BatchIterator(split, 256, seed=5, mix=[(100, 4.0), (1000, 0.5)])
    again.load_state_dict(state)
    rest = [b.ids.numpy() for b in again]
    assert np.array_equal(np.concatenate(first + rest), ids)
    other = BatchIterator(split, 256, seed=5, mix=[(100, 2.0), (1000, 0.5)])
    with pytest.raises(DataError, match="weights changed"):
        other.load_state_dict(state)


def test_a_run_with_weights_draws_its_batches_from_them(tmp_path, home):
    import torch

    from aiayn.config import Config
    from aiayn.distributed import DistInfo
    from aiayn.train.tasks.spec import sentence_batches

    small = {"src": str(write_lines(tmp_path / "a.de", DE[:100])), "tgt": str(write_lines(tmp_path / "a.en", EN[:100]))}
    big = {"src": str(write_lines(tmp_path / "b.de", DE[100:])), "tgt": str(write_lines(tmp_path / "b.en", EN[100:]))}
    cfg = Config(data=_sources_cfg(tmp_path, [{**small, "weight": 5}, {**big, "weight": 0.5}], max_tokens=512))
    prep = prepare(cfg.data, options=Options(workers=1))
    it = sentence_batches(cfg, prep, DistInfo(), torch.device("cpu"))
    ids = np.concatenate([b.ids.numpy() for b in it])
    assert len(ids) == 500 + 150 and (ids < 100).sum() == 500


def test_an_opus_corpus_comes_by_name_through_a_mirror(tmp_path, home, monkeypatch):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("Tatoeba.de-en.de", "".join(x + "\n" for x in DE))
        z.writestr("Tatoeba.de-en.en", "".join(x + "\n" for x in EN))
        z.writestr("README", "about this corpus\n")
    server = FileServer({"OPUS-Tatoeba/v2/moses/de-en.txt.zip": buf.getvalue()})
    monkeypatch.setenv("AIAYN_OPUS_URL", server.url)
    try:
        prep = prepare(_sources_cfg(tmp_path, ["opus:Tatoeba@v2"]), options=Options(workers=1))
        again = prepare(_sources_cfg(tmp_path, ["opus:Tatoeba@v2"]), options=Options(workers=1))
    finally:
        server.close()
    assert prep.raw("train")[0] == DE and prep.report["sources"][0]["name"] == "Tatoeba"
    assert server.requests == ["/OPUS-Tatoeba/v2/moses/de-en.txt.zip"]  # downloaded once
    assert again.report["cached"] is True
    with pytest.raises(DataError, match="OPUS has no corpus 'NoSuchCorpus'"):
        prepare(_sources_cfg(tmp_path, ["opus:NoSuchCorpus"]), options=Options(workers=1))


@pytest.mark.parametrize(
    ("name", "data", "columns", "want"),
    [
        ("bom.csv", b"\xef\xbb\xbfde,en\r\nHallo,Hello\r\n", None, [(2, "Hallo", "Hello")]),
        ("bom.tsv", b"\xef\xbb\xbfGerman\tEnglish\nHallo\tHello\n", ["German", "English"], [(2, "Hallo", "Hello")]),
        ("crlf.tsv", b"Hallo\tHello\r\nTsch\xc3\xbcss\tBye\r\n", None, [(1, "Hallo", "Hello"), (2, "Tschüss", "Bye")]),
        ("header.tsv", b"id\ten-GB\tde-DE\n7\tA dog.\tEin Hund.\n", None, [(2, "Ein Hund.", "A dog.")]),
        ("quoted.csv", b'de,en\n"Ein\nHund","A, dog"\n', None, [(3, "Ein Hund", "A, dog")]),
        ("bom.jsonl", b'\xef\xbb\xbf{"de": "Hallo", "en": "Hi\\ud83d"}\n', None, [(1, "Hallo", "Hi?")]),
    ],
)
def test_spreadsheets_and_json_as_they_come(tmp_path, name, data, columns, want):
    """A byte-order mark (Excel writes one), Windows line ends, a header naming the languages with their
    regions, a quoted field holding a line break, a JSON escape of half a character."""
    path = tmp_path / name
    path.write_bytes(data)
    fmt = path.suffix.lstrip(".")
    assert list(read_pairs(path, fmt, "de", "en", columns)) == want


def test_an_xliff_2_file_is_read_as_a_stream_holding_no_earlier_unit(tmp_path, monkeypatch):
    from aiayn.data import formats

    path = xliff20(tmp_path / "big.xliff", DE * 5, EN * 5)
    held = []
    original = formats.inline_text

    def spy(el):
        unit = el.getparent().getparent()  # source -> segment -> unit
        held.append(len(list(unit.itersiblings(preceding=True))))
        return original(el)

    monkeypatch.setattr(formats, "inline_text", spy)
    assert len(list(read_pairs(path, "xliff", "de", "en"))) == 5 * len(DE)
    assert max(held) <= 1


def test_a_changed_filter_of_ones_own_prepares_the_data_again(tmp_path, home):
    code = tmp_path / "mine.py"
    code.write_text("def short(src, tgt):\n    return [True for s in src]\n")
    plain = {"src": str(write_lines(tmp_path / "m.de", DE)), "tgt": str(write_lines(tmp_path / "m.en", EN))}
    cfg = _sources_cfg(tmp_path, [plain], filters=[f"{code}:short"])
    first = prepare(cfg, options=Options(workers=1))
    code.write_text("def short(src, tgt):\n    return [len(s) % 2 == 0 for s in src]\n")
    again = prepare(cfg, options=Options(workers=1))
    assert again.report["cached"] is False and again.cache_dir != first.cache_dir
    assert len(again.splits["train"]) < len(first.splits["train"])


def test_weights_with_resharding_and_a_later_epoch_see_every_draw_once():
    """A mixed epoch resumed on another world size still gives each position of its draw once."""
    split = _split(600)
    mix = [(100, 3.0), (500, 0.5)]
    whole = BatchIterator(split, 200, seed=2, mix=mix)
    whole.set_epoch(3)
    want = np.sort(np.concatenate([b.ids.numpy() for b in whole]))
    ranks = [BatchIterator(split, 200, seed=2, mix=mix, rank=r, world_size=2) for r in range(2)]
    for it in ranks:
        it.set_epoch(3)
    gens = [iter(it) for it in ranks]
    seen = [b.ids.numpy() for _ in range(3) for g in gens for b in [next(g)]]
    state = ranks[0].state_dict()
    one = BatchIterator(split, 200, seed=2, mix=mix)
    one.load_state_dict(state)  # world size 2 -> 1: the rest of epoch 3
    rest = [b.ids.numpy() for b in one if one.epoch == 3]
    assert np.array_equal(np.sort(np.concatenate(seen + rest)), want)
