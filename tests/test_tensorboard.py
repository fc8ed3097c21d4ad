"""train.tensorboard: metrics.jsonl's records as TensorBoard scalars, read back with TensorBoard's own
reader, for a run and for the same run resumed after a crash (no step twice)."""

from __future__ import annotations

import json

import pytest

from aiayn.checkpoint import checkpoint_paths
from aiayn.config import Config
from aiayn.train import train

pytest.importorskip("tensorboard", reason="pip install 'aiayn[tensorboard]'")


def config(max_steps: int) -> Config:
    return Config.load(
        None,
        {
            **{"data.corpus": "embedded", "data.src_lang": "digits", "data.tgt_lang": "en"},
            # batches of 512 tokens: the records, not the learning, are under test (an eighth of the default's time)
            **{"data.vocab_size": 300, "data.embedded_size": 1200, "data.max_tokens": 512, "model.preset": "tiny"},
            **{"train.max_steps": max_steps, "train.log_every": 10, "train.eval_every": 25, "train.save_every": 20},
            **{"train.eval_max_sentences": 10, "train.progress": False, "train.tensorboard": True},
        },
    )


def scalars(run) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def records(run) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for k, v in rec.items():
            if k not in ("kind", "step") and isinstance(v, int | float) and not isinstance(v, bool):
                out.setdefault(f"{rec['kind']}/{k}", []).append((rec["step"], v))
    return out


def assert_same(tb: dict, jsonl: dict) -> None:
    assert tb.keys() == jsonl.keys()
    for tag, points in jsonl.items():
        assert [s for s, _ in tb[tag]] == [s for s, _ in points], tag  # each step once, in order
        assert all(abs(a - b) <= 1e-6 * max(1.0, abs(b)) for (_, a), (_, b) in zip(tb[tag], points)), tag  # float32


def test_every_record_is_a_scalar_and_a_resumed_run_shows_no_step_twice(home, tmp_path):
    whole = tmp_path / "whole"
    train(config(50), whole)
    tb = scalars(whole)
    assert {"train/loss", "train/lr", "train/tokens_per_s", "valid/loss", "valid/bleu"} <= tb.keys()
    assert [s for s, _ in tb["train/loss"]] == [10, 20, 30, 40, 50] and [s for s, _ in tb["valid/loss"]] == [25, 50]
    assert_same(tb, records(whole))

    crashed = tmp_path / "crashed"
    train(config(30), crashed)  # events up to step 30; then the crash takes the checkpoint of step 30 with it
    for path in checkpoint_paths(crashed, 30):
        path.unlink()
    train(config(50), crashed, resume=True)  # from step 20: steps 30 ... 50 logged again
    tb = scalars(crashed)
    assert [s for s, _ in tb["train/loss"]] == [10, 20, 30, 40, 50] and [s for s, _ in tb["valid/loss"]] == [25, 50]
    assert_same(tb, records(crashed))
    assert len(list((crashed / "tensorboard").iterdir())) == 2  # one event file per start of the run
