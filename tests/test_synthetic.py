"""Synthetic data: `aiayn backtranslate` (streamed, tagged, sampled, resumed) and `aiayn distill` (a teacher's
translations -> a student, exported int8 for Argos), on a tiny run trained through the CLI."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import yaml

from aiayn.data import embedded
from inprocess import run_aiayn
from test_train_run import TINY


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny digits -> English run of the embedded corpus (a few seconds): what reads the monolingual
    text (digits) and writes its synthetic side (English)."""
    root = tmp_path_factory.mktemp("synthetic")
    cfg = json.loads(json.dumps(TINY))
    cfg["train"].update(max_steps=60, eval_every=60, save_every=60)
    (root / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    r = run_aiayn("train", "--config", root / "tiny.yaml", "--run-dir", root / "run", text=True)
    assert r.returncode == 0, r.stderr
    return root / "run"


@pytest.fixture(scope="module")
def mono(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Monolingual text in the run's source language: 150 numbers written as digits."""
    src, _ = embedded.corpus("digits", "en", 1500)["train"]
    path = tmp_path_factory.mktemp("mono") / "numbers.txt"
    path.write_text("".join(x + "\n" for x in src[:150]))
    return path


def _bt(run: Path, mono: Path, out: Path, *args: str, engine: str = "torch") -> list[str]:
    r = run_aiayn("backtranslate", "-c", run, "--input", mono, "-o", out, "--engine", engine, *args, text=True)
    assert r.returncode == 0, r.stderr
    return (out / "numbers.en").read_text().split("\n")[:-1]


def test_backtranslation_writes_the_text_and_its_tagged_translations_line_for_line(run, mono, tmp_path):
    synthetic = _bt(run, mono, tmp_path / "bt", "--tag", "<BT>", "--beam", "2")
    kept = (tmp_path / "bt" / "numbers.digits").read_text()
    assert kept == mono.read_text()  # the monolingual side is the input, as it is
    assert len(synthetic) == 150 and all(x.startswith("<BT> ") and len(x) > 5 for x in synthetic)
    r = run_aiayn("translate", "-c", run, "--engine", "torch", "--beam", "2", input=mono.read_text(), text=True)
    assert [x.removeprefix("<BT> ") for x in synthetic] == r.stdout.split("\n")[:-1]  # the run's own search
    summary = json.loads((tmp_path / "bt" / "numbers.json").read_text())
    assert summary["lines"] == 150 and summary["tag"] == "<BT>" and summary["decode"]["beam"] == 2


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_sampled_backtranslation_draws_other_sources_and_is_seeded(run, mono, tmp_path, engine):
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
    search = _bt(run, mono, tmp_path / "beam", "--beam", "1", engine=engine)
    one = _bt(run, mono, tmp_path / "one", "--sampling-topk", "0", "--seed", "1", engine=engine)
    again = _bt(run, mono, tmp_path / "again", "--sampling-topk", "0", "--seed", "1", engine=engine)
    other = _bt(run, mono, tmp_path / "other", "--sampling-topk", "0", "--seed", "2", engine=engine)
    assert one == again  # seeded
    assert sum(a != b for a, b in zip(one, other)) > 20  # other draws
    assert sum(a != b for a, b in zip(one, search)) > 20  # draws, not the argmax


@pytest.mark.parametrize("cut", ["partial line", "one side ahead", "whole chunks"])
def test_an_interrupted_backtranslation_resumes_to_the_same_lines(run, mono, tmp_path, cut):
    from aiayn.decode.translator import Translator
    from aiayn.synthetic import translate_into_pair

    t = Translator.load(run, engine="torch", decode=Translator.load(run, engine="torch").decode)
    t.decode.sampling_topk = 5  # sampled: resuming must draw what the uninterrupted run drew
    full = (tmp_path / "full.en", tmp_path / "full.digits")
    translate_into_pair(t, mono, *full, chunk=32)
    part = (tmp_path / "part.en", tmp_path / "part.digits")
    translate_into_pair(t, mono, *part, chunk=32)
    data = [p.read_bytes() for p in part]
    after_64 = [len(b) - len(b.split(b"\n", 64)[-1]) for b in data]  # the bytes of two whole chunks of 32
    cuts = {"partial line": (1000, 1000), "one side ahead": (len(data[0]), 700), "whole chunks": tuple(after_64)}[cut]
    for p, b, n in zip(part, data, cuts):
        p.write_bytes(b[:n])  # where a killed process may leave them
    done = translate_into_pair(t, mono, *part, chunk=32)
    assert [p.read_bytes() for p in part] == [p.read_bytes() for p in full]
    assert done["lines"] == 150 and done["resumed_after"] == min(b[:n].count(b"\n") for b, n in zip(data, cuts))


def test_backtranslated_pairs_are_a_source_a_run_mixes_in_with_a_weight(run, mono, tmp_path, home):
    from aiayn.config import DataConfig
    from aiayn.data import prepare
    from aiayn.data.pipeline import Options

    _bt(run, mono, tmp_path / "bt", "--tag", "<BT>")
    src, tgt = embedded.corpus("digits", "en", 1500)["train"]
    (tmp_path / "real.digits").write_text("".join(x + "\n" for x in src[150:]))
    (tmp_path / "real.en").write_text("".join(x + "\n" for x in tgt[150:]))
    cfg = DataConfig(
        corpus="sources",
        src_lang="en",  # the forward direction: English -> digits, the synthetic English as its source
        tgt_lang="digits",
        vocab_size=400,
        sources=[
            {"src": str(tmp_path / "real.en"), "tgt": str(tmp_path / "real.digits")},
            {"src": str(tmp_path / "bt" / "numbers.en"), "tgt": str(tmp_path / "bt" / "numbers.digits"), "weight": 0.5},
            {"src": str(tmp_path / "real.en"), "tgt": str(tmp_path / "real.digits"), "name": "dev", "split": "valid"},
        ],
    )
    prep = prepare(cfg, options=Options(workers=1))
    by = {s["name"]: s for s in prep.report["sources"]}
    assert by["numbers"]["pairs"] == 150 and by["real"]["pairs"] == len(src) - 150
    assert all(line.startswith("<BT> ") for line in prep.raw("train")[0][-150:])


def test_distill_goes_from_a_teacher_to_an_argos_package_and_resumes_finished_stages(run, tmp_path, home):
    out = tmp_path / "distill"
    args = ["distill", "-c", run, "-o", out, "--student", "narrow", "--steps", "20", "--no-progress"]
    broken = run_aiayn(*args, "--optim.lr_scale", "nope", text=True)  # the student's config fails after translate
    assert broken.returncode == 2 and "optim.lr_scale" in broken.stderr
    stages = json.loads((out / "stages.json").read_text())
    assert set(stages) == {"data", "translate"}
    distilled = out / "data" / "distilled.en"
    before = distilled.stat().st_mtime_ns, distilled.read_bytes()
    r = run_aiayn(*args, "--train.eval_every", "20", text=True)
    assert r.returncode == 0, r.stderr
    assert (distilled.stat().st_mtime_ns, distilled.read_bytes()) == before  # not translated again
    stages = json.loads((out / "stages.json").read_text())
    assert set(stages) == {"data", "translate", "train", "export"}
    train_size = len(embedded.corpus("digits", "en", TINY["data"]["embedded_size"])["train"][0])
    assert stages["data"]["train"] == stages["translate"]["lines"] == train_size  # the teacher's training split
    student = out / "student"
    cfg = yaml.safe_load((student / "config.yaml").read_text())
    assert cfg["model"]["preset"] == "narrow" and cfg["data"]["train_tgt"] == str(distilled)
    assert (student / "spm.model").read_bytes() == (run / "spm.model").read_bytes()  # the teacher's vocabulary
    assert (out / "student-ct2-int8" / "model.bin").is_file()
    with zipfile.ZipFile(out / "digits_en.argosmodel") as z:
        assert any(n.endswith("metadata.json") for n in z.namelist())
    again = run_aiayn(*args, text=True)  # every stage done: nothing is redone
    assert again.returncode == 0 and "distill:" not in again.stderr
