"""The benchmark scripts still run against today's code: each at its smallest setting, as a real process.
(Not here: serve_load, which needs a trained run and minutes of load; examples/text_classification.py,
which trains eight runs.)

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


def json_lines(out: str) -> list[dict]:
    return [json.loads(x) for x in out.splitlines() if x.startswith("{")]


def test_kernels_compare_the_loss_and_restricted_attention_with_torch(home):
    out = run("kernels.py", "loss", "--n", "64", "--vocab", "100", "--repeats", "1", "--threads", "1", home=home)
    (row,) = json_lines(out)
    assert row["kernel"] == "loss" and row["n"] == 64 and row["peer_over_aiayn"] > 0
    out = run("kernels.py", "attention", "--n", "64", "--window", "8", "--threads", "1", home=home)
    rows = json_lines(out)
    assert {r["method"] for r in rows} == {"windowed", "band-mask", "full"} and all(r["ms"] > 0 for r in rows)


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
    for task in ("train", "beam"):  # its two paths: a training step, and decoding (greedy's is beam's)
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
    # one engine of each kind, each path once: torch with int8 dynamic quantization, aiayn's CTranslate2
    # engine on the float32 export, and the peer on the int8 export (both exports built)
    engines = ["torch-int8", "ctranslate2", "ct2-direct-int8"]
    args = ["--engines", ",".join(engines), "--rounds", "1", "--warmup", "2", "--beam", "2", "--threads", "1"]
    printed = run("translate.py", str(run_dir), str(src), str(ref), *args, "--json", str(out), home=home)
    rows = json_lines(printed)
    assert [r["engine"] for r in rows] == engines, printed
    # ct2-direct: CTranslate2 alone on the run's export, in a process that asserts it never imported torch
    assert [r["decoded_by"] for r in rows] == ["torch", "ctranslate2", "ct2-direct"]
    for r in rows:
        assert r["sentences"] == 5 and 0 < r["decode_s"] < r["command_s"] and r["pieces_per_s"] > 0
        assert 0 <= r["bleu"] <= 100
    assert json.loads(out.read_text()) == rows


def test_the_gpu_check_runs_end_to_end_in_its_cpu_smoke_mode(home, tmp_path):
    """bench/gpu.py is run on a lent GPU for minutes, weeks apart: its --smoke mode runs every path (each
    training mode, the compiled case in its own process, both decoders, CTranslate2 in its subprocess)."""
    out, md = tmp_path / "g.json", tmp_path / "g.md"
    run("gpu.py", "--smoke", "--engines", "aiayn,torch", "--out", str(out), "--md", str(md), home=home)
    r = json.loads(out.read_text())
    for mode in ("fp32", "bf16"):
        for engine in ("aiayn", "torch"):
            row = r["train"][f"tiny/{mode}/{engine}"]
            assert row["tokens_per_s"] > 0 and row["flops_per_token"] > 0 and len(row["update_s"]) == row["updates"]
    compiled = r["train"]["tiny/bf16-compile/aiayn"]
    assert compiled["tokens_per_s"] > 0 and len(compiled["warmup_update_s"]) >= 2  # one warm-up per batch shape
    for key in ("aiayn-float32/beam4", "aiayn-bfloat16/greedy", "ct2-float32/beam4", "ct2-int8/greedy"):
        assert r["decode"][key]["sentences_per_s"] > 0, r["decode"]
    assert r["ratios"]["train tiny bf16 aiayn/torch"] > 0
    assert "| tiny | bf16-compile | aiayn |" in md.read_text()


@pytest.mark.needs_mirror
def test_multi30k_captions_run_together_are_cut_and_single_ones_never(home):
    """The run-on cut (aiayn.documents.segment, step 3) on real text, as bench/segmenters.py --multi30k
    measures it for docs/serving.md: with starts learnt from the Multi30k training captions, no test or
    validation caption that ends in a stop is cut, and at least 90 % of the pairs of a caption without
    a final stop and the next one, joined by a space, are cut where they meet (measured: de 63 of 68,
    en 93 of 97)."""
    from conftest import multi30k_mirror

    rows = json_lines(run("segmenters.py", "--multi30k", str(multi30k_mirror()), home=home))
    langs = {r["lang"]: r for r in rows if "lang" in r}
    for lang in ("de", "en"):
        assert langs[lang]["cut_whole"] == 0 and langs[lang]["cut_right"] >= 0.9 * langs[lang]["joined"], langs[lang]


def test_segmenters_compare_on_the_gold_set(home):
    rows = {(r["set"], r["segmenter"], r["mode"]): r for r in json_lines(run("segmenters.py", home=home))}
    assert ("gold", "sentencex", "raw") in rows and ("held out", "sentencex", "lines") in rows
    assert rows["gold", "aiayn", "lines"]["fn"] == 0 and rows["gold", "aiayn", "lines"]["right"] == 1.0
    assert rows["held out", "aiayn", "lines"]["right"] >= 0.9
    assert rows["held out 2", "aiayn", "lines"]["right"] >= rows["held out 2", "sentencex", "lines"]["right"]
