"""`aiayn ...` run inside the test's own process, answered as `subprocess.run` would answer it.

A fresh `python -m aiayn` pays for importing torch (and a training one for torch._dynamo, which the
first optimizer step imports) before it does any work: about 2-3.5 CPU seconds a process, most of
a small test's cost. Tests about a command's output, files and exit status run it here instead;
tests about a process (signals, exit, DDP ranks, a wheel, a fresh interpreter) keep real processes.

What a process would not share with this one is put back afterwards: the standard streams, the
environment, the working directory, torch's thread count, warnings' filters. Warnings are written to
stderr, as a process's are, rather than collected by pytest.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path

import torch


def run_aiayn(
    *args: str | Path,
    input: bytes | str | None = None,
    text: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> subprocess.CompletedProcess:
    """`aiayn *args` with `input` on stdin; stdout and stderr as bytes, or str with `text`. `env`, as for
    subprocess, replaces the whole environment for the call."""
    saved = (sys.stdin, sys.stdout, sys.stderr, dict(os.environ), os.getcwd(), torch.get_num_threads())
    from aiayn.cli import main  # after the environment is saved: importing it sets OMP_WAIT_POLICY

    argv = [str(a) for a in args]
    data = input.encode() if isinstance(input, str) else (input or b"")
    out, err = io.BytesIO(), io.BytesIO()
    # held in locals to the end: a collected wrapper closes the buffer under it
    feed = tempfile.TemporaryFile()  # a file with a descriptor, as a pipe has: `translate` os.reads it
    feed.write(data)
    feed.seek(0)
    stdin = io.TextIOWrapper(feed, encoding="utf-8", errors="surrogateescape")
    stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = _to_stderr
            try:
                code = main(argv)
            except SystemExit as e:  # argparse's errors and --help, as a process exits with them
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, int | None):
                    print(e.code, file=sys.stderr)
            except Exception:  # as the interpreter would: the traceback on stderr, status 1
                traceback.print_exc()
                code = 1
        stdout.flush()
        stderr.flush()
    finally:
        sys.stdin, sys.stdout, sys.stderr, environ, cwd_before, threads = saved
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd_before)
        torch.set_num_threads(threads)
    stdin.close()
    o, e = out.getvalue(), err.getvalue()
    if text:
        return subprocess.CompletedProcess(argv, code, o.decode(), e.decode())
    return subprocess.CompletedProcess(argv, code, o, e)


def _to_stderr(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))
