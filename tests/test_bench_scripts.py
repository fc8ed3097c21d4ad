"""The benchmark scripts still run against today's code: each at its smallest setting, as a real process.
(Not here: those that need a trained run or another checkout: serve_load, serve_batcher, compile_step's
compile, packed_multi30k, text_classification, data_identity, word_cache, openmp_pools' translate mode;
and, at tens of seconds each, openmp_pools' ct2 and ct2-alone modes.)

A benchmark is run by hand, weeks apart, so an API change (a trainer method gone, a renamed helper)
otherwise surfaces only when someone needs the numbers. These runs take seconds and check that each
script finishes and reports what it measures, not the numbers themselves.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(script: str, *args: str, home: Path) -> str:
    env = {**os.environ, "AIAYN_HOME": str(home), "OMP_NUM_THREADS": "1"}
    p = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert p.returncode == 0, f"{script} failed:\n{p.stderr[-3000:]}"
    return p.stdout


def json_lines(out: str) -> list[dict]:
    return [json.loads(x) for x in out.splitlines() if x.startswith("{")]


def test_checkpoint_save_writes_into_a_new_directory(home, tmp_path):
    new = str(tmp_path / "new")
    out = run("checkpoint_save.py", "--preset", "tiny", "--vocab", "500", "--repeat", "1", "--dir", new, home=home)
    (row,) = json_lines(out)
    assert row["preset"] == "tiny" and row["weights_bytes"] > 0 and row["state_bytes"] > row["weights_bytes"]


def test_loss_and_restricted_attention_compare_with_torch(home):
    out = run("loss.py", "--n", "64", "--vocab", "100", "--repeats", "1", "--threads", "1", home=home)
    assert "F.cross_entropy / aiayn:" in out
    out = run("restricted_attention.py", "--n", "64", "--window", "8", "--threads", "1", home=home)
    assert {"windowed", "full"} <= {r["method"] for r in json_lines(out)}


def test_throughput_and_the_profile_run_every_task(home, tmp_path):
    result = tmp_path / "t.json"
    run(
        "throughput.py",
        *("--size", "tiny", "--peers", "torch", "--tasks", "train,greedy,beam", "--repeats", "1", "--threads", "1"),
        *("--train-batches", "1", "--decode-batches", "1", "--decode-len", "3", "--no-memory", "--out", str(result)),
        home=home,
    )
    d = json.loads(result.read_text())
    assert {"train", "greedy", "beam"} <= set(d) and d["meta"]["size"] == "tiny"
    for task in ("greedy", "beam"):
        out = run(
            "profile_ops.py",
            *("--size", "tiny", "--task", task, "--threads", "1", "--decode-len", "3", "--rows", "2"),
            *("--out", str(tmp_path / f"{task}.txt")),
            home=home,
        )
        assert "Self CPU" in out and "Self CPU" in (tmp_path / f"{task}.txt").read_text()


def test_data_scale_prepares_a_synthetic_corpus(home, tmp_path):
    result = tmp_path / "scale.json"
    run("data_scale.py", "--pairs", "2000", "--workers", "1", "--vocab-size", "500", "--json", str(result), home=home)
    assert json.loads(result.read_text())


def test_data_throughput_on_the_embedded_corpus(home):
    assert run("data_throughput.py", "--corpus", "embedded", "--epochs", "1", home=home).strip()


@pytest.mark.needs_mirror
def test_train_step_times_the_trainers_step(home):
    out = run("train_step.py", "--max-tokens", "512", "--updates", "1", "--warmup", "1", "--threads", "1", home=home)
    assert "update" in out


def test_lm_char_trains_the_decoder_only_model(home, tmp_path):
    rng = random.Random(0)
    words = "to be or not that is the question whether tis nobler in mind suffer".split()
    text = "\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(400)) + "\n"
    (tmp_path / "input.txt").write_text(text)
    result = tmp_path / "lm.json"
    run(
        "lm_char.py",
        *("--aiayn-only", "--repeats", "1", "--threads", "1", "--input", str(tmp_path / "input.txt")),
        *("--set", "train.max_steps=2", "--out", str(result)),
        home=home,
    )
    (entry,) = json.loads(result.read_text())
    (row,) = entry["rows"]
    assert row["aiayn"]["steps"] == 2 and row["aiayn"]["val_loss_full"] > 0


def test_packed_weight_benchmarks_compare_every_variant(home):
    out = run(
        "packed_linear.py",
        *("--sizes", "tiny", "--rows", "4", "--threads", "1", "--rounds", "1", "--min-seconds", "0.01"),
        home=home,
    )
    assert "one decoder step's products: F.linear" in out and "aiayn-packed" in out
    out = run(
        "packed_decode.py",
        *("--size", "tiny", "--task", "greedy", "--rounds", "1", "--threads", "1", "--decode-len", "3"),
        home=home,
    )
    assert "same outputs as plain" in out


def test_isolated_decode_runs_each_engine_in_its_own_process(home, tmp_path):
    result = tmp_path / "isolated.json"
    out = run(
        "isolated_decode.py",
        *("--size", "tiny", "--task", "beam", "--engines", "aiayn,ct2-float32", "--rounds", "2", "--runs", "1"),
        *("--threads", "1", "--decode-len", "3", "--out", str(result)),
        home=home,
    )
    assert "aiayn/ct2-float32 = " in out
    figures = json.loads(result.read_text())
    assert len(figures["tokens_per_s"]["aiayn"]) == 2 and min(figures["tokens_per_s"]["ct2-float32"]) > 0


def test_few_query_attention_compares_sdpa_with_the_explicit_path(home):
    out = run("few_query_attention.py", "--queries", "1,4", "--threads", "1", "--sentences", "4", home=home)
    assert out.count("queries/row: SDPA") == 2


def test_openmp_pools_times_an_add_with_one_and_two_pools(home):
    out = run("openmp_pools.py", "threads", home=home)
    assert "worker thread after main ran one: add" in out and "main thread after it ended: add" in out


def test_translate_times_each_engine_in_a_fresh_process(home, tmp_path):
    import torch

    from aiayn.checkpoint import save_weights
    from aiayn.config import ModelConfig
    from aiayn.data.tokenizer import Tokenizer
    from aiayn.model import Transformer

    lines = ["Ein Hund rennt.", "Zwei Männer spielen.", "Eine Frau liest.", "", "Ein Kind schläft."]
    run_dir = tmp_path / "run"
    tok = Tokenizer.train(lines * 40, run_dir / "spm.model", vocab_size=320, threads=1)
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=tok.vocab_size)).eval()
    save_weights(model, run_dir / "best.safetensors")
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ref.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "r.json"
    args = ["--rounds", "1", "--warmup", "2", "--beam", "2", "--threads", "1", "--json", str(out)]
    printed = run("translate.py", str(run_dir), str(src), str(ref), *args, home=home)
    rows = json_lines(printed)
    assert [r["engine"] for r in rows] == ["torch", "ctranslate2", "torch-int8", "ctranslate2-int8"], printed
    assert [r["decoded_by"] for r in rows] == ["torch", "ctranslate2", "torch", "ctranslate2"]
    for r in rows:
        assert r["sentences"] == 5 and 0 < r["decode_s"] < r["command_s"] and r["pieces_per_s"] > 0
        assert 0 <= r["bleu"] <= 100
    assert json.loads(out.read_text()) == rows
