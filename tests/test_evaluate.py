"""Scoring: real sacreBLEU and chrF, the published tokenized protocol, and `aiayn evaluate` end to end."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import pytest
import sacrebleu
import torch

from aiayn.checkpoint import checkpoint_paths, save_weights
from aiayn.config import ModelConfig
from aiayn.data.tokenizer import Tokenizer
from aiayn.model import Transformer
from aiayn.scoring import moses_tokenize, score, tokenized_bleu
from aiayn.train.resume import save_state
from conftest import multi30k_mirror
from inprocess import run_aiayn

REFS = [
    "A dog runs across the grass.",
    "Two men aren't playing football in the park.",
    'A woman rides a "red" bike on the street.',
    "Children play.",
]


def data_dir() -> Path:
    """The Multi30k mirror; callers are marked needs_mirror (the rule: tests/conftest.py)."""
    return multi30k_mirror()


def aiayn(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_aiayn(*args, text=True, env={**os.environ, **(env or {})})


def test_identical_hypotheses_score_100_with_signatures():
    res = score(REFS, REFS)
    assert res["bleu"] == pytest.approx(100.0) and res["chrf"] == pytest.approx(100.0)
    assert "case:mixed" in res["bleu_signature"] and "tok:13a" in res["bleu_signature"]
    assert res["chrf_signature"].startswith("nrefs:1|case:mixed")
    worse = score(["A cat runs across the grass."] + REFS[1:], REFS)
    assert 50 < worse["bleu"] < 100 and worse["chrf"] < 100


def test_tokenized_bleu_lowercases_tokenizes_and_reads_escaped_refs():
    # Moses-tokenized, lowercased references as the datasets ship them (HTML-escaped)
    tok_refs = [
        "a dog runs across the grass .",
        "two men aren &apos;t playing football in the park .",
        "a woman rides a &quot; red &quot; bike on the street .",
        "children play .",
    ]
    assert moses_tokenize(REFS[:1], "en") == ["a dog runs across the grass ."]
    assert tokenized_bleu(REFS, tok_refs, "en") == pytest.approx(100.0)
    assert sacrebleu.corpus_bleu(REFS, [tok_refs], tokenize="none").score < 50  # raw text would not match
    assert tokenized_bleu(["a dog"] * 4, tok_refs, "en") < 5


@pytest.mark.needs_mirror
def test_tokenized_pipeline_reproduces_multi30k_references():
    d = data_dir()
    for lang in ("en", "de"):
        raw = gzip.open(d / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8").read().splitlines()
        tok_file = d / "tok" / f"test_2016_flickr.lc.norm.tok.{lang}.gz"
        tok = gzip.open(tok_file, "rt", encoding="utf-8").read().splitlines()
        assert tokenized_bleu(raw, tok, lang) > 99.9  # our hypothesis pipeline == the refs' pipeline


def test_evaluate_command_hypotheses_equal_references(tmp_path):
    ref = tmp_path / "ref.en"
    ref.write_text("\n".join(REFS) + "\n", encoding="utf-8")
    r = aiayn("evaluate", "--hyp", str(ref), "--ref", str(ref), "--tokenized-bleu", "--lang", "en", "--json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("BLEU = 100.00")
    assert "signature: nrefs:1|case:mixed|eff:no|tok:13a" in r.stdout and "chrF2 = 100.00" in r.stdout
    res = json.loads(r.stdout.splitlines()[-1])
    assert res["bleu"] == pytest.approx(100) and res["tokenized_bleu"] == pytest.approx(100)


def test_evaluate_command_translates_src(tmp_path):
    """Single run, --average-last and an ensemble each translate exactly what the Python API gives for
    that model: the averaged parameters and the ensemble of the two members, built here by hand."""
    import copy

    from aiayn.decode import Ensemble, Translator

    run, other = tmp_path / "run", tmp_path / "other"
    tok = Tokenizer.train(REFS * 20, run / "spm.model", vocab_size=300)
    members = {}
    for step in (1, 2):  # two different step checkpoints for --average-last
        torch.manual_seed(step)
        members[step] = Transformer(ModelConfig.preset("tiny", vocab_size=tok.vocab_size)).eval()
        weights, state = checkpoint_paths(run, step)
        save_weights(members[step], weights, step=step)
        save_state(state, {"step": step})
    # a second run with the same tokenizer whose newest (only) checkpoint is step 1's weights
    (other / "checkpoints").mkdir(parents=True)
    (other / "spm.model").write_bytes((run / "spm.model").read_bytes())
    save_weights(members[1], checkpoint_paths(other, 1)[0], step=1)
    save_state(checkpoint_paths(other, 1)[1], {"step": 1})

    averaged = copy.deepcopy(members[2])
    with torch.no_grad():
        p1 = dict(members[1].named_parameters())
        for name, p in averaged.named_parameters():
            p.copy_(((p.double() + p1[name].double()) / 2).float())

    def api(m) -> list[str]:
        return Translator(m, tok, device="cpu").translate(REFS, beam=2, length_penalty=0.6, max_len_b=3)

    expected = {
        "newest": api(members[2]),
        "average": api(averaged),
        "ensemble": api(Ensemble([members[2], members[1]])),
    }
    assert len({tuple(h) for h in expected.values()}) == 3, expected  # the three cases are told apart

    src, ref, hyp = tmp_path / "src", tmp_path / "ref", tmp_path / "hyp"
    src.write_text("\n".join(REFS) + "\n", encoding="utf-8")
    ref.write_text("\n".join(REFS) + "\n", encoding="utf-8")
    for case, members_args, extra in (
        ("newest", [run], []),
        ("average", [run], ["--average-last", "2"]),
        ("ensemble", [run, other], []),
    ):
        r = aiayn(
            "evaluate",
            "-c",
            *map(str, members_args),
            "--src",
            str(src),
            "--ref",
            str(ref),
            "--beam",
            "2",
            "--lenpen",
            "0.6",
            "--max-len-b",
            "3",
            "--output",
            str(hyp),
            "--json",
            *extra,
        )
        assert r.returncode == 0, r.stderr
        hyps = hyp.read_text(encoding="utf-8").splitlines()
        assert hyps == expected[case], case
        res = json.loads(r.stdout.splitlines()[-1])
        assert res["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [REFS]).score)
        assert res["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [REFS]).score)
    r = aiayn("evaluate", "-c", str(run), "--src", str(src), "--ref", str(tmp_path / "missing"))
    assert r.returncode == 2 and r.stderr.startswith("error:")


@pytest.mark.needs_mirror
def test_evaluate_command_split_reads_the_runs_data(tmp_path):
    d = data_dir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(
        f"data:\n  corpus: multi30k\n  src_lang: de\n  tgt_lang: en\n  data_dir: {d}\n  vocab_size: 500\n"
    )
    hyp = tmp_path / "hyp.en"  # the references themselves as hypotheses: both metrics must give 100
    hyp.write_text(gzip.open(d / "test_2016_flickr.en.gz", "rt", encoding="utf-8").read(), encoding="utf-8")
    r = aiayn(
        "evaluate",
        "-c",
        str(run),
        "--split",
        "test_2016_flickr",
        "--hyp",
        str(hyp),
        "--tokenized-bleu",
        "--json",
        env={"AIAYN_HOME": str(tmp_path / "home")},
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.splitlines()[-1])
    assert res["sentences"] == 1000 and res["bleu"] == pytest.approx(100)
    assert res["tokenized_bleu"] > 99.9 and res["tokenized_lang"] == "en"


def test_evaluate_split_of_a_run_whose_spm_model_has_moved(tmp_path):
    """A run trained with data.spm_model scores its splits from its own spm.model copy."""
    src = [f"das rote haus {i}" for i in range(40)]
    tgt = [f"the red house number {i}" for i in range(40)]
    for name, lines in (("train.de", src), ("train.en", tgt), ("val.de", src[:5]), ("val.en", tgt[:5])):
        (tmp_path / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    Tokenizer.train(src + tgt, tmp_path / "shared.model", vocab_size=320)
    run = tmp_path / "run"
    run.mkdir()
    (run / "spm.model").write_bytes((tmp_path / "shared.model").read_bytes())
    (run / "config.yaml").write_text(
        f"data:\n  corpus: files\n  src_lang: de\n  tgt_lang: en\n  spm_model: {tmp_path / 'shared.model'}\n"
        + "".join(
            f"  {s}_{side}: {tmp_path / f'{f}.{lang}'}\n"
            for s, f in (("train", "train"), ("valid", "val"))
            for side, lang in (("src", "de"), ("tgt", "en"))
        )
    )
    (tmp_path / "shared.model").unlink()
    hyp = tmp_path / "hyp.en"
    hyp.write_text("".join(x + "\n" for x in tgt[:5]), encoding="utf-8")
    r = aiayn(
        "evaluate",
        "-c",
        str(run),
        "--split",
        "val",
        "--hyp",
        str(hyp),
        "--json",
        env={"AIAYN_HOME": str(tmp_path / "home")},
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.splitlines()[-1])
    assert res["sentences"] == 5 and res["bleu"] == pytest.approx(100)
