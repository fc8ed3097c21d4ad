"""What `aiayn train` shows while it runs, as a person sees it: in a terminal (a real pseudo-terminal) a
time-budgeted run draws a bar over its budget that ends at 100 %; in a pipe (CI, `| tee`) every
train.log_every prints one line, with no carriage returns."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

from inprocess import run_aiayn

TRAIN = [
    *("--data.corpus", "embedded", "--data.src_lang", "digits", "--data.tgt_lang", "en"),
    *("--data.vocab_size", "300", "--data.embedded_size", "1200", "--model.preset", "tiny"),
    *("--data.max_tokens", "512"),  # small batches: what is drawn is under test, not what is learnt
    *("--train.log_every", "10", "--train.eval_every", "1000", "--train.eval_max_sentences", "20"),
]


def in_terminal(args: list[str], env: dict[str, str], timeout: float = 240.0) -> str:
    """Everything a terminal 150 columns wide would have received, carriage returns kept."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 150, 0, 0))
    p = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 1 << 16)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif p.poll() is not None:
                break
        assert p.wait(timeout=10) == 0, out.decode(errors="replace")[-2000:]
    finally:
        p.kill()
        os.close(master)
    return out.decode(errors="replace")


def test_a_time_budget_draws_a_bar_that_ends_at_the_budget(home, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "aiayn", "train", "--run-dir", str(tmp_path / "run"), *TRAIN]
    out = in_terminal([*args, "--train.max_minutes", "0.05"], env)
    drawn = [x for x in out.split("\r") if x.startswith("train: ")]
    assert len(drawn) >= 2, out[-2000:]
    percents = [int(re.match(r"train: +(\d+)%", x).group(1)) for x in drawn]  # type: ignore[union-attr]
    assert percents == sorted(percents) and percents[-1] == 100
    assert re.search(r"\| 0:03 of 0:03, 0:00 left, step \d+, loss \d", drawn[-1]), drawn[-1]


def test_the_bar_ends_at_the_step_limit_when_it_comes_before_the_budget(home, tmp_path):
    """A 10-minute budget with 20 steps that take seconds: the bar runs to the step limit's time (projected,
    `of ~0:0x`, until the last step) and ends at 100 % with nothing left, not at `0:04 of 10:00, 9:56 left`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "aiayn", "train", "--run-dir", str(tmp_path / "run"), *TRAIN]
    out = in_terminal([*args, "--train.max_minutes", "10", "--train.max_steps", "20"], env)
    drawn = [x for x in out.split("\r") if x.startswith("train: ")]
    assert drawn and int(re.match(r"train: +(\d+)%", drawn[-1]).group(1)) == 100, out[-2000:]  # type: ignore[union-attr]
    assert re.search(r"\| (\d:\d\d) of \1, 0:00 left, step 20/20, loss \d", drawn[-1]), drawn[-1]
    assert "10:00" not in out


def test_a_pipe_gets_one_line_per_interval(home, tmp_path):
    # in this process (tests/inprocess.py): its stdout and stderr are pipes' worth, not a terminal
    args = ["train", *TRAIN]
    steps = run_aiayn(*args, "--run-dir", str(tmp_path / "steps"), "--train.max_steps", "20", text=True)
    assert steps.returncode == 0, steps.stderr[-2000:]
    assert "\r" not in steps.stdout + steps.stderr
    lines = [x for x in steps.stdout.splitlines() if x.startswith("step ")]
    assert [x.split(" | ")[0] for x in lines] == ["step 10/20", "step 20/20"]
    # with a budget that the step limit beats: the clock ends at the steps' time
    both = run_aiayn(
        *args, "--run-dir", str(tmp_path / "both"), "--train.max_steps", "20", "--train.max_minutes", "10", text=True
    )
    assert both.returncode == 0, both.stderr[-2000:]
    lines = [x for x in both.stdout.splitlines() if x.startswith("step ")]
    assert [x.split(" | ")[0] for x in lines] == ["step 10/20", "step 20/20"], both.stdout
    assert re.search(r"\| \d:\d\d of ~\d:\d\d, \d:\d\d left$", lines[0]), lines[0]
    assert re.search(r"\| (\d:\d\d) of \1, 0:00 left$", lines[1]), lines[1]
    timed = run_aiayn(*args, "--run-dir", str(tmp_path / "timed"), "--train.max_minutes", "0.05", text=True)
    assert timed.returncode == 0 and "\r" not in timed.stdout + timed.stderr
    lines = [x for x in timed.stdout.splitlines() if x.startswith("step ")]
    assert lines and all(re.search(r"\| \d:\d\d of 0:03, \d:\d\d left$", x) for x in lines), timed.stdout
