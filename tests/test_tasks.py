"""The task registry: a task is its own module (tests/toy_task.py), found through the `aiayn.tasks` entry
points as aiayn's own are found in aiayn.registry, and aiayn trains, evaluates and runs it unchanged."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from aiayn import registry
from aiayn.config import MODEL_KINDS, Config, ConfigError
from aiayn.train import train
from aiayn.train.tasks import get_spec, resolved, spec_for, task_names

ROOT = Path(__file__).resolve().parents[1]


def test_the_built_in_tasks_are_declared_once_and_registered_with_their_stacks():
    """aiayn's own tasks are declared once, in aiayn.registry (pyproject.toml declares no entry points that
    would repeat them), and read as other distributions' `aiayn.tasks` entry points are. Every declared task
    loads, under its own name; its verbs and its evaluation are fields of its record."""
    assert "entry-points" not in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert set(registry.BUILTIN_TASKS) <= set(task_names())
    for name in registry.BUILTIN_TASKS:
        spec = get_spec(name)
        assert spec.name == name and spec.model_kind in MODEL_KINDS
        assert spec.settings is None or dataclasses.is_dataclass(spec.settings)
    assert {n: get_spec(n).commands for n in registry.BUILTIN_TASKS} == {
        "translate": "aiayn.cli.translate",
        "lm": "aiayn.cli.lm",
        "mlm": None,
        "classify": "aiayn.cli.classify",
        "parse": "aiayn.cli.parsing",
    }
    assert [n for n in registry.BUILTIN_TASKS if get_spec(n).evaluate is not None] == ["translate", "parse"]
    with pytest.raises(ConfigError, match=r"task.name must be one of .*translate.*, not .nope."):
        spec_for(Config.load(None, {"task.name": "nope"}))


def test_a_task_owns_its_settings_and_old_run_configs_still_load(tmp_path):
    """`task:` keys besides name are the task's own settings, checked by its dataclass; a config saved when
    one section held every task's settings (and data.ptb_root) loads with its own task's values."""
    cfg = Config.load("craft_parse", ["--task.tree_leaves", "xx"])
    from aiayn.train.tasks.parse import ParseSettings

    defaults = dataclasses.asdict(ParseSettings())
    assert resolved(cfg, spec_for(cfg)).to_dict()["task"] == {"name": "parse", **defaults, "tree_leaves": "xx"}
    with pytest.raises(ConfigError, match="unknown task fields"):
        spec_for(Config.load("craft_parse", {"task.block_size": 64}))
    # naming another task drops the file's settings of its own (fine-tuning a classifier from an mlm run)
    assert Config.load("craft_parse", {"task.name": "lm", "task.block_size": 64}).task.options == {"block_size": 64}
    with pytest.raises(ConfigError, match="task.block_size must be >= 2"):
        spec_for(Config.load(None, {"task.name": "lm", "task.block_size": 1, "data.corpus": "text"}))
    with pytest.raises(ConfigError, match="task translate reads data.corpus"):
        spec_for(Config.load(None, {"data.corpus": "craft"}))
    old = {
        "data": {"corpus": "wsj", "ptb_root": "/ldc/treebank_3"},
        "task": {
            "name": "parse",
            **{"block_size": None, "batch_size": 12, "mask_prob": 0.15, "mask_token": 0.8, "random_token": 0.1},
            "tree_leaves": "words",
        },
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    cfg = Config.load(str(tmp_path / "config.yaml"))
    assert resolved(cfg, spec_for(cfg)).to_dict()["task"] == {
        "name": "parse",
        **defaults,
        "tree_leaves": "words",
        "ptb_root": "/ldc/treebank_3",
    }
    old["task"] = {**old["task"], "name": "lm"}
    old["data"] = {"corpus": "text", "ptb_root": None}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    cfg = Config.load(str(tmp_path / "config.yaml"))
    assert resolved(cfg, spec_for(cfg)).to_dict()["task"] == {"name": "lm", "block_size": None, "batch_size": 12}


def test_a_setting_a_task_took_over_keeps_its_old_key():
    """train.eval_bleu is translate's own setting now (task.eval_bleu) and data.ptb_root parse's: a saved
    run's config, a recipe or an override that still says the old key sets the task's setting, is ignored
    by a run of another task, and a key no task took over is still refused as unknown."""
    assert get_spec("translate").moved == ("train.eval_bleu",) and get_spec("parse").moved == ("data.ptb_root",)
    for old in ({"train": {"eval_bleu": False}}, {"train": {"eval_bleu": False}, "task": {"eval_bleu": True}}):
        cfg = Config.from_dict(old)
        assert "eval_bleu" not in cfg.to_dict()["train"]
        assert resolved(cfg, spec_for(cfg)).task.options == {"eval_bleu": "task" in old}  # the task section first
    assert Config.load(None, ["--train.eval_bleu", "false"]).task.options == {"eval_bleu": False}
    lm = Config.load(None, {"task.name": "lm", "data.corpus": "text", "train.eval_bleu": False, "data.ptb_root": "x"})
    assert lm.task.options == {} and "eval_bleu" not in lm.to_dict()["train"]
    with pytest.raises(ConfigError, match=r"unknown train fields \['eval_blue'\]"):
        Config.load(None, {"train.eval_blue": False})


def test_a_task_from_one_file_trains(home, tmp_path, monkeypatch):
    import toy_task

    monkeypatch.syspath_prepend(str(install_toy_distribution(tmp_path / "site")))  # its entry point registers it
    assert "reverse" in task_names() and get_spec("reverse") is toy_task.SPEC
    over = {
        "task.name": "reverse",
        "model.preset": "tiny",
        "model.dropout": 0.0,
        "data.vocab_size": 300,
        "data.max_tokens": 400,
        "optim.warmup": 30,
        "optim.lr_scale": 0.3,
        "optim.label_smoothing": 0.0,
        "train.max_steps": 300,
        "train.eval_every": 150,
        "train.save_every": 300,
        "train.log_every": 10,
    }
    run = tmp_path / "run"
    train(Config.load(None, over), run)
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["kind"] == "valid"]
    assert [r["step"] for r in valid] == [150, 300]
    # it learns the task, not only runs: guessing among the 8 letters costs ln 8 = 2.1 nats a token
    assert valid[-1]["loss"] < 0.5 and 0 <= valid[-1]["exact"] <= 1  # the task's own measure is recorded
    assert Config.load(str(run / "config.yaml")).task.name == "reverse"
    assert (run / "reverse-data" / "train.src").is_file() and (run / "best.safetensors").is_file()


def test_batches_without_max_tokens_are_named_before_training(home, tmp_path, monkeypatch):
    """A task whose training batches do not say their micro-batch size (TrainBatches.max_tokens) is
    refused in one message naming the task, on every rank alike, before the first update."""
    import toy_task
    from aiayn.train.tasks import spec

    sizeless = dataclasses.replace(toy_task.SPEC, name="sizeless", train_batches=lambda *args: object())
    monkeypatch.setitem(spec._LOADED, "sizeless", sizeless)  # as if read from an entry point in this process
    over = {"task.name": "sizeless", "model.preset": "tiny", "data.vocab_size": 300, "train.max_steps": 1}
    with pytest.raises(TypeError, match="task sizeless's train_batches gave a object without max_tokens"):
        train(Config.load(None, over), tmp_path / "run")
    assert not list((tmp_path / "run").glob("checkpoints/*"))


def install_toy_distribution(where: Path) -> Path:
    """tests/toy_task.py and toy_task_cli.py as an installed distribution of their own: the modules plus a
    dist-info whose entry_points.txt declares the task (its record names its command module), as pip would
    leave them."""
    where.mkdir(parents=True)
    for name in ("toy_task.py", "toy_task_cli.py"):
        (where / name).write_text((Path(__file__).parent / name).read_text())
    info = where / "toy_task-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-task\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[aiayn.tasks]\nreverse = toy_task:SPEC\n")
    return where


def test_a_task_from_another_distribution_trains_evaluates_and_predicts_through_the_cli(home, tmp_path):
    """The toy task, found only through its distribution's entry point, in real `python -m aiayn`
    processes: its verb is listed, its setting and measure are used in training (early stopping watches
    `exact`, higher is better), `aiayn evaluate` reaches its record's evaluation and `aiayn predict` its
    predictor. aiayn is not edited, and the toy's modules are not on the test process's path."""
    dist = install_toy_distribution(tmp_path / "site")
    src = ROOT / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(dist), str(src)]), "AIAYN_HOME": str(home)}

    def aiayn(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        r = subprocess.run(
            [sys.executable, "-m", "aiayn", *args], input=stdin, capture_output=True, text=True, env=env, timeout=600
        )
        assert r.returncode == 0, r.stderr[-3000:]
        return r

    assert "reverse-check" in aiayn("--help").stdout and "reverse" in aiayn("train", "--help").stdout
    assert aiayn("reverse-check", "a b c").stdout == "c b a\n"
    run = tmp_path / "run"
    over = {
        "task.letters": "abcd",
        "model.preset": "tiny",
        "data.vocab_size": 300,
        "data.max_tokens": 400,
        "optim.warmup": 10,
        "train.max_steps": 20,
        "train.eval_every": 10,
        "train.save_every": 10,
        "train.log_every": 5,
        "train.patience": 3,
        "train.progress": "false",
    }
    aiayn(
        "train", "--task", "reverse", "--run-dir", str(run), *(x for k, v in over.items() for x in (f"--{k}", str(v)))
    )
    valid = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"valid"' in x]
    assert [r["step"] for r in valid] == [10, 20] and all(0 <= r["exact"] <= 1 for r in valid)
    assert set((run / "reverse-data" / "train.src").read_text().split()) <= set("abcd")  # task.letters
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["task"] == {"name": "reverse", "letters": "abcd"}
    import torch

    state = torch.load(sorted((run / "checkpoints").glob("*.state.pt"))[-1], weights_only=False)
    # early stopping watched the task's own measure, and kept the higher value as the best
    assert state["early_stop"]["metric"] == "exact" and state["best"] == max(r["exact"] for r in valid)
    scored = aiayn("evaluate", "-c", str(run), "--device", "cpu").stdout
    assert scored.startswith("exact match ") and "(40 sequences)" in scored
    out = aiayn("predict", "-c", str(run), "--device", "cpu", stdin="a b c\nd a\n").stdout.splitlines()
    assert len(out) == 2 and all(set(line.split()) <= set("abcd") | {"⁇"} for line in out)
    # the Hub card says what the task is and reports its own measure
    import toy_task  # noqa: F401 (the same spec, registered in this process to read the card here)
    from aiayn.publish import model_card

    card = model_card("user/reverse", Config.load(str(run / "config.yaml")), run / "best.safetensors", run)
    assert "tags:\n- text2text-generation\n" in card and "translation" not in card
    assert "task: writing a sequence of letters backwards" in card
    assert f"- Validation exact: {valid[-1]['exact']:.2f} (step 20)" in card
