"""The console script, run as a real process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from aiayn import __version__


def run(*args: str, module: str = "aiayn") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)


def test_version_and_help():
    for module in ("aiayn", "aiayn.cli"):  # python -m aiayn.cli is what torchrun and the bench scripts run
        r = run("--version", module=module)
        assert r.returncode == 0 and r.stdout.strip() == f"aiayn {__version__}", module
    r = run("--help")
    assert r.returncode == 0
    for command in (
        "quickstart",
        "data",
        "train",
        "average",
        "translate",
        "evaluate",
        "attention",
        "plot",
        "ablate",
        "export",
        "serve",
        "generate",
        "score",
        "classify",
        "model",
    ):
        assert f"    {command}" in r.stdout


def test_model_command_runs_a_forward_pass():
    r = run("model", "--preset", "tiny", "--vocab-size", "100")
    assert r.returncode == 0, r.stderr
    assert "logits (2, 16, 100)" in r.stdout


def test_user_errors_are_one_line_with_exit_2(tmp_path):
    r = run("train", "--config", str(tmp_path / "missing.yaml"), "--run-dir", str(tmp_path / "run"))
    assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  preset: tiny\n  n_heads: 3\ndata:\n  corpus: embedded\n")
    r = run("train", "--config", str(cfg), "--run-dir", str(tmp_path / "run"))
    assert r.returncode == 2 and "not divisible by n_heads=3" in r.stderr and "Traceback" not in r.stderr
    ref = tmp_path / "ref.txt"
    ref.write_text("a b\n")
    r = run("evaluate", "--hyp", str(ref), "--ref", str(ref), "--tokenized-bleu")
    assert r.returncode == 2 and "give --lang" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()  # nothing was started


def test_the_parser_loads_without_torch():
    """`aiayn --help` (and every command's parsing) stays fast: building the parser imports neither torch
    nor numpy; the library loads inside the command that runs."""
    code = (
        "import sys; from aiayn.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('torch', 'numpy', 'sentencepiece') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_scoring_a_file_and_a_mistyped_config_load_no_torch(tmp_path):
    """`aiayn evaluate --hyp H --ref R` is sacreBLEU's work, and a bad config is the user's: neither
    waits for torch to load (about 2 s)."""
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("a dog runs on the grass .\n")
    code = (
        "import sys; from aiayn.cli import main; "
        f"rc = main(['evaluate', '--hyp', {str(hyp)!r}, '--ref', {str(hyp)!r}]); "
        f"rc2 = main(['train', '--config', {str(tmp_path / 'missing.yaml')!r}, '--run-dir', {str(tmp_path / 'r')!r}]); "
        "print(rc, rc2, 'torch' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.startswith("BLEU = 100.00") and r.stdout.splitlines()[-1] == "0 2 False", r.stdout + r.stderr


def test_torch_threads_sleep_at_barriers_unless_the_user_says_otherwise(tmp_path):
    """The CLI sets OMP_WAIT_POLICY=PASSIVE before torch loads, so OpenMP threads never spin waiting for a
    thread that lost its core to another process (docs/benchmarks.md, "Beside a busy process"). Checked
    in what GNU OpenMP itself reports at start-up: a spin count of 0; a policy the user set is kept."""
    import os

    def spin_count(**env: str) -> str:
        base = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        r = subprocess.run(  # a command that loads torch, then fails (no checkpoints): enough to start OpenMP
            [sys.executable, "-m", "aiayn", "average", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**base, "OMP_DISPLAY_ENV": "verbose", **env},
        )
        assert r.returncode == 2 and "no checkpoints" in r.stderr, r.stderr[-2000:]
        lines = [x for x in r.stderr.splitlines() if "GOMP_SPINCOUNT" in x]
        if not lines:  # Linux wheels of torch link GNU OpenMP; others (macOS: LLVM's) report no spin count
            pytest.skip("torch's OpenMP runtime is not GNU OpenMP")
        (line,) = lines
        return line.split("=")[1].strip().strip("'")

    assert spin_count() == "0"
    assert int(spin_count(OMP_WAIT_POLICY="ACTIVE")) > 0
