"""N real gloo ranks without torchrun: each rank a process started as `srun` starts a SLURM task.

torchrun starts an agent process (its own interpreter and torch: about 2.7 CPU s and 3.8 s of wall
time a launch here) that then starts the ranks. `srun` starts the ranks directly and sets only the
task's variables (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID); the user exports the rendezvous
address, as aiayn.distributed's error for a missing one tells them. So a test whose subject is what
the ranks do, not the launcher, starts them this way: the same process group, aiayn's SLURM path in
real processes, and no agent. Tests of torchrun itself keep torchrun.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import IO

from local_http import free_port


def run_ranks(
    args: list[str], n: int = 2, env: Mapping[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess:
    """`python *args` as ranks 0..n-1 of one job, answered as `subprocess.run(..., capture_output=True,
    text=True)` answers a torchrun launch: each stream the ranks' output in rank order, the status 0 when
    every rank exits 0, else the first failing rank's. As torchrun does, the other ranks are stopped
    a few seconds after one fails (one waiting in a collective would otherwise wait out its timeout)."""
    base = {**(os.environ if env is None else env)}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), SLURM_NTASKS=str(n))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_STEP_NUM_TASKS"):  # a launcher around the test's
        base.pop(k, None)
    # files, not pipes: a rank blocked on a full pipe while another waits for it in a collective hangs
    outs = [(tempfile.TemporaryFile(), tempfile.TemporaryFile()) for _ in range(n)]
    procs = [
        subprocess.Popen(
            [sys.executable, *args],
            stdout=out,
            stderr=err,
            env={**base, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)},
        )
        for r, (out, err) in enumerate(outs)
    ]
    deadline, failed_at = time.monotonic() + timeout, None
    try:  # the ranks still running at the end (a grace after a failure, or the timeout) are killed
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if now > deadline:
                raise subprocess.TimeoutExpired([sys.executable, *args], timeout)
            if failed_at is None and any(p.returncode for p in procs):
                failed_at = now
            if failed_at is not None and now - failed_at > 5:
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()

    def read(f: IO[bytes]) -> str:
        f.seek(0)
        return f.read().decode("utf-8", "backslashreplace")

    stdout, stderr = "".join(read(o) for o, _ in outs), "".join(read(e) for _, e in outs)
    for o, e in outs:
        o.close()
        e.close()
    status = next((p.returncode for p in procs if p.returncode), 0)
    return subprocess.CompletedProcess(args, status, stdout, stderr)
