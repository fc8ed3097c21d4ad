"""A run directory loads one weights file, the same for every command: RUN/weights.json's (written by
`aiayn average --default` and the quickstart), else best.safetensors, else the newest checkpoint.

One tiny run is trained through the CLI on the embedded corpus (about 5 s): best.safetensors is its
step 40 (the best validation BLEU), and the average of its last three checkpoints (steps 40-60)
translates otherwise, so a command that loads the wrong file shows it in its output.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
import yaml

from aiayn.checkpoint import load_model, read_metadata, resolve_weights
from inprocess import run_aiayn
from test_train_run import TINY

SOURCES = ["21", "345", "70012", "9", "1234567", "806", "44", "5190", "12", "300000", "7", "65"]
STEPS = {"max_steps": 60, "eval_every": 20, "save_every": 10, "keep_last": 3}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run as training leaves it: no weights.json. Tests change copies of it."""
    root = tmp_path_factory.mktemp("weights")
    cfg = json.loads(json.dumps(TINY))
    cfg["optim"]["lr_scale"] = 0.2
    cfg["train"].update(STEPS)
    (root / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    r = run_aiayn("train", "--config", root / "tiny.yaml", "--run-dir", root / "run", text=True)
    assert r.returncode == 0, r.stderr
    run = root / "run"
    best = int(read_metadata(run / "best.safetensors")["step"])
    assert best < 60, f"best.safetensors is step {best}: the last step, so it is too near the average to tell apart"
    return run


def copy_run(trained: Path, dest: Path) -> Path:
    return Path(shutil.copytree(trained, dest, ignore=shutil.ignore_patterns("ct2")))


def translate(*args: str | Path) -> tuple[str, list[str]]:
    """`aiayn translate` of SOURCES (greedy, short): (stdout, stderr lines)."""
    r = run_aiayn("translate", *args, "--beam", "1", "--max-len-b", "8", input="\n".join(SOURCES) + "\n", text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr.splitlines()


def test_average_default_makes_the_run_translate_with_the_average(trained: Path, tmp_path: Path) -> None:
    run = copy_run(trained, tmp_path / "run")
    assert resolve_weights(run) == run / "best.safetensors"  # no weights.json: the order runs always had
    r = run_aiayn("average", run, "--last", "3", "--default", text=True)
    assert r.returncode == 0, r.stderr
    average = run / "average_last3.safetensors"
    why = "the average of the last 3 checkpoints (steps 40, 50, 60), made the default by aiayn average --default"
    assert json.loads((run / "weights.json").read_text()) == {"weights": average.name, "why": why}

    out, err = translate("-c", run)
    assert err[0] == f"weights: {average} (step 60; weights.json: {why})"  # the first line says which
    assert err[1].startswith("engine: ")
    assert out == translate("-c", average)[0]
    assert out != translate("-c", run / "best.safetensors")[0]
    torch_out, _ = translate("-c", run, "--engine", "torch")
    assert torch_out == out  # greedy: both engines, the same weights
    loaded, mean = load_model(run).state_dict(), load_model(average).state_dict()
    assert all(torch.equal(loaded[k], mean[k]) for k in mean)


def test_a_default_that_is_missing_malformed_or_outside_the_run_is_one_line(trained: Path, tmp_path: Path) -> None:
    run = copy_run(trained, tmp_path / "run")
    outside = tmp_path / "elsewhere.safetensors"
    r = run_aiayn("average", run, "--last", "2", "-o", outside, "--default", text=True)
    assert r.returncode == 2 and not outside.exists() and not (run / "weights.json").exists()
    assert r.stderr == (
        f"error: {outside} is not inside the run directory {run}: a run's default weights are its own file\n"
    )

    assert run_aiayn("average", run, "--last", "2", "--default").returncode == 0
    (run / "average_last2.safetensors").unlink()  # named, then gone: an error, not best.safetensors instead
    r = run_aiayn("translate", "-c", run, input="21\n", text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (
        f"error: {run}/weights.json names average_last2.safetensors as the run's weights, but "
        f"{run}/average_last2.safetensors is missing; name new ones (aiayn average {run} --default) or remove "
        f"{run}/weights.json to load best.safetensors\n"
    )
    for bad in ('{"weights": "../run/best.safetensors"}', '{"why": "no name"}', "not json"):
        (run / "weights.json").write_text(bad)
        r = run_aiayn("translate", "-c", run, input="21\n", text=True)
        assert r.returncode == 2 and r.stderr.startswith(f"error: {run}/weights.json is not a weights record")
        assert len(r.stderr.splitlines()) == 1


def test_evaluate_serve_export_and_argos_load_the_default(trained: Path, tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    from aiayn import Translator
    from aiayn.argos import export_argos
    from aiayn.averaging import average_run
    from aiayn.evaluate import evaluate_run
    from aiayn.export import cached_export
    from aiayn.serve.engines import load_engine

    run = copy_run(trained, tmp_path / "run")
    average = average_run(run, 3, run / "avg.safetensors", default_because="what this test scores")
    best = run / "best.safetensors"
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(SOURCES) + "\n")
    ref.write_text("\n".join(["twenty-one"] * len(SOURCES)) + "\n")

    def evaluated(path: Path) -> list[str]:
        evaluate_run(path, src=str(src), ref=str(ref), output=str(tmp_path / "hyp.txt"), beam=1, max_len_b=8)
        return (tmp_path / "hyp.txt").read_text().splitlines()

    assert evaluated(run) == evaluated(average) != evaluated(best)

    for engine in ("torch", "ctranslate2"):  # aiayn serve's model
        served = load_engine(engine, run).translator
        assert served.weights.startswith(f"{average} (step 60; weights.json: the average of the last 3")
        assert served.translate(SOURCES, beam=1, max_len_b=8) == Translator.load(average, engine=engine).translate(
            SOURCES, beam=1, max_len_b=8
        )

    # the CTranslate2 export is keyed by the content of the weights it is made from: the average's
    exported = cached_export(run)[0]
    assert exported == cached_export(average)[0] != cached_export(best)[0]
    r = run_aiayn("export", "--ctranslate2", tmp_path / "ct2", "-c", run, text=True)
    assert r.returncode == 0 and r.stderr.splitlines()[0].startswith(f"weights: {average} (step 60; weights.json")
    assert (tmp_path / "ct2" / "model.bin").read_bytes() == (exported / "model.bin").read_bytes()
    package = export_argos(run, tmp_path / "run.argosmodel")
    with zipfile.ZipFile(package) as z:
        (model_bin,) = [n for n in z.namelist() if n.endswith("/model/model.bin")]
        assert z.read(model_bin) == (exported / "model.bin").read_bytes()


def test_training_on_drops_a_default_it_leaves_behind(trained: Path, tmp_path: Path, capfd) -> None:
    from aiayn.averaging import average_run
    from aiayn.config import Config
    from aiayn.train import train

    run = copy_run(trained, tmp_path / "run")
    average_run(run, 3, run / "avg.safetensors", default_because="scored")
    train(Config.load(run / "config.yaml"), run, resume=True)  # finished: nothing trains, the default stays
    assert resolve_weights(run) == run / "avg.safetensors"
    capfd.readouterr()
    train(Config.load(run / "config.yaml", ["--train.max_steps", "62"]), run, resume=True)
    assert not (run / "weights.json").exists() and resolve_weights(run) == run / "best.safetensors"
    assert (
        f"{run}/weights.json removed (it named avg.safetensors): training on leaves those weights behind, so "
        f"-c {run} loads best.safetensors again" in capfd.readouterr().err
    )
