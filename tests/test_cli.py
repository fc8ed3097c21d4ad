"""The console script, run as a real process."""

from __future__ import annotations

import subprocess
import sys

from aiayn import __version__


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aiayn", *args], capture_output=True, text=True, timeout=120)


def test_version_and_help():
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"aiayn {__version__}"
    r = run("--help")
    assert r.returncode == 0 and "model" in r.stdout


def test_model_command_runs_a_forward_pass():
    r = run("model", "--preset", "tiny", "--vocab-size", "100")
    assert r.returncode == 0, r.stderr
    assert "logits (2, 16, 100)" in r.stdout
