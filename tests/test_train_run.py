"""Training end to end on the embedded corpus with a tiny model: learning, exact resume after
`kill -9` and Ctrl-C (real subprocesses), corrupted checkpoints, NaN handling, unwritable run dirs."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from aiayn.checkpoint import checkpoint_paths, list_checkpoints
from aiayn.config import Config
from inprocess import run_aiayn
from ranks import run_ranks

TINY = {
    "model": {"preset": "tiny"},
    "data": {
        "corpus": "embedded",
        "src_lang": "digits",
        "tgt_lang": "en",
        "embedded_size": 1200,
        "vocab_size": 400,
        "max_tokens": 512,
    },
    "optim": {"warmup": 40, "lr_scale": 1.0},
    "train": {
        "max_steps": 30,
        "log_every": 1,
        "eval_every": 10,
        "save_every": 5,
        "keep_last": 3,
        "eval_max_sentences": 16,
        "threads": 1,
        "progress": False,
        "seed": 3,
        # pinned: with device auto a GPU host would train in CUDA/bf16, where the bitwise resume
        # and DDP-vs-single-process comparisons below do not hold
        "device": "cpu",
        "amp": "none",
    },
}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """One prepared-data cache for the module (and its subprocesses)."""
    old = os.environ.get("AIAYN_HOME")
    path = tmp_path_factory.mktemp("aiayn_home")
    os.environ["AIAYN_HOME"] = str(path)
    yield path
    if old is None:
        os.environ.pop("AIAYN_HOME", None)
    else:
        os.environ["AIAYN_HOME"] = old


REF_TRAIN = {"max_steps": 150, "eval_every": 50, "save_every": 10}  # the reference run's schedule


def config_file(tmp_path: Path, **sections) -> Path:
    d = json.loads(json.dumps(TINY))
    for name, values in sections.items():
        d[name].update(values)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


def records(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def cli(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "aiayn", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw
    )


def finish(p: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def wait_for_step(run_dir: Path, step: int, p: subprocess.Popen, timeout: float = 120) -> None:
    t = time.time()
    while time.time() - t < timeout:
        assert p.poll() is None, f"training ended early: {p.communicate()}"
        try:
            if any(r["step"] >= step for r in records(run_dir, "train")):
                return
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        time.sleep(0.02)
    raise TimeoutError(f"no step {step} in {run_dir}")


def losses(run_dir: Path) -> list[tuple]:
    return [(r["step"], r["loss"], r["nll"], r["lr"]) for r in records(run_dir, "train")]


@pytest.fixture(scope="module")
def reference(home, tmp_path_factory):
    """An uninterrupted run through the CLI (in this process: tests/inprocess.py): its losses are what
    every resumed run must reproduce, in this process or another (train.threads 1 in both)."""
    tmp = tmp_path_factory.mktemp("ref")
    # lr 0.2x the schedule (d_model 64 makes the plain §5.3 peak ~0.02, too hot to learn to translate)
    # and 150 updates: enough for the greedy BLEU to leave 0 (11-16 measured), not just the loss to fall
    cfg = config_file(tmp, optim={"lr_scale": 0.2}, train=REF_TRAIN)
    r = run_aiayn("train", "--config", str(cfg), "--run-dir", str(tmp / "run"), text=True)
    assert r.returncode == 0, r.stderr
    return cfg, tmp / "run"


def test_uninterrupted_run_learns_and_writes_a_complete_run_dir(reference):
    cfg, run = reference
    train, valid = records(run, "train"), records(run, "valid")
    assert [r["step"] for r in train] == list(range(1, 151))
    assert [r["step"] for r in valid] == [50, 100, 150]
    # ln(vocab) ~ 6 at the start; a working loop gets far below within 150 updates (1.3 measured)
    assert train[0]["nll"] > 5.0 and valid[-1]["nll"] < 2.0 and valid[-1]["nll"] < valid[0]["nll"]
    # and it translates: greedy BLEU on 16 validation sentences was 14.1 here (11-16 over seeds and
    # schedules; 0.0 at steps 50 and 100). 8 leaves room for other CPUs' rounding but not for a broken
    # decoder: the same hypotheses scored against the wrong references give 4.6 (shared number words)
    bleus = [(r["step"], r["bleu"]) for r in valid]
    assert all(isinstance(b, float) for _, b in bleus) and bleus[-1][1] > 8.0, bleus
    assert set(train[-1]) >= {"kind", "step", "loss", "nll", "ppl", "lr", "tokens_per_s", "elapsed"}
    assert [c[0] for c in list_checkpoints(run)] == [130, 140, 150]  # keep_last 3
    assert (run / "spm.model").is_file() and (run / "best.safetensors").is_file()
    saved = Config.load(run / "config.yaml")
    assert saved.model["d_model"] == 64 and saved.model["vocab_size"] > 4 and saved.train.max_steps == 150
    assert (saved.train.device, saved.train.amp) == ("cpu", "none")


def resume_here(run: Path) -> dict:
    """What `aiayn train --resume RUN` does, in this process: the test pays no interpreter and torch start
    where the command line itself is not under test (test_resume_after_ctrl_c... starts that command)."""
    from aiayn.train import train

    return train(Config.load(run / "config.yaml"), run, resume=True)


def test_resuming_a_finished_run_changes_nothing(reference, capfd):
    cfg, run = reference
    before = (run / "metrics.jsonl").read_text()
    summary = resume_here(run)
    err = capfd.readouterr().err
    assert not summary["interrupted"] and summary["step"] == 150 and "already finished at step 150" in err, err
    assert (run / "metrics.jsonl").read_text() == before


def test_resume_after_ctrl_c_and_kill_9_reproduces_the_losses_exactly(reference, tmp_path):
    cfg, ref = reference
    run = tmp_path / "run"
    # Ctrl-C: a final checkpoint at the step it stopped, a hint how to resume, exit code 130
    p = cli("train", "--config", str(cfg), "--run-dir", str(run))
    wait_for_step(run, 7, p)
    p.send_signal(signal.SIGINT)
    code, out, err = finish(p)
    assert code == 130, err
    assert f"aiayn train --resume {run}" in err
    stopped = records(run, "train")[-1]["step"]
    assert 7 <= stopped < 150 and list_checkpoints(run)[-1][0] == stopped
    # resume, then kill -9 (no handler runs, files may be half written), resume again
    p = cli("train", "--resume", str(run))
    wait_for_step(run, stopped + 6, p)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL
    assert resume_here(run)["step"] == 150
    assert losses(run) == losses(ref)  # bitwise: same data order, dropout masks, Adam state, schedule
    assert [r["loss"] for r in records(run, "valid")] == [r["loss"] for r in records(ref, "valid")]


def test_sigterm_mid_update_saves_the_last_completed_update_promptly_and_resumes_exactly(home, tmp_path):
    """Preemption (torchrun, SLURM: SIGKILL ~30 s after SIGTERM) must not wait for a long update to
    finish: with 40 micro-batches per update the process stops after the current micro-batch, drops
    the partial update, saves the last completed step (with the data position and RNG state from
    before the dropped update) and exits; the resumed run then reproduces an uninterrupted one."""
    cfg = config_file(
        tmp_path,
        optim={"update_freq": 40},  # ~2 epochs per update
        train={"max_steps": 3, "eval_every": 0, "eval_bleu": False, "save_every": 100},
    )
    from aiayn.train import train

    train(Config.load(cfg), tmp_path / "ref")  # the reference, in this process: only the signal needs one
    ref = losses(tmp_path / "ref")
    assert [s for s, *_ in ref] == [1, 2, 3]

    run = tmp_path / "run"
    # The same command, in a process that counts backward passes (one per micro-batch) in a file.
    counts = tmp_path / "backward_calls"
    counting = (
        "import runpy, sys, torch\n"
        "backward = torch.Tensor.backward\n"
        "def counted(self, *a, **k):\n"
        f"    with open({str(counts)!r}, 'ab') as f:\n"
        "        f.write(b'.')\n"
        "    return backward(self, *a, **k)\n"
        "torch.Tensor.backward = counted\n"
        "sys.argv = ['aiayn', *sys.argv[1:]]\n"
        "runpy.run_module('aiayn', run_name='__main__')\n"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen(
        [sys.executable, "-c", counting, "train", "--config", str(cfg), "--run-dir", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    wait_for_step(run, 2, p)  # update 3 has begun
    # Frozen while the count is read and SIGTERM is sent: no micro-batch runs in between, whatever the
    # machine's load, so the count after the exit says exactly how much the process did after the signal.
    p.send_signal(signal.SIGSTOP)
    before = counts.stat().st_size
    p.send_signal(signal.SIGTERM)
    p.send_signal(signal.SIGCONT)
    code, out, err = finish(p, timeout=30)  # torchrun's SIGKILL comes 30 s after SIGTERM
    assert code == 130, err
    done = records(run, "train")
    assert [r["step"] for r in done] == [1, 2], done  # caught within update 3, which is dropped
    after = counts.stat().st_size
    # The old path finished update 3 first (all 40 micro-batches, 120 backward passes in all); now the
    # micro-batch under way when the signal came may finish, and no other starts.
    assert 2 * 40 <= before <= after <= before + 1 < 3 * 40, (before, after)
    assert [c[0] for c in list_checkpoints(run)] == [2] and "interrupted at step 2" in err
    assert resume_here(run)["step"] == 3
    assert losses(run) == ref  # bitwise: the dropped micro-batches left no trace in data order, RNG, Adam


def test_corrupted_checkpoint_is_named_and_an_older_one_is_used(reference, tmp_path, capfd):
    import shutil

    from aiayn.train import train
    from aiayn.train.trainer import TrainingError

    _, ref = reference
    run = tmp_path / "run"
    shutil.copytree(ref, run)
    weights, state = checkpoint_paths(run, 150)
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated
    cfg = Config.load(run / "config.yaml", {"train.max_steps": 150, "train.eval_every": 0})
    summary = train(cfg, run, resume=True)
    err = capfd.readouterr().err
    assert str(weights) in err and "older checkpoint" in err
    assert summary["step"] == 150
    # 141..150 were replayed from 140: the same losses as the original run
    assert losses(run)[-10:] == losses(ref)[-10:]

    for _, _w, s in list_checkpoints(run):
        s.write_bytes(b"not a zip file")
    with pytest.raises(TrainingError, match=r"no usable checkpoint[\s\S]*step_00000150\.state\.pt"):
        train(cfg, run, resume=True)


def test_nan_losses_are_skipped_then_stop_training_keeping_the_last_good_checkpoint(home, tmp_path, monkeypatch):
    import math

    import aiayn.train.tasks.translate_task as tasks_mod  # the translation task calls the loss
    from aiayn.train import train
    from aiayn.train.trainer import TrainingError

    real = tasks_mod.label_smoothed_nll
    calls = {"n": 0}
    bad = {4} | set(range(9, 100))  # forward passes (1-based) whose loss is NaN

    def poisoned(logits, target, eps, pad):
        loss, nll, n = real(logits, target, eps, pad)
        calls["n"] += 1
        if calls["n"] in bad and logits.requires_grad:
            loss = loss * math.nan
        return loss, nll, n

    monkeypatch.setattr(tasks_mod, "label_smoothed_nll", poisoned)
    cfg = Config.from_dict({**TINY, "train": {**TINY["train"], "eval_every": 0, "nan_limit": 3}})
    run = tmp_path / "run"
    with pytest.raises(
        TrainingError,
        match=r"NaN/inf for 3 consecutive updates \(after step 7\)[\s\S]*"
        r"step_00000005\.safetensors",
    ):
        train(cfg, run)
    skips = records(run, "skip")
    assert [s["step"] for s in skips] == [4, 8, 8, 8] and [s["consecutive"] for s in skips] == [1, 1, 2, 3]
    assert [r["step"] for r in records(run, "train")] == list(range(1, 8))  # step 4 retried with new data
    assert [c[0] for c in list_checkpoints(run)] == [5]  # nothing written after the failure


def test_fp16_overflow_skips_halve_the_scale_survive_resume_and_stop_at_nan_limit(home, tmp_path, monkeypatch):
    """fp16 on CPU (autocast + GradScaler("cpu")): an inf gradient skips the update without moving the
    optimizer or the schedule and halves the loss scale; the scale is checkpointed and restored; and
    gradients that keep overflowing stop training after train.nan_limit updates instead of halving
    the scale forever."""
    import torch

    import aiayn.train.tasks.translate_task as tasks_mod  # the translation task calls the loss
    from aiayn.train import train
    from aiayn.train.resume import load_state
    from aiayn.train.schedule import noam_lr
    from aiayn.train.trainer import TrainingError

    class InfGrad(torch.autograd.Function):  # identity forward; backward sends inf into every gradient
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            return g * math.inf

    real = tasks_mod.label_smoothed_nll
    calls, bad = {"n": 0}, {3}  # training forward passes (1-based) whose gradients overflow

    def overflowing(logits, target, eps, pad):
        loss, nll, n = real(logits, target, eps, pad)
        if logits.requires_grad:
            calls["n"] += 1
            if calls["n"] in bad:
                loss = InfGrad.apply(loss)  # the loss itself stays finite: only fp16 gradients overflow
        return loss, nll, n

    monkeypatch.setattr(tasks_mod, "label_smoothed_nll", overflowing)

    def cfg(steps: int) -> Config:
        return Config.from_dict(
            {
                **TINY,
                "train": {
                    **TINY["train"],
                    "amp": "fp16",
                    "max_steps": steps,
                    "eval_every": 0,
                    "eval_bleu": False,
                    "save_every": 3,
                    "nan_limit": 3,
                },
            }
        )

    run = tmp_path / "run"
    assert train(cfg(6), run)["step"] == 6  # 7 attempts, one skipped
    (skip,) = records(run, "skip")
    assert (skip["step"], skip["reason"], skip["scale"]) == (3, "fp16 gradient overflow", 2.0**15)
    lrs = [r["lr"] for r in records(run, "train")]
    assert lrs == [noam_lr(s, 64, 40, 1.0) for s in range(1, 7)]  # the schedule did not advance on the skip
    state = load_state(checkpoint_paths(run, 6)[1])
    assert state["scaler"]["scale"] == 2.0**15 and state["scheduler"]["last_epoch"] == 6
    assert {int(v["step"]) for v in state["optimizer"]["state"].values()} == {6}  # Adam stepped 6 times, not 7

    calls["n"], bad = 0, set(range(1, 1000))  # from now on every update overflows
    with pytest.raises(
        TrainingError,
        match=r"fp16 gradients overflowed in 3 consecutive updates \(after step 6; "
        r"loss scale down to 4096\)[\s\S]*step_00000006\.safetensors",
    ):
        train(cfg(100), run, resume=True)
    skips = records(run, "skip")
    # the resumed scaler continues from the checkpoint's 2^15 (a fresh one would start at 2^16)
    assert [(r["step"], r["scale"], r["consecutive"]) for r in skips] == [
        (3, 2.0**15, 1),
        (7, 2.0**14, 1),
        (7, 2.0**13, 2),
        (7, 2.0**12, 3),
    ]
    assert calls["n"] == 3 and [c[0] for c in list_checkpoints(run)] == [3, 6]


def test_deterministic_setting_switches_torch_to_deterministic_kernels(home, tmp_path, monkeypatch):
    """train.deterministic: torch.use_deterministic_algorithms(True), cuDNN deterministic without
    benchmarking, cuBLAS' fixed workspace; and the CPU training step has no op that then refuses."""
    import torch

    from aiayn.train import train

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    try:
        cfg = Config.from_dict(
            {
                **TINY,
                "train": {**TINY["train"], "deterministic": True, "max_steps": 2, "eval_every": 0, "eval_bleu": False},
            }
        )
        assert train(cfg, tmp_path / "run")["step"] == 2
        assert torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
        assert not torch.backends.cudnn.benchmark and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:  # process-wide switches: leave them as the other tests expect
        torch.use_deterministic_algorithms(before[0])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1:]


