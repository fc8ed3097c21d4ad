"""The task registry: a task is one file (tests/toy_task.py) and the loop trains it unchanged."""

from __future__ import annotations

import json

import pytest

from aiayn.config import Config, ConfigError
from aiayn.train import train
from aiayn.train.tasks import get_spec, spec_for, task_names


def test_the_four_tasks_are_registered_with_their_stacks():
    kinds = {name: get_spec(name).model_kind for name in task_names()}
    assert {k: kinds[k] for k in ("translate", "lm", "mlm", "classify", "parse")} == {
        "translate": "encoder-decoder",
        "lm": "decoder-only",
        "mlm": "encoder-only",
        "classify": "encoder-only",
        "parse": "encoder-decoder",
    }
    with pytest.raises(
        ConfigError, match=r"task.name must be one of classify \| lm \| mlm \| parse \| translate, not .nope."
    ):
        spec_for(Config.load(None, {"task.name": "nope"}))


def test_a_task_from_one_file_trains(home, tmp_path):
    import toy_task  # registers `reverse`

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
        "train.eval_bleu": False,
    }
    run = tmp_path / "run"
    train(Config.load(None, over), run)
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["kind"] == "valid"]
    assert [r["step"] for r in valid] == [150, 300]
    # it learns the task, not only runs: guessing among the 8 letters costs ln 8 = 2.1 nats a token
    assert valid[-1]["loss"] < 0.5
    assert Config.load(str(run / "config.yaml")).task.name == "reverse"
    assert (run / "reverse-data" / "train.src").is_file() and (run / "best.safetensors").is_file()
