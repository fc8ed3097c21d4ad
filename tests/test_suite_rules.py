"""The suite's own rules (tests/conftest.py) hold: only a test marked needs_mirror sees the Multi30k
mirror, so a new test that reads it and forgets the mark fails wherever it runs, CI included."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiayn.data import DataError, multi30k

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")

NEW_TESTS = """
import os
import pytest
from aiayn.config import DataConfig
from aiayn.data import prepare
from conftest import multi30k_mirror


def test_forgets_the_mark_and_prepares_multi30k():
    prepare(DataConfig(corpus="multi30k", src_lang="de", tgt_lang="en"))


def test_forgets_the_mark_and_asks_for_the_mirror():
    multi30k_mirror()


def test_forgets_the_mark_and_reads_the_variable():
    assert os.environ["AIAYN_DATA_DIR"]


@pytest.mark.needs_mirror
def test_marked_sees_the_mirror():
    assert os.environ["AIAYN_DATA_DIR"] == str(multi30k_mirror())
"""


def fake_mirror(d: Path) -> Path:
    """What conftest takes for a mirror (train.de.gz and tok/); the contents do not matter to the rule."""
    (d / "tok").mkdir(parents=True)
    for name in multi30k.raw_files(multi30k.LANGS):
        (d / name).write_bytes(gzip.compress(b"Ein Hund.\n"))
    return d


@pytest.mark.parametrize("ci", ["", "true"])
def test_a_test_that_reads_the_mirror_without_the_mark_fails(pytester: pytest.Pytester, tmp_path, ci):
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_new=NEW_TESTS)
    env = {"AIAYN_DATA_DIR": str(fake_mirror(tmp_path / "mirror")), "CI": ci, "PYTHONPATH": str(pytester.path)}
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", "test_new.py"],
        cwd=pytester.path,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = p.stdout
    assert p.returncode == 1, out
    assert "3 failed, 1 passed" in out, out
    assert "test_forgets_the_mark_and_asks_for_the_mirror reads the Multi30k mirror but is not marked" in out
    assert "127.0.0.1:9" in out  # prepare tried the closed download address, not the mirror


def test_an_unmarked_test_runs_as_on_a_new_machine(tmp_path):
    assert "AIAYN_DATA_DIR" not in os.environ and multi30k.mirror_dir() is None
    home = Path(os.environ["AIAYN_HOME"]).resolve()
    assert not home.is_relative_to(Path.home() / ".cache")  # nothing is written into the user's cache
    with pytest.raises(DataError, match="127.0.0.1:9"):
        multi30k.locate("de", "en")
    p = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('AIAYN_DATA_DIR'))"], capture_output=True, text=True
    )
    assert p.stdout.strip() == "None"  # nor do the processes it starts


STRAY_WRITE = """
from pathlib import Path


def test_writes_into_the_directory_it_runs_from():
    Path("stray.txt").write_text("left behind")


def test_writes_into_its_own_tmp_path(tmp_path):
    (tmp_path / "fine.txt").write_text("temporary")
"""


def test_a_test_that_writes_outside_its_temporary_directories_fails_the_run(pytester: pytest.Pytester):
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_new=STRAY_WRITE)
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_new.py"],
        cwd=pytester.path,
        env={**os.environ, "PYTHONPATH": str(pytester.path)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert "2 passed" in p.stdout, p.stdout + p.stderr
    assert p.returncode == 1, p.stdout + p.stderr  # both tests passed; the run fails for the stray file
    assert "wrote outside their temporary directories" in p.stderr and "stray.txt" in p.stderr
    assert "fine.txt" not in p.stderr


def test_a_command_run_in_process_answers_as_its_process_and_leaves_this_one_as_it_was(tmp_path):
    """tests/inprocess.py: the exit status, stdout and stderr `python -m aiayn` gives (argparse's exit 2,
    a user error's one line), and nothing the command changes stays changed here."""
    import torch

    from inprocess import run_aiayn

    argv = [["--version"], ["translate", "--no-such-flag"], ["average", str(tmp_path)], ["recipes"]]
    os.environ["AIAYN_KEPT"] = "1"
    threads, cwd, environ = torch.get_num_threads(), os.getcwd(), dict(os.environ)
    try:
        for args in argv:
            here = run_aiayn(*args, text=True, env={**os.environ, "OMP_WAIT_POLICY": "ACTIVE"}, cwd=tmp_path)
            there = subprocess.run(
                [sys.executable, "-m", "aiayn", *args], capture_output=True, text=True, cwd=tmp_path, timeout=120
            )
            assert (here.returncode, here.stdout) == (there.returncode, there.stdout), args
            assert here.stderr.splitlines()[-1:] == there.stderr.splitlines()[-1:], args
        assert (torch.get_num_threads(), os.getcwd(), dict(os.environ)) == (threads, cwd, environ)
        assert run_aiayn("translate", "-c", str(tmp_path), input="x\n").returncode == 2  # bytes when not text
    finally:
        os.environ.pop("AIAYN_KEPT", None)


def test_modules_are_handed_out_longest_first(request: pytest.FixtureRequest):
    """pytest-xdist gives each idle worker the next module in collection order (pyproject: loadscope,
    no reorder by test count); conftest.py collects them by their times in tests/durations.json, longest
    first, so the run does not end with one worker on a long module while the other idles."""
    import json
    import tomllib

    root = Path(__file__).parents[1]
    addopts = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "--dist loadscope" in addopts and "--no-loadscope-reorder" in addopts
    times = json.loads((root / "tests" / "durations.json").read_text())
    modules = list(dict.fromkeys(item.nodeid.split("::")[0] for item in request.session.items))
    timed = [times[m] for m in modules if m in times]
    assert timed == sorted(timed, reverse=True) and all((root / m).is_file() for m in times)