@pytest.mark.parametrize("amp", ["none", "fp16"])
def test_an_update_waits_for_the_device_once(home, tmp_path, monkeypatch, amp):
    """Every tensor-to-Python conversion (.item(), .tolist(), float(t), bool(t), ...) makes the host wait
    for the GPU. A single-process update needs one: the loss sums, the stop/time votes and the gradient
    norm's finiteness come back together (under DDP too: the token count is all-reduced on the device,
    see test_train_unit). Counted on CPU, where conversions are visible even though nothing waits."""
    import torch

    import aiayn.train.step as step_mod
    from aiayn.train import train

    seen: list[list[str]] = []
    inside = [False]
    for name in ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "cpu", "numpy"):

        def counting(self, *a, _real=getattr(torch.Tensor, name), _name=name, **k):  # noqa: B008 (bind now)
            if inside[0]:
                seen[-1].append(_name)
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counting)
    real_update = step_mod.TrainStep.__call__

    def update(self, micro, *args):
        seen.append([])
        inside[0] = True
        try:
            return real_update(self, micro, *args)
        finally:
            inside[0] = False

    monkeypatch.setattr(step_mod.TrainStep, "__call__", update)
    cfg = Config.from_dict(
        {
            **TINY,
            "optim": {**TINY["optim"], "update_freq": 2, "clip_norm": 1.0},
            "train": {
                **TINY["train"],
                "amp": amp,
                "max_steps": 3,
                "eval_every": 0,
                "eval_bleu": False,
                "save_every": 100,
            },
        }
    )
    assert train(cfg, tmp_path / "run")["step"] == 3
    assert seen == [["tolist"]] * 3, seen


