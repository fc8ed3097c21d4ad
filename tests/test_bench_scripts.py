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
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aiayn.model.cpu_layout import mkl_packing_available, pack_linear

ROOT = Path(__file__).resolve().parents[1]


def run(script: str, *args: str, home: Path) -> str:
    # TMPDIR: a script's own temporary directories (data_throughput's fresh AIAYN_HOME, train_step's
    # run directory) go under the test's, not the machine's /tmp
    tmp = home.parent / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "AIAYN_HOME": str(home), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp)}
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


PACKS = mkl_packing_available() and pack_linear(__import__("torch").nn.Linear(8, 8)) is not None


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
    run(
        "data_scale.py",
        *("--pairs", "2000", "--sentences", "embedded", "--workers", "1", "--vocab-size", "500"),
        *("--json", str(result)),
        home=home,
    )
    (row,) = json.loads(result.read_text())
    assert row["pairs"] == 2000 and row["batches"] > 0 and row["disk_mb"] > 0 and row["peak_rss_mb"] > 0
    assert row["cached"] is True and row["cached_start_s"] < row["cold_wall_s"]  # the second start finds the cache


def test_data_throughput_on_the_embedded_corpus(home):
    from aiayn.config import DataConfig
    from aiayn.data import BatchIterator, prepare

    (row,) = json_lines(run("data_throughput.py", "--corpus", "embedded", "--epochs", "2", home=home))
    assert row["corpus"] == "embedded" and row["cpu_count"] == os.cpu_count()
    # the batches it counted are the corpus's: two epochs of what BatchIterator makes of it here
    it = BatchIterator(prepare(DataConfig(corpus="embedded")).splits["train"], 4096, seed=0)
    assert row["batches"] == 2 * len(list(it)) > 0
    assert row["prepare_cold_s"] > 0 and row["iter_tokens_per_s"] > 0 and 0 < row["padding_fraction"] < 1
    assert [p.name.startswith("aiayn-bench-") for p in (home.parent / "tmp").iterdir()] == [True]  # its own home


@pytest.mark.needs_mirror
def test_train_step_times_the_trainers_step(home):
    out = run("train_step.py", "--max-tokens", "512", "--updates", "2", "--warmup", "1", "--threads", "1", home=home)
    m = re.search(  # the last line (the trainer's own summary line comes first)
        r"^max_tokens 512, 1 threads: ([\d.]+) s/update, ([\d,]+) target tokens/s, target padding ([\d.]+)%\n\Z",
        out,
        re.M,
    )
    assert m, out
    seconds, tokens_per_s, padding = float(m[1]), int(m[2].replace(",", "")), float(m[3])
    assert seconds > 0 and tokens_per_s > 0 and 0 <= padding < 100
    # tokens/s is the batches' target tokens over the time: at most 512 per update's batch
    assert tokens_per_s * seconds <= 512 * 1.01


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


@pytest.mark.skipif(not PACKS, reason="no MKL packed GEMM in this torch build (or its packs fail the check)")
@pytest.mark.parametrize("task", ["greedy", "beam"])
def test_packed_decode_reports_the_same_outputs_as_plain(home, task):
    out = run(
        "packed_decode.py",
        *("--size", "tiny", "--task", task, "--rounds", "1", "--threads", "1", "--decode-len", "6"),
        *("--variants", "plain,packed,packed@8"),
        home=home,
    )
    same = dict(re.findall(r"^  (\S+) .*same outputs as plain: (True|False)$", out, re.M))
    assert same == {"plain": "True", "packed": "True", "packed@8": "True"}, out


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
