"""`aiayn export --argos`: the package Argos Translate installs translates as our CTranslate2 engine does.

The tiny reverse-task model of tests/test_export.py is trained (about 15 seconds), exported with the
real command line, installed by argostranslate in a subprocess whose every Argos directory (packages,
data, config, cache, HOME) lies in tmp_path, and its translations compared with Translator's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from aiayn.checkpoint import save_weights
from aiayn.cli import main
from aiayn.config import ModelConfig
from aiayn.data.tokenizer import Tokenizer
from aiayn.decode import Translator
from aiayn.model import Transformer

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()

# Runs in the subprocess. Argos 1.11 splits text into sentences with MiniSBD (default), Stanza or spaCy,
# whose models are downloaded on first use; ARGOS_CHUNK_TYPE=NONE is not implemented there (its
# PackageTranslation raises NotImplementedError), so the sentence splitter is replaced by "the whole
# line is one sentence" (each test line is one sentence). Everything else is Argos's own code.
ARGOS_SCRIPT = """
import json, sys
import argostranslate.package, argostranslate.sbd, argostranslate.translate
argostranslate.sbd.MiniSBDSentencizer.split_sentences = lambda self, text: [text]
pkg, src, tgt = sys.argv[1:4]
argostranslate.package.install_from_path(pkg)
installed = argostranslate.package.get_installed_packages()
lines = json.loads(sys.stdin.read())
out = [argostranslate.translate.translate(line, src, tgt) for line in lines]
import ctranslate2
from argostranslate import settings
model = ctranslate2.Translator(str(installed[0].package_path / "model"), compute_type=settings.compute_type)
packages = [(p.from_code, p.to_code, p.package_version) for p in installed]
print(json.dumps({"packages": packages, "out": out, "compute_type": model.compute_type}))
"""


def _argos_env(root: Path, **extra: str) -> dict[str, str]:
    """Every directory argostranslate.settings (and the libraries it imports) write to, inside `root`."""
    env = dict(os.environ)
    for var in ("SNAP", "ARGOS_TRANSLATE_PACKAGE_DIR", "ARGOS_DEVICE_TYPE"):
        env.pop(var, None)
    home = root / "home"
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_CACHE_HOME=str(home / "cache"),
        ARGOS_PACKAGES_DIR=str(root / "packages"),
        ARGOS_PACKAGE_INDEX="http://127.0.0.1:9/",  # a closed port: nothing is fetched
        ARGOS_INTRA_THREADS="1",
        **extra,
    )
    return env


def _argos(root: Path, pkg: Path, lines: list[str], src: str, tgt: str, **env: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", ARGOS_SCRIPT, str(pkg), src, tgt],
        input=json.dumps(lines),
        capture_output=True,
        text=True,
        timeout=240,
        env=_argos_env(root, **env),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, reverser: tuple) -> dict:
    """A run (spm.model + one checkpoint) of a tiny model trained to reverse sequences of words."""
    root = tmp_path_factory.mktemp("argos")
    from test_export import STEPS, _batch  # the reverse task of tests/test_export.py

    trained, model, tok, symbols = reverser
    shutil.copyfile(trained / "spm.model", root / "spm.model")
    steps = STEPS
    run = root / "run"
    save_weights(model, run / "checkpoints" / f"step_{steps:08d}.safetensors", step=steps)
    shutil.copyfile(root / "spm.model", run / "spm.model")
    src, _, _ = _batch(symbols, 8, torch.Generator().manual_seed(1))
    lines = [tok.decode([i for i in row if i > 3]) for row in src.tolist()]
    return dict(root=root, run=run, lines=lines)


@pytest.mark.needs_argos
def test_argos_package_translates_as_our_engine(run: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pkg = tmp_path / "out" / "de_en.argosmodel"
    assert main(["export", "--argos", str(pkg), "-c", str(run["run"])]) == 0
    assert capsys.readouterr().out.strip() == f"wrote Argos Translate package to {pkg}"

    with zipfile.ZipFile(pkg) as z:
        names = set(z.namelist())
        top = {n.split("/")[0] for n in names}
        assert top == {"translate-de_en-1_0"}, top
        assert {
            f"translate-de_en-1_0/{f}"
            for f in (
                "metadata.json",
                "README.md",
                "sentencepiece.model",
                "model/model.bin",
                "model/config.json",
                "model/spm.model",
            )
        } <= names
        meta = json.loads(z.read("translate-de_en-1_0/metadata.json"))
        assert z.read("translate-de_en-1_0/sentencepiece.model") == (run["run"] / "spm.model").read_bytes()
    assert (meta["from_code"], meta["to_code"], meta["type"]) == ("de", "en", "translate")
    assert (meta["from_name"], meta["to_name"]) == ("German", "English")

    lines = run["lines"]
    ours = Translator.load(run["run"], engine="ctranslate2")
    # ARGOS_BEAM_SIZE=1: Argos searches greedily (beam_size = max(num_hypotheses, ARGOS_BEAM_SIZE)),
    # where its length penalty has no effect: the same search as our greedy one. ARGOS_COMPUTE_TYPE
    # "default": the export's float32, as our engine loads it (Argos's own default, "auto", quantizes).
    got = _argos(tmp_path, pkg, lines, "de", "en", ARGOS_BEAM_SIZE="1", ARGOS_COMPUTE_TYPE="default")
    assert got["packages"] == [["de", "en", "1.0"]] and got["compute_type"] == "float32"
    assert got["out"] == ours.translate(lines, beam=1)
    # the model learned its task (pieces reversed): outputs end with EOS, not at a length limit
    assert all(0 < len(out) <= 2 * len(line) for out, line in zip(got["out"], lines)), (lines, got["out"])
    assert (tmp_path / "packages" / "translate-de_en-1_0" / "model" / "model.bin").is_file()

    # Argos's defaults: beam 4, CTranslate2's length penalty 0.2 (sum log p / |Y|^0.2, not GNMT's) and
    # compute type "auto" (on a CPU with int8: int8_float32, weights quantized as they load). Not
    # promised identical to any of our settings in general; on this confident model every output agrees.
    got4 = _argos(tmp_path / "defaults", pkg, lines, "de", "en")
    assert got4["out"] == ours.translate(lines, beam=4, length_penalty=0.2), got4["compute_type"]

    # exists: refused without --force, replaced with it
    assert main(["export", "--argos", str(pkg), "-c", str(run["run"])]) == 2
    assert "exists (--force replaces it)" in capsys.readouterr().err
    assert main(["export", "--argos", str(pkg), "-c", str(run["run"]), "--force", "--source-lang", "fr"]) == 0
    with zipfile.ZipFile(pkg) as z:
        assert {n.split("/")[0] for n in z.namelist()} == {"translate-fr_en-1_0"}


def test_argos_export_of_a_model_ctranslate2_cannot_run(
    run: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    spm = run["run"] / "spm.model"
    windowed = tmp_path / "windowed"
    windowed.mkdir()
    shutil.copyfile(spm, windowed / "spm.model")
    cfg = ModelConfig.preset("tiny", Tokenizer(spm).vocab_size, attention_window=3)
    save_weights(Transformer(cfg).eval(), windowed / "best.safetensors", step=1)
    pkg = tmp_path / "x.argosmodel"
    assert main(["export", "--argos", str(pkg), "-c", str(windowed)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: cannot export {windowed} for Argos Translate, which decodes with CTranslate2: "
        "restricted self-attention (attention_window 3): CTranslate2 has none"
    ]
    assert not pkg.exists() and not (windowed / "ct2").exists()

    assert main(["export", "--argos", str(pkg), "-c", str(windowed), "--spm", str(spm)]) == 2
    assert (
        capsys.readouterr().err.strip() == "error: --spm is for --ctranslate2: --argos packages the run's own spm.model"
    )


@pytest.mark.needs_argos
def test_argos_splits_sentences_offline_with_the_packaged_spacy_pipeline(run: dict, tmp_path: Path) -> None:
    """Argos's default splitter (MiniSBD) downloads a model on the first translation (offline, LibreTranslate
    answers 500). The package holds a blank spaCy pipeline of the source language: with
    ARGOS_CHUNK_TYPE=SPACY, Argos's own code splits a text into sentences with it, nothing downloaded
    (every address here is a closed port or unresolvable), each translated as it is alone."""
    pkg = tmp_path / "de_en.argosmodel"
    assert main(["export", "--argos", str(pkg), "-c", str(run["run"])]) == 0
    with zipfile.ZipFile(pkg) as z:
        assert "translate-de_en-1_0/spacy/config.cfg" in z.namelist()
    a, b = run["lines"][:2]
    two = f"{a}. {b}."
    got = _argos(
        tmp_path / "split", pkg, [two, f"{a}.", f"{b}."], "de", "en", ARGOS_CHUNK_TYPE="SPACY", ARGOS_BEAM_SIZE="1"
    )
    words = [x.split() for x in got["out"]]  # Argos joins the sentences' translations with a space
    assert words[0] == words[1] + words[2] and words[1] != words[2]
    assert not list((tmp_path / "split" / "home").rglob("*.onnx"))  # no MiniSBD model fetched
