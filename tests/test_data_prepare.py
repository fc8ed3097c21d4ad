"""prepare(): sources, validation errors, counted drops, joint BPE, on-disk cache (paper §5.1)."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import numpy as np
import pytest

from aiayn.config import EOS_ID, DataConfig
from aiayn.data import DataError, EncodedSplit, Tokenizer, embedded, multi30k, prepare, read_lines
from conftest import multi30k_mirror

needs_mirror = pytest.mark.needs_mirror  # the mirror rule: tests/conftest.py


pytestmark = pytest.mark.usefixtures("home")  # every test: an empty AIAYN_HOME (conftest)


def write(path: Path, lines: list[str] | bytes, gz: bool = False) -> str:
    data = lines if isinstance(lines, bytes) else "".join(x + "\n" for x in lines).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return str(path)


def files_cfg(tmp: Path, train, valid, test=None, **kw) -> DataConfig:
    """A 'files' corpus: each split given as (src lines, tgt lines)."""
    cfg = DataConfig(corpus="files", src_lang="de", tgt_lang="en", **kw)
    for split, pair in (("train", train), ("valid", valid), ("test", test)):
        if pair is not None:
            setattr(cfg, f"{split}_src", write(tmp / f"{split}.src", pair[0]))
            setattr(cfg, f"{split}_tgt", write(tmp / f"{split}.tgt", pair[1]))
    return cfg


# -- sources -------------------------------------------------------------------------------------


@needs_mirror
def test_bpe_round_trip_on_multi30k_slice(tmp_path):
    mirror = multi30k_mirror()
    de = read_lines(Path(mirror, "train.de.gz"))[:3000]
    en = read_lines(Path(mirror, "train.en.gz"))[:3000]
    cfg = files_cfg(tmp_path, (de[:2800], en[:2800]), (de[2800:], en[2800:]), vocab_size=1000)
    prep = prepare(cfg)
    tok = prep.tokenizer
    assert tok.vocab_size == 1000
    src, tgt = prep.raw("valid")
    enc = prep.splits["valid"]
    for i in range(len(enc)):
        s, t = enc.pair(i)
        assert s[-1] == EOS_ID and EOS_ID not in t.tolist()
        assert tok.decode(s.tolist()) == src[i] and tok.decode(t.tolist()) == tgt[i]  # raw text back out
    # joint vocabulary: pieces of both languages in one model
    assert len(tok.pieces("Männer")) < len("Männer") and len(tok.pieces("people")) < len("people")


@needs_mirror
def test_multi30k_end_to_end_and_cache(tmp_path, home):
    mirror = str(multi30k_mirror())
    t0 = time.perf_counter()
    prep = prepare(DataConfig(corpus="multi30k", src_lang="de", tgt_lang="en", data_dir=mirror), tmp_path / "run")
    cold = time.perf_counter() - t0
    assert cold < 60  # the bound for BPE training + encoding on 2 cores
    assert {s: len(prep.splits[s]) for s in ("train", "valid", "test")} == multi30k.SIZES
    assert prep.report["cached"] is False and prep.report["dropped"]["total"] == 0
    assert (tmp_path / "run" / "spm.model").read_bytes() == (prep.cache_dir / "spm.model").read_bytes()
    assert Tokenizer(tmp_path / "run" / "spm.model").vocab_size == 8000
    test_de = [" ".join(x.split()) for x in read_lines(Path(mirror, "test_2016_flickr.de.gz"))]
    assert prep.raw("test")[0] == test_de
    assert prep.splits["train"].src.dtype == np.uint16  # compact arrays
    starts = set(prep.report["sentence_starts"]["words"])
    assert {"Ein", "Eine", "Zwei", "Der", "Die"} <= starts and not starts & {"Mann", "Frau", "Sie", "Hund"}

    t0 = time.perf_counter()
    again = prepare(DataConfig(corpus="multi30k", src_lang="de", tgt_lang="en", data_dir=mirror))
    assert again.report["cached"] is True and again.cache_dir == prep.cache_dir
    assert time.perf_counter() - t0 < cold
    assert np.array_equal(again.splits["valid"].src, prep.splits["valid"].src)
    assert len(list((home / "prepared").iterdir())) == 1
    # another setting -> another key
    other = prepare(DataConfig(corpus="multi30k", src_lang="en", tgt_lang="de", data_dir=mirror, vocab_size=2000))
    assert other.cache_dir != prep.cache_dir and other.tokenizer.vocab_size == 2000
    assert multi30k.tokenized_reference_path("test", "en", mirror).name == "test_2016_flickr.lc.norm.tok.en.gz"


def test_embedded_corpus_is_a_real_deterministic_task(tmp_path, monkeypatch):
    assert embedded.german(21) == "einundzwanzig" and embedded.english(21) == "twenty-one"
    assert embedded.german(354021) == "dreihundertvierundfünfzigtausendeinundzwanzig"
    assert embedded.english(101000) == "one hundred one thousand" and embedded.german(101000) == "einhunderteintausend"
    cfg = DataConfig(corpus="embedded", src_lang="de", tgt_lang="en", embedded_size=800, vocab_size=400)
    prep = prepare(cfg, tmp_path / "run")
    assert {s: len(prep.splits[s]) for s in ("train", "valid", "test")} == {"train": 720, "valid": 40, "test": 40}
    nums = embedded.numbers(800)
    assert not set(nums["train"]) & (set(nums["valid"]) | set(nums["test"]))  # held-out numbers
    src, tgt = prep.raw("valid")
    assert src == [embedded.german(n) for n in nums["valid"]] and tgt == [embedded.english(n) for n in nums["valid"]]
    assert prep.tokenizer.decode(prep.splits["valid"].pair(3)[1].tolist()) == tgt[3]
    # deterministic: a fresh cache elsewhere produces identical arrays
    monkeypatch.setenv("AIAYN_HOME", str(tmp_path / "home2"))
    again = prepare(cfg)
    assert again.report["cached"] is False
    assert np.array_equal(again.splits["train"].tgt, prep.splits["train"].tgt)
    digits = prepare(DataConfig(corpus="embedded", src_lang="digits", tgt_lang="de", embedded_size=100, vocab_size=400))
    assert digits.raw("test")[0][0] == str(embedded.numbers(100)["test"][0])


def test_files_corpus_gz_and_plain_and_optional_test(tmp_path):
    src = [f"eins zwei {i}" for i in range(50)]
    tgt = [f"one two {i}" for i in range(50)]
    cfg = DataConfig(
        corpus="files",
        src_lang="de",
        tgt_lang="en",
        vocab_size=400,
        train_src=write(tmp_path / "a.gz", src, gz=True),
        train_tgt=write(tmp_path / "b", tgt),
        valid_src=write(tmp_path / "c", src[:5]),
        valid_tgt=write(tmp_path / "d.gz", tgt[:5], gz=True),
    )
    prep = prepare(cfg)
    assert len(prep.splits["train"]) == 50 and len(prep.splits["test"]) == 0
    (tmp_path / "a.gz").unlink()  # the raw text of one split reads that split's files only
    assert prep.raw("valid") == (src[:5], tgt[:5])
    assert prep.raw("test") == ([], [])


def test_the_report_keeps_the_source_sides_sentence_starts_for_the_run(tmp_path):
    """The words a sentence without a final stop may run into (aiayn.documents.segment, step 3) are learnt
    from the training source with the tokenizer and reach the run through its data_report.json."""
    from aiayn.data.sentence_starts import run_sentence_starts

    src = [f"Ein Hund {i} sieht den Mann" for i in range(30)]
    src += [f"Sie lesen {i} Bücher" for i in range(25)]
    src += [f"{'Heute' if i % 2 else 'Morgen'} lesen Sie {i} Bücher" for i in range(25)]
    src += [f"Zwei Katzen {i} schlafen" for i in range(19)]  # one short of the 20 a start needs
    tgt = [f"line {i}" for i in range(len(src))]
    prep = prepare(files_cfg(tmp_path, (src, tgt), (src[:4], tgt[:4]), vocab_size=320), tmp_path / "run")
    # "Sie" starts 25 lines and follows a word 25 times; "Heute", "Morgen", "Mann": under 20 times first
    assert prep.report["sentence_starts"]["words"] == ["Ein"]
    assert run_sentence_starts(tmp_path / "run", "de").words == {"Ein"}
    assert not run_sentence_starts(tmp_path / "run", "en")  # another language's text: not these
    assert run_sentence_starts(tmp_path / "run" / "best.safetensors", "de").words == {"Ein"}  # beside the weights
    assert not run_sentence_starts(tmp_path / "elsewhere", "de")
    # a cache built before the starts were learnt, and a given tokenizer: learnt from the encoded text
    report = prep.cache_dir / "report.json"
    report.write_text(json.dumps({k: v for k, v in prep.report.items() if k != "sentence_starts"}))
    again = prepare(files_cfg(tmp_path, (src, tgt), (src[:4], tgt[:4]), vocab_size=320), tmp_path / "run2")
    assert again.report["cached"] is True and again.report["sentence_starts"] == prep.report["sentence_starts"]
    assert run_sentence_starts(tmp_path / "run2", "de").words == {"Ein"}
    given = files_cfg(tmp_path, (src, tgt), (src[:4], tgt[:4]), spm_model=str(tmp_path / "run"))
    assert prepare(given).report["sentence_starts"] == prep.report["sentence_starts"]


def test_spm_model_reuses_a_tokenizer_byte_for_byte(tmp_path):
    a_src, a_tgt = [f"das rote haus {i}" for i in range(60)], [f"the red house {i}" for i in range(60)]
    (tmp_path / "a").mkdir()
    first = prepare(
        files_cfg(tmp_path / "a", (a_src, a_tgt), (a_src[:4], a_tgt[:4]), vocab_size=300), tmp_path / "run_a"
    )
    # other training text, another vocab_size setting: the given model encodes it, unchanged
    b_src, b_tgt = [f"ein blauer hund {i}" for i in range(30)], [f"a blue dog {i}" for i in range(30)]
    (tmp_path / "b").mkdir()
    cfg = files_cfg(
        tmp_path / "b", (b_src, b_tgt), (b_src[:4], b_tgt[:4]), vocab_size=999, spm_model=str(tmp_path / "run_a")
    )  # a run directory means its spm.model
    second = prepare(cfg, tmp_path / "run_b")
    model_a = (tmp_path / "run_a" / "spm.model").read_bytes()
    assert (tmp_path / "run_b" / "spm.model").read_bytes() == model_a
    assert second.tokenizer.vocab_size == first.tokenizer.vocab_size != 999
    assert second.report["key"] != first.report["key"] and second.report["spm_model"] == cfg.spm_model
    ids = first.tokenizer.encode_batch(b_tgt)
    assert [second.splits["train"].pair(i)[1].tolist() for i in range(3)] == ids[:3]
    # the key follows the model's bytes: the same bytes elsewhere hit the cache, other bytes do not
    (tmp_path / "copy.model").write_bytes(model_a)
    cfg.spm_model = str(tmp_path / "copy.model")
    assert prepare(cfg).report["cached"] is True
    cfg.spm_model = str(tmp_path / "missing.model")
    with pytest.raises(DataError, match="missing.model not found"):
        prepare(cfg)
    (tmp_path / "bad.model").write_bytes(b"not a model")
    cfg.spm_model = str(tmp_path / "bad.model")
    with pytest.raises(DataError, match="is not a sentencepiece model"):
        prepare(cfg)


# -- drops ---------------------------------------------------------------------------------------


def test_bad_training_pairs_are_dropped_counted_and_kept_in_test(tmp_path):
    good_s = [f"das haus {i} ist rot" for i in range(40)]
    good_t = [f"the house {i} is red" for i in range(40)]
    bad_s = ["", "ein satz", "x " * 40, "hallo"]
    bad_t = ["empty source", "", "y " * 40, "hello " * 12]  # empty src, empty tgt, too long, ratio 1:12
    pairs = (good_s + bad_s, good_t + bad_t)
    cfg = files_cfg(tmp_path, pairs, pairs, pairs, vocab_size=400, max_len=30, max_len_ratio=4.0)
    prep = prepare(cfg)
    d = prep.report["dropped"]
    assert (d["empty"], d["too_long"], d["ratio"], d["total"]) == (2, 1, 1, 4)
    assert prep.raw("train") == (good_s, good_t)
    assert len(prep.splits["train"]) == 40 and len(prep.splits["test"]) == 44 == len(prep.splits["valid"])
    assert prep.raw("test") == ([" ".join(x.split()) for x in pairs[0]], [" ".join(x.split()) for x in pairs[1]])
    s, t = prep.splits["test"].pair(40)  # an empty source is still a (one-token) source
    assert s.tolist() == [EOS_ID] and len(t) > 0


# -- errors --------------------------------------------------------------------------------------


def test_line_count_mismatch_is_reported_first(tmp_path, home):
    train = ([f"a {i}" for i in range(5)], [f"b {i}" for i in range(4)])
    cfg = files_cfg(tmp_path, train, (["x"], ["y"]))
    write(Path(cfg.valid_src), b"bad \xff byte\n")  # would also fail, but later
    with pytest.raises(DataError) as e:
        prepare(cfg)
    msg = str(e.value)
    assert msg == f"line counts differ: {cfg.train_src} has 5 lines, {cfg.train_tgt} has 4"
    assert not (home / "prepared").exists()  # nothing ran before the check


def test_invalid_utf8_names_file_and_line(tmp_path):
    cfg = files_cfg(tmp_path, (["ok", "fine", "also"], ["ok", "fine", "also"]), (["x"], ["y"]))
    write(Path(cfg.train_tgt), b"ok\nfine\n" + b"caf\xc3(\n")
    with pytest.raises(DataError, match=rf"{cfg.train_tgt}: line 3 is not valid UTF-8"):
        prepare(cfg)
    with pytest.raises(DataError, match="line 3 is not valid UTF-8"):
        read_lines(cfg.train_tgt)


def test_missing_files_and_settings(tmp_path):
    cfg = files_cfg(tmp_path, (["a"], ["b"]), (["x"], ["y"]))
    cfg.valid_tgt = str(tmp_path / "nope.en")
    with pytest.raises(DataError, match=f"file not found: {tmp_path / 'nope.en'}$"):
        prepare(cfg)
    cfg.valid_tgt = None
    with pytest.raises(DataError, match="needs data.valid_src and data.valid_tgt"):
        prepare(cfg)
    with pytest.raises(DataError, match="multi30k data directory not found"):
        prepare(DataConfig(corpus="multi30k", data_dir=str(tmp_path / "absent")))
    (tmp_path / "m").mkdir()
    write(tmp_path / "m" / "train.de.gz", ["a"], gz=True)
    with pytest.raises(DataError, match=f"multi30k file missing: {tmp_path / 'm' / 'train.en.gz'}"):
        prepare(DataConfig(corpus="multi30k", data_dir=str(tmp_path / "m")))


def test_wrong_language_pair(tmp_path):
    with pytest.raises(DataError, match="multi30k has no 'ja' text; languages: cs, de, en, fr"):
        prepare(DataConfig(corpus="multi30k", src_lang="ja", tgt_lang="en"))
    with pytest.raises(DataError, match="source and target language are both 'de'"):
        prepare(DataConfig(corpus="multi30k", src_lang="de", tgt_lang="de"))
    with pytest.raises(DataError, match="the embedded corpus has no 'fr' text"):
        prepare(DataConfig(corpus="embedded", src_lang="fr", tgt_lang="en"))
    cfg = DataConfig(
        corpus="files",
        src_lang="de",
        tgt_lang="en",
        train_src=write(tmp_path / "train.en", ["a"]),
        train_tgt=write(tmp_path / "train.de", ["b"]),
        valid_src=write(tmp_path / "v.s", ["a"]),
        valid_tgt=write(tmp_path / "v.t", ["b"]),
    )
    with pytest.raises(DataError, match=r"train\.en looks like 'en' text but the source language is 'de'"):
        prepare(cfg)


def test_read_lines_handles_crlf_gzip_and_corrupt_gzip(tmp_path):
    assert read_lines(write(tmp_path / "a", b"one\r\ntwo\r\n")) == ["one", "two"]
    assert read_lines(write(tmp_path / "b.gz", b"x\ny", gz=True)) == ["x", "y"]
    assert read_lines(write(tmp_path / "c", b"")) == []
    (tmp_path / "d.gz").write_bytes(gzip.compress(b"abc\n" * 100)[:-5])  # truncated download
    with pytest.raises(DataError, match="corrupt gzip"):
        read_lines(tmp_path / "d.gz")


def test_encoded_split_save_load(tmp_path):
    enc = EncodedSplit.from_ids([[5, 6], [7]], [[8], []], vocab_size=70000, index=[3, 9])
    enc.save(tmp_path, "x")
    back = EncodedSplit.load(tmp_path, "x")
    assert back.src.dtype == np.int32 and back.index.tolist() == [3, 9]
    assert [a.tolist() for a in back.pair(0)] == [[5, 6, EOS_ID], [8]]
    assert back.tgt_lengths.tolist() == [1, 0] and back.src_lengths.tolist() == [3, 2]


NO_TORCH = """
import json, sys
from aiayn.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "torch": "torch" in sys.modules}))
"""


@pytest.mark.parametrize(
    "task",
    [
        ["--data.corpus", "files"],
        ["--task.name", "lm", "--data.corpus", "text"],
        ["--task.name", "mlm", "--data.corpus", "text"],
        ["--task.name", "classify", "--data.corpus", "text"],
    ],
)
def test_aiayn_data_prepare_loads_no_torch(tmp_path, home, task):
    """A task's record (its settings, its data) is read without torch: `aiayn data prepare` starts in a
    fraction of the second torch alone takes to import, whether it builds or finds its cache."""
    import subprocess
    import sys

    from synthetic_text import captions

    en, de = captions(300, seed=0)
    if "classify" in task:
        text = [f"{'long' if len(e) > 30 else 'short'}\t{e}" for e in en]
    else:
        text = en
    args = ["--data.vocab_size", "400", "--data.src_lang", "de", "--data.tgt_lang", "en"]
    for split, lines in (("train", (de, en, text)), ("valid", (de[:30], en[:30], text[:30]))):
        args += [f"--data.{split}_src", write(tmp_path / f"{split}.de", lines[0])]
        args += [f"--data.{split}_tgt", write(tmp_path / f"{split}.en", lines[1])]
        args += [f"--data.text_{split}", write(tmp_path / f"{split}.txt", lines[2])]
    run = ["data", "prepare", "--config", "quickstart", "--no-progress", *task, *args]
    for _ in ("build", "cached"):
        r = subprocess.run([sys.executable, "-c", NO_TORCH, *run], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout.strip().splitlines()[-1]) == {"code": 0, "torch": False}, r.stderr
    assert "cached " in r.stdout