def test_unwritable_run_dir_fails_before_training(home, tmp_path):
    from aiayn.train import train
    from aiayn.train.trainer import TrainingError

    (tmp_path / "file").write_text("x")
    with pytest.raises(TrainingError, match="not writable"):
        train(Config.from_dict(TINY), tmp_path / "file" / "run")
    from aiayn.train.rundir import check_run_dir

    with pytest.raises(TrainingError, match="MiB free"):  # a full disk: asks the real file system for 1 EiB
        check_run_dir(tmp_path, need_bytes=2**60)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    Path(checkpoint_paths(run, 5)[0]).write_bytes(b"x")
    Path(checkpoint_paths(run, 5)[1]).write_bytes(b"x")
    with pytest.raises(TrainingError, match="--resume"):
        train(Config.from_dict(TINY), run)


@pytest.mark.parametrize("clip_norm,launcher", [(0.0, "torchrun"), (2.0, "srun")], ids=["no-clip", "clip"])
def test_two_gloo_processes_match_one_process_with_the_same_global_batch(home, tmp_path, clip_norm, launcher, capfd):
    """2 ranks x 1 micro-batch per update == 1 process x update_freq 2 (dropout off, so the only difference is
    the order of floating-point sums), the ranks started by torchrun and as srun starts them
    (tests/ranks.py: SLURM's variables, the rendezvous address exported). Without clipping Adam is nearly
    blind to a constant gradient factor (a wrong scale across ranks). Clipping at 2.0 cuts the first 3 of
    the 8 updates (norms 4.6, 4.3, 3.2, then 2.1 ... 1.1): a wrong scale moves that boundary and changes the
    relative weight of the updates in Adam's moments, so it shows in the losses. (A norm cut at every update
    would hide it again: each clipped gradient has the same length whatever its scale.)"""
    from aiayn.train import train

    # one config for both: optim.tokens_per_update 960 derives update_freq 1 on 2 ranks, 2 on one
    common = {
        "model": {"dropout": 0.0},
        "data": {"max_tokens": 480},
        "optim": {"clip_norm": clip_norm, "tokens_per_update": 960},
        "train": {"max_steps": 8, "eval_every": 4, "save_every": 4, "eval_bleu": False},
    }
    cfg = config_file(tmp_path, **common)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = ["-m", "aiayn", "train", "--config", str(cfg), "--run-dir", str(tmp_path / "ddp")]
    if launcher == "torchrun":
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
        p = subprocess.run([*torchrun, *argv], capture_output=True, text=True, env=env, timeout=240)
    else:
        p = run_ranks(argv, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    # one banner (only rank 0 prints and writes), with the derived update_freq
    assert p.stdout.count("update = 1 x 2 x 480 tokens (<= 960, update_freq 1 from optim.tokens_per_update 960)") == 1
    assert "device cpu, amp none" in p.stdout and "warning" not in p.stderr

    one = Config.load(cfg)
    assert one.optim.update_freq == 1  # the file names no update_freq: the trainer derives 2 here
    train(one, tmp_path / "single")
    assert "update = 2 x 1 x 480 tokens (<= 960, update_freq 2 from" in capfd.readouterr().out
    a, b = losses(tmp_path / "ddp"), losses(tmp_path / "single")
    assert [x[0] for x in a] == [x[0] for x in b] == list(range(1, 9))
    for (_, la, na, lra), (_, lb, nb, lrb) in zip(a, b):
        assert la == pytest.approx(lb, rel=1e-5) and na == pytest.approx(nb, rel=1e-5) and lra == lrb
    va, vb = records(tmp_path / "ddp", "valid"), records(tmp_path / "single", "valid")
    assert [r["step"] for r in va] == [r["step"] for r in vb] == [4, 8]
    assert [r["loss"] for r in va] == pytest.approx([r["loss"] for r in vb], rel=1e-4)
    assert [c[0] for c in list_checkpoints(tmp_path / "ddp")] == [4, 8]
    assert a[0][1] != a[-1][1]  # it did train


RESUME_WORKER = """
import sys
from pathlib import Path

import aiayn.train.resume as T
from aiayn.checkpoint import CheckpointError, checkpoint_paths
from aiayn.config import Config
from aiayn.distributed import launch_info
from aiayn.train import train

rank, run, extra, mode = launch_info().rank, Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
if rank == 1:  # this rank's view of the shared run directory differs (a lagging or per-node file system)
    real_list, real_load = T.list_checkpoints, T.load_state
    # it also lists a newer checkpoint that rank 0 does not see ...
    T.list_checkpoints = lambda run_dir: real_list(run_dir) + [(12, *checkpoint_paths(extra, 12))]

    def load_state(path):  # ... and cannot read step 8's state (mode 'none': no state at all)
        if mode == "none" or "step_00000008" in str(path):
            raise CheckpointError(f"corrupted or truncated training state {path} (as rank 1 sees it)")
        return real_load(path)
    T.load_state = load_state

real_load_latest = T.CheckpointManager.load_latest
def load_latest(self, metrics):  # record where each rank resumed
    real_load_latest(self, metrics)
    (run.parent / f"resumed_rank{rank}").write_text(str(self.state.step))
T.CheckpointManager.load_latest = load_latest
train(Config.load(run / "config.yaml", {"train.max_steps": 10}), run, resume=True)
"""


def test_ddp_resume_uses_rank_0s_checkpoint_and_falls_back_on_every_rank_together(home, tmp_path):
    """Rank 0 chooses the step and every rank loads exactly that one. Here rank 1 lists an extra, newer
    checkpoint (step 12) and cannot read step 8: both ranks resume from step 4 together. When rank 1 can
    read nothing, every rank stops with the same TrainingError instead of one hanging."""
    import shutil

    from aiayn.train.resume import load_state, save_state

    cfg = config_file(
        tmp_path,
        model={"dropout": 0.0},
        data={"max_tokens": 480},
        train={"max_steps": 8, "eval_every": 0, "save_every": 4, "eval_bleu": False},
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

    def ranks(*args: str) -> subprocess.CompletedProcess:  # 2 gloo ranks (tests/ranks.py)
        return run_ranks(list(args), env=env, timeout=180)

    run = tmp_path / "run"
    # the checkpoints to resume from; a checkpoint does not depend on the world size that wrote it
    p = run_aiayn("train", "--config", cfg, "--run-dir", run, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    assert [c[0] for c in list_checkpoints(run)] == [4, 8]
    # the newer checkpoint only rank 1 sees: step 8's files, relabelled as step 12
    extra = tmp_path / "extra"
    w12, s12 = checkpoint_paths(extra, 12)
    w12.parent.mkdir(parents=True)
    shutil.copy(checkpoint_paths(run, 8)[0], w12)
    save_state(s12, {**load_state(checkpoint_paths(run, 8)[1]), "step": 12})
    worker = tmp_path / "worker.py"
    worker.write_text(RESUME_WORKER)

    p = ranks(str(worker), str(run), str(extra), "step8")
    assert p.returncode == 0, p.stderr[-3000:]
    assert [(tmp_path / f"resumed_rank{r}").read_text() for r in (0, 1)] == ["4", "4"]
    assert "rank 1: corrupted or truncated training state" in p.stderr and "older checkpoint" in p.stderr
    assert [c[0] for c in list_checkpoints(run)] == [4, 8, 10]  # 8 rewritten by the resumed run; no 12
    assert records(run, "train")[-1]["step"] == 10

    p = ranks(str(worker), str(run), str(extra), "none")
    assert p.returncode != 0
    assert p.stderr.count("TrainingError: no usable checkpoint to resume from on every rank") == 2, p.stderr[-3000:]


SEEN_WORKER = """
import json, sys
from pathlib import Path

import aiayn.train.trainer as T
from aiayn.config import Config
from aiayn.distributed import launch_info
from aiayn.train import train

config, run, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
rank = launch_info().rank
real_next = T.Batches.next
def next_(self):  # every batch a rank trains on, with its epoch
    b = real_next(self)
    with open(out / f"seen_rank{rank}.jsonl", "a") as f:
        f.write(json.dumps([self.it.epoch, b.ids.tolist()]) + "\\n")
    return b
T.Batches.next = next_
resume = config == "resume"
train(Config.load(run / "config.yaml" if resume else config, json.loads(sys.argv[4])), run, resume=resume)
"""


def test_resume_on_another_world_size_sees_every_example_once_per_epoch(home, tmp_path, capfd):
    """2 gloo ranks for 3 updates (mid epoch 0), 1 process for 3 more (into epoch 1), 2 ranks to the end
    of epoch 1: the batches trained on cover each epoch's examples exactly once. tokens_per_update keeps
    the global batch: update_freq 2 on 2 ranks, 4 on one."""
    from aiayn.data import prepare

    cfg = config_file(
        tmp_path,
        optim={"tokens_per_update": 2048},
        train={"max_steps": 3, "eval_every": 0, "eval_bleu": False, "save_every": 100},
    )
    worker = tmp_path / "worker.py"
    worker.write_text(SEEN_WORKER)
    run, env = tmp_path / "run", {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

    def launch(config: str, **overrides) -> subprocess.CompletedProcess:  # on 2 gloo ranks (tests/ranks.py)
        p = run_ranks([str(worker), config, str(run), str(tmp_path), json.dumps(overrides)], env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        return p

    a = launch(str(cfg))
    assert "update = 2 x 2 x 512 tokens (<= 2,048, update_freq 2 from" in a.stdout
    # one process: the worker's patch and train(), in this process (no interpreter and torch to start)
    import aiayn.train.trainer as T
    from aiayn.train import train

    real_next = T.Batches.next

    def next_(self):
        b = real_next(self)
        with open(tmp_path / "seen_rank0.jsonl", "a") as f:
            f.write(json.dumps([self.it.epoch, b.ids.tolist()]) + "\n")
        return b

    capfd.readouterr()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(T.Batches, "next", next_)
        train(Config.load(run / "config.yaml", {"train.max_steps": 6}), run, resume=True)
    b = capfd.readouterr()
    assert "update = 4 x 1 x 512 tokens (<= 2,048, update_freq 4 from" in b.out
    assert "resuming on 1 rank(s) a run saved on 2: the rest of epoch 0 is re-planned" in b.err
    c = launch("resume", **{"train.max_steps": 1000, "train.max_epochs": 2})
    assert "a run saved on 1: the rest of epoch 1" in c.stderr

    seen = [json.loads(line) for r in (0, 1) for line in (tmp_path / f"seen_rank{r}.jsonl").read_text().splitlines()]
    n = len(prepare(Config.load(cfg).data).splits["train"])
    for epoch in (0, 1):
        ids = sorted(i for e, batch in seen if e == epoch for i in batch)
        assert ids == list(range(n)), (epoch, len(ids), n)  # no repeats, no gaps
    assert {e for e, _ in seen} == {0, 1}
    steps = [r["step"] for r in records(run, "train")]
    assert steps == list(range(1, steps[-1] + 1)) and steps[-1] > 6


def test_max_epochs_stops_after_whole_passes(home, tmp_path):
    from aiayn.train import train

    cfg = Config.from_dict(
        {
            **TINY,
            "train": {
                **TINY["train"],
                "max_steps": 1000,
                "max_epochs": 1,
                "eval_every": 0,
                "eval_bleu": False,
                "save_every": 1000,
            },
        }
    )
    summary = train(cfg, tmp_path / "run")
    assert summary["step"] == 19  # the 1,080 training pairs make 19 batches of <= 512 tokens
    assert {r["epoch"] for r in records(tmp_path / "run", "train")} == {0}
    assert list_checkpoints(tmp_path / "run")[-1][0] == 19


def test_tokens_per_s_counts_training_time_only_around_validations(home, tmp_path, monkeypatch):
    """Each train record's tokens/s is its window's tokens over the window's training time, validations
    and checkpoint writes left out, also for a window a validation cuts in two and the last record right
    after a validation (which once divided by almost nothing: 4,319,140,651 tokens/s). On an injected
    clock an update takes 1 s, a validation 100 s and a checkpoint write 10 s."""
    import types

    import aiayn.train.progress as progress
    from aiayn.train import train
    from aiayn.train.resume import CheckpointManager
    from aiayn.train.step import TrainStep
    from aiayn.train.validate import Validator

    now = [0.0]
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    tokens: list[float] = []
    step, validate, save = TrainStep.__call__, Validator.__call__, CheckpointManager.save

    def timed_step(self, *args, **kw):
        result = step(self, *args, **kw)
        now[0] += 1.0
        tokens.append(result.tokens)
        return result

    def timed_validation(self):
        now[0] += 100.0
        return validate(self)

    def timed_save(self):
        now[0] += 10.0
        return save(self)

    monkeypatch.setattr(TrainStep, "__call__", timed_step)
    monkeypatch.setattr(Validator, "__call__", timed_validation)
    monkeypatch.setattr(CheckpointManager, "save", timed_save)
    train_cfg = {"max_steps": 6, "log_every": 4, "eval_every": 3, "save_every": 2, "eval_bleu": False}
    cfg = Config.from_dict({**TINY, "train": {**TINY["train"], **train_cfg}})
    train(cfg, tmp_path / "run")
    got = [(r["step"], r["tokens_per_s"]) for r in records(tmp_path / "run", "train")]
    # step 4: updates 1-4 with a save at 2 and the validation at 3 between them; step 6: updates 5-6 with
    # a save at 4 before them, written after the validation at 6
    assert [s for s, _ in got] == [4, 6]
    assert got[0][1] == pytest.approx(sum(tokens[:4]) / 4) and got[1][1] == pytest.approx(sum(tokens[4:]) / 2)


def test_time_budget_spans_resumes(home, tmp_path, capfd, monkeypatch):
    """train.max_minutes, on an injected clock: the trainer's clock (aiayn.train.progress) moves one
    second each time it is read, so the budget is a count of clock reads, the same on any machine."""
    import itertools
    import types

    import aiayn.train.progress as progress
    from aiayn.train import train

    ticks = itertools.count()
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks))))

    def cfg(minutes: float) -> Config:
        return Config.from_dict(
            {
                **TINY,
                "optim": {**TINY.get("optim", {}), "cooldown": 1000},  # ends after the budget: a note says so
                "train": {
                    **TINY["train"],
                    "max_steps": 100_000,
                    "max_minutes": minutes,
                    "eval_every": 0,
                    "eval_bleu": False,
                    "save_every": 100_000,
                },
            }
        )

    def stopped_within_one_update_of(budget_s: float) -> float:
        """The run's last elapsed, checked to be the first update past the budget."""
        elapsed = [r["elapsed"] for r in records(run, "train")]
        per_update = max(b - a for a, b in zip(elapsed, elapsed[1:]))  # clock reads between two updates
        assert elapsed == sorted(elapsed) and 0 < per_update < 10
        # not before the budget; and the update before the last one had not run past it (the check runs
        # once per update, a few reads before the record is written)
        assert budget_s <= elapsed[-1] <= budget_s + 2 * per_update and elapsed[-2] <= budget_s + per_update, elapsed
        return elapsed[-1]

    run = tmp_path / "run"
    first = train(cfg(0.5), run)  # 30 s on the injected clock, then evaluate and save
    assert 2 < first["step"] < 100_000 and not first["interrupted"]
    elapsed = stopped_within_one_update_of(30)
    note = capfd.readouterr().err
    assert f"the time budget ended the run at step {first['step']}, {100_000 - first['step']} updates before" in note
    before = (run / "metrics.jsonl").read_text()
    again = train(cfg(0.5), run, resume=True)  # the budget is the run's, not each invocation's
    assert again["step"] == first["step"] and (run / "metrics.jsonl").read_text() == before
    assert "already used its time budget" in capfd.readouterr().err
    more = train(cfg(elapsed / 60 + 0.5), run, resume=True)  # another 30 s, counted on from the saved elapsed
    assert more["step"] > first["step"] + 2
    stopped_within_one_update_of(elapsed + 30)


def test_relative_data_paths_are_saved_absolute(home, tmp_path, monkeypatch):
    """A run trained from files named relative to the working directory is usable from anywhere."""
    from aiayn.data import prepare
    from aiayn.train import train

    src = [f"das rote haus {i}" for i in range(40)]
    tgt = [f"the red house number {i}" for i in range(40)]
    data = tmp_path / "data"
    data.mkdir()
    for name, lines in (("train.de", src), ("train.en", tgt), ("val.de", src[:4]), ("val.en", tgt[:4])):
        (data / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    files = {
        "corpus": "files",
        "src_lang": "de",
        "tgt_lang": "en",
        "vocab_size": 320,
        "train_src": "data/train.de",
        "train_tgt": "data/train.en",
        "valid_src": "data/val.de",
        "valid_tgt": "data/val.en",
    }
    cfg = Config.from_dict(
        {
            **TINY,
            "data": {**TINY["data"], **files},
            "train": {**TINY["train"], "max_steps": 2, "eval_every": 0, "eval_bleu": False},
        }
    )
    train(cfg, Path("run"))
    monkeypatch.chdir(home)
    saved = Config.load(str(tmp_path / "run" / "config.yaml")).data
    assert saved.train_src == str(data / "train.de") and saved.valid_tgt == str(data / "val.en")
    assert prepare(saved).raw("valid") == (src[:4], tgt[:4])


def test_resume_reads_the_runs_own_tokenizer_after_the_shared_one_moved(home, tmp_path):
    """A run trained with data.spm_model resumes from its own spm.model copy; config.yaml keeps the original."""
    from aiayn.data import prepare
    from aiayn.train import train

    prepare(Config.from_dict(TINY).data, tmp_path / "a")  # a tokenizer to share
    shared = tmp_path / "shared.model"
    shared.write_bytes((tmp_path / "a" / "spm.model").read_bytes())

    def cfg(steps: int) -> Config:
        return Config.from_dict(
            {
                **TINY,
                "data": {**TINY["data"], "spm_model": str(shared)},
                "train": {**TINY["train"], "max_steps": steps, "eval_every": 0, "eval_bleu": False, "save_every": 2},
            }
        )

    run = tmp_path / "b"
    assert train(cfg(2), run)["step"] == 2
    shared.unlink()
    assert train(cfg(4), run, resume=True)["step"] == 4
    assert (run / "spm.model").read_bytes() == (tmp_path / "a" / "spm.model").read_bytes()
    assert Config.load(str(run / "config.yaml")).data.spm_model == str(shared)


def test_resume_continues_on_new_training_text_of_the_same_size_only(home, tmp_path):
    """A run can go on with refreshed targets (e.g. a second distillation round) when the pair count is
    unchanged; a different count is refused with a reason, before any step is taken."""
    from aiayn.data import DataError, prepare
    from aiayn.train import train

    src = [f"das rote haus {i}" for i in range(40)]
    texts = {
        "a.de": src,
        "a.en": [f"the red house number {i}" for i in range(40)],
        "b.en": [f"a red house with the number {i}" for i in range(40)],
        "c.de": src[:39],
        "c.en": ["the red house"] * 39,
        "val.de": src[:4],
    }
    texts["val.en"] = texts["a.en"][:4]
    for name, lines in texts.items():
        (tmp_path / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    files = {
        "corpus": "files",
        "src_lang": "de",
        "tgt_lang": "en",
        "vocab_size": 320,
        "valid_src": str(tmp_path / "val.de"),
        "valid_tgt": str(tmp_path / "val.en"),
    }

    def data(src: str, tgt: str, **more) -> dict:
        return {**TINY["data"], **files, "train_src": str(tmp_path / src), "train_tgt": str(tmp_path / tgt), **more}

    prepare(Config.from_dict({**TINY, "data": data("a.de", "a.en")}).data, tmp_path / "tok")
    shared = str(tmp_path / "tok" / "spm.model")  # students share a tokenizer, so new targets keep the vocabulary

    def cfg(src: str, tgt: str, steps: int) -> Config:
        return Config.from_dict(
            {
                **TINY,
                "data": data(src, tgt, spm_model=shared),
                "train": {**TINY["train"], "max_steps": steps, "eval_every": 0, "eval_bleu": False, "save_every": 2},
            }
        )

    run = tmp_path / "run"
    assert train(cfg("a.de", "a.en", 2), run)["step"] == 2
    assert train(cfg("a.de", "b.en", 4), run, resume=True)["step"] == 4
    saved = Config.load(str(run / "config.yaml")).data
    assert saved.train_tgt == str(tmp_path / "b.en")
    trained_on = json.loads((run / "data_report.json").read_text())["key"]  # what the resumed run prepared
    assert trained_on == prepare(saved).report["key"] != prepare(cfg("a.de", "a.en", 2).data).report["key"]
    with pytest.raises(DataError, match="num_examples was 40, now 39 .*changed size"):
        train(cfg("c.de", "c.en", 6), run, resume=True)
    assert [s for s, *_ in list_checkpoints(run)] == [2, 4]


def test_compile_traces_token_budget_batches_without_recompiling_and_saves_plain_keys(home, tmp_path, monkeypatch):
    """train.compile over 30 real batches of 12 and more (B, S, T) shapes: the batch dimensions are
    marked dynamic, so the one training frame compiles once (unmarked: a static graph, then recompiles
    as torch discovers the varying dimensions). Backend aot_eager: dynamo and AOT autograd as inductor
    sees them, without generating C++. Checkpoints hold the plain module's keys (no `_orig_mod.`)."""
    import torch
    import torch._dynamo
    from safetensors import safe_open
    from torch._dynamo.utils import counters

    import aiayn.train.step as step_mod
    from aiayn.train import train

    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: real_compile(model, **{**kw, "backend": "aot_eager"}))
    torch._dynamo.reset()
    counters.clear()
    shapes = set()
    real_update = step_mod.TrainStep.__call__

    def update(self, micro, *args):
        shapes.update((tuple(b.src.shape), tuple(b.tgt_in.shape)) for b in micro)
        return real_update(self, micro, *args)

    monkeypatch.setattr(step_mod.TrainStep, "__call__", update)
    cfg = Config.from_dict(
        {
            **TINY,
            "model": {"preset": "tiny", "n_encoder_layers": 1, "n_decoder_layers": 1},
            "train": {
                **TINY["train"],
                "compile": True,
                "max_steps": 30,
                "eval_every": 0,
                "eval_bleu": False,
                "save_every": 30,
            },
        }
    )
    try:
        assert train(cfg, tmp_path / "run")["step"] == 30
        frames = dict(counters["frames"])
    finally:
        torch._dynamo.reset()
    assert len(shapes) >= 12  # the test sees real shape variety
    assert frames["total"] == frames["ok"] == 1, frames  # one compile, no recompile
    weights = checkpoint_paths(tmp_path / "run", 30)[0]
    with safe_open(str(weights), "pt") as f:
        keys = list(f.keys())
    assert keys and not [k for k in keys if "_orig_mod" in k or k.startswith("module.")]


# -- early stopping, old state files, fine-tuning --------------------------------------------------

PATIENT = {
    "max_steps": 100,
    "eval_every": 3,
    "patience": 3,
    "patience_metric": "bleu",
    "eval_max_sentences": 4,
    "save_every": 100,
}


def valid_records(run_dir: Path) -> list[tuple]:
    return [(r["step"], r["loss"], r["bleu"]) for r in records(run_dir, "valid")]


def test_patience_stops_and_a_run_resumed_inside_the_window_stops_at_the_same_step(home, tmp_path, monkeypatch):
    """train.patience 3 on greedy BLEU, validated every 3 updates: BLEU hovers near 0 this early (0.27, 0.25,
    0.0, 0.25 measured) while the loss still falls, so the first validation (step 3) stays the best by BLEU
    and training stops at the third without a better one (step 12). A run
    stopped at step 8 (between validations 6 and 9, one miss counted) and resumed stops at step 12 too,
    with the same losses and validations: the counter and best value are in the checkpoint (a counter
    that restarted at 0 on resume would stop at 15)."""
    import signal as signal_mod

    import aiayn.train.step as step_mod
    from aiayn.checkpoint import read_metadata
    from aiayn.train import train

    cfg = Config.from_dict({**TINY, "optim": {**TINY["optim"], "lr_scale": 0.2}, "train": {**TINY["train"], **PATIENT}})
    summary = train(cfg, tmp_path / "ref")
    assert summary["stopped_early"] and summary["step"] == 12 and not summary["interrupted"]
    ref = tmp_path / "ref"
    valid = valid_records(ref)
    assert [s for s, _, _ in valid] == [3, 6, 9, 12] and all(b <= valid[0][2] for *_, b in valid[1:]), valid
    assert valid[-1][1] < valid[0][1]  # the loss did improve: the stop follows the chosen metric
    (stop,) = records(ref, "stop")
    assert (stop["step"], stop["metric"], stop["best_step"]) == (12, "bleu", 3)
    meta = read_metadata(ref / "best.safetensors")  # the best by the chosen metric: step 3's weights
    assert (meta["step"], meta["metric"]) == ("3", "bleu")
    assert [c[0] for c in list_checkpoints(ref)] == [12]

    real, calls = step_mod.TrainStep.__call__, {"n": 0}

    def ctrl_c_at_update_8(self, micro, *args):
        calls["n"] += 1
        if calls["n"] == 8:
            os.kill(os.getpid(), signal_mod.SIGINT)  # the trainer's handler: finish this update, save, stop
        return real(self, micro, *args)

    monkeypatch.setattr(step_mod.TrainStep, "__call__", ctrl_c_at_update_8)
    run = tmp_path / "run"
    first = train(cfg, run)
    assert first["interrupted"] and first["step"] == 8 and [c[0] for c in list_checkpoints(run)] == [8]
    monkeypatch.setattr(step_mod.TrainStep, "__call__", real)
    again = train(cfg, run, resume=True)
    assert again["stopped_early"] and again["step"] == 12
    assert losses(run) == losses(ref) and valid_records(run) == valid_records(ref)
    assert records(run, "stop") == records(ref, "stop")
    assert read_metadata(run / "best.safetensors")["step"] == "3"
    # resuming a run that stopped early does nothing (until patience is raised)
    before = (run / "metrics.jsonl").read_text()
    assert train(cfg, run, resume=True)["step"] == 12 and (run / "metrics.jsonl").read_text() == before


def test_a_validation_that_fails_saves_the_updates_before_it(home, tmp_path, monkeypatch, capfd):
    """Validation raising at step 6 (checkpoints every 100 updates) leaves a checkpoint at step 6, and
    the resumed run trains on from there to the end."""
    import aiayn.train.validate as validate_mod
    from aiayn.train import train

    cfg = Config.from_dict({**TINY, "train": {**TINY["train"], "max_steps": 9, "eval_every": 3, "save_every": 100}})
    real, calls = validate_mod.validate, {"n": 0}

    def fails_second(task, model):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RecursionError("maximum recursion depth exceeded")
        return real(task, model)

    monkeypatch.setattr(validate_mod, "validate", fails_second)
    run = tmp_path / "run"
    with pytest.raises(RecursionError):
        train(cfg, run)
    assert [c[0] for c in list_checkpoints(run)] == [6]
    assert f"validation failed at step 6; checkpoint saved to {run}" in capfd.readouterr().err
    monkeypatch.setattr(validate_mod, "validate", real)
    assert train(cfg, run, resume=True)["step"] == 9
    steps = [r["step"] for r in records(run, "train")]
    assert steps == list(range(1, 10))  # 1-6 before the failure, 7-9 after: none trained twice
    assert [r["step"] for r in records(run, "valid")] == [3, 9]  # step 6's failed validation is not redone


def test_a_state_file_of_another_version_is_refused_in_one_line(reference, tmp_path):
    """A training state written by another format version is not guessed at: resume stops with the
    versions and what to do instead."""
    import shutil

    from aiayn.train import train
    from aiayn.train.resume import load_state, save_state
    from aiayn.train.runtime import TrainingError

    _, ref = reference
    run = tmp_path / "run"
    shutil.copytree(ref, run)
    state_path = checkpoint_paths(run, 150)[1]
    old = load_state(state_path)
    old.pop("early_stop")
    save_state(state_path, {**old, "version": 1})
    with pytest.raises(TrainingError, match="training state is version 1, this aiayn reads version 2: .*--init-from"):
        train(Config.load(run / "config.yaml"), run, resume=True)


def test_fine_tuning_starts_from_the_runs_weights_and_tokenizer_with_a_fresh_schedule(reference, tmp_path, capfd):
    from aiayn.train import train
    from aiayn.train.schedule import noam_lr

    cfg_file, ref = reference
    cfg = Config.load(cfg_file, {"train.max_steps": 3, "train.eval_every": 0, "train.eval_bleu": False})
    for source in (ref, ref / "checkpoints" / "step_00000150.safetensors"):  # a run, or a weights file in one
        run = tmp_path / source.name
        summary = train(cfg, run, init_from=source)
        assert summary["step"] == 3 and "fine-tuning" in capfd.readouterr().out
        tuned, fresh = records(run, "train"), records(ref, "train")
        # the pre-trained model starts near where it ended (nll 1.3 measured), a fresh one at ln(vocab) ~ 6
        assert tuned[0]["nll"] < 0.5 * fresh[0]["nll"] and tuned[0]["nll"] < fresh[-1]["nll"] + 0.5
        assert [r["step"] for r in tuned] == [1, 2, 3]
        assert [r["lr"] for r in tuned] == [noam_lr(s, 64, 40, 0.2) for s in (1, 2, 3)]  # a fresh schedule
        assert (run / "spm.model").read_bytes() == (ref / "spm.model").read_bytes()
        assert Config.load(run / "config.yaml").data.spm_model == str(ref / "spm.model")


def test_fine_tuning_a_different_model_is_refused_in_one_line(reference, tmp_path):
    cfg_file, ref = reference
    args = ["--config", str(cfg_file), "--run-dir", str(tmp_path / "run"), "--init-from", str(ref)]
    r = run_aiayn("train", *args, "--model.d_model", "32", "--model.n_heads", "2", text=True)
    code, err = r.returncode, r.stderr
    assert code == 2 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: --init-from ") and "d_model 64 vs 32" in last, err
    assert not list_checkpoints(tmp_path / "run")
