"""Training parts in isolation: label-smoothed loss, the §5.3 schedule, configs, state files, averaging."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.averaging import average_checkpoints, average_run
from aiayn.checkpoint import CheckpointError, checkpoint_paths, list_checkpoints, load_model, save_weights
from aiayn.config import Config, ConfigError, ModelConfig
from aiayn.model import Transformer
from aiayn.train.loss import label_smoothed_nll
from aiayn.train.resume import capture_rng, load_state, restore_rng, save_state
from aiayn.train.schedule import noam_lr, noam_scheduler

# -- loss -------------------------------------------------------------------------------------------


def dense_reference(logits, target, eps, pad):
    """The textbook version: build the (N, V) smoothed target q and take -sum q log p."""
    v = logits.size(-1)
    lp = torch.log_softmax(logits.double(), -1).view(-1, v)
    t = target.reshape(-1)
    q = torch.full_like(lp, eps / (v - 2))
    q[:, pad] = 0.0
    q.scatter_(1, t.unsqueeze(1), 1.0 - eps)
    keep = t != pad
    loss = -(q * lp).sum(-1)[keep].sum()
    nll = -lp.gather(1, t.unsqueeze(1)).squeeze(1)[keep].sum()
    return loss, nll, keep.sum()


@settings(max_examples=30, deadline=None)
@given(
    b=st.integers(1, 4),
    t=st.integers(1, 6),
    v=st.integers(5, 40),
    eps=st.sampled_from([0.0, 0.1, 0.3]),
    seed=st.integers(0, 10_000),
)
def test_label_smoothing_equals_dense_reference(b, t, v, eps, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g, dtype=torch.float64) * 3
    target = torch.randint(0, v, (b, t), generator=g)  # includes pad (0) positions
    target[0, 0] = 5 % v if 5 % v else 1  # at least one real token
    logits.requires_grad_(True)
    loss, nll, n = label_smoothed_nll(logits, target, eps, pad_id=0)
    ref_loss, ref_nll, ref_n = dense_reference(logits, target, eps, 0)
    assert int(n) == int(ref_n)
    torch.testing.assert_close(loss.double(), ref_loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(nll.double(), ref_nll, rtol=1e-5, atol=1e-5)
    (g1,) = torch.autograd.grad(loss, logits, retain_graph=True)
    (g2,) = torch.autograd.grad(ref_loss, logits, retain_graph=True)
    torch.testing.assert_close(g1.double(), g2, rtol=1e-4, atol=1e-6)
    assert (g1[target == 0] == 0).all()  # padded positions contribute nothing
    # the backward spends its saved buffer: a second pass through the same graph fails loudly
    with pytest.raises(RuntimeError, match="inplace"):
        torch.autograd.grad(nll, logits)
    # the hand-written backward also carries the NLL's gradient, alone and mixed with the loss's
    w = float(torch.rand((), generator=g)) * 4 - 2
    loss, nll, _ = label_smoothed_nll(logits, target, eps, pad_id=0)
    (g1,) = torch.autograd.grad(w * loss + nll, logits)
    (g2,) = torch.autograd.grad(w * ref_loss + ref_nll, logits)
    torch.testing.assert_close(g1.double(), g2, rtol=1e-4, atol=1e-6)


def test_loss_on_bf16_logits_computes_in_float32_and_returns_a_bf16_gradient():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 17).bfloat16().requires_grad_(True)
    target = torch.tensor([[3, 4, 0], [5, 0, 0]])
    loss, nll, n = label_smoothed_nll(logits, target, 0.1, 0)
    assert loss.dtype == nll.dtype == torch.float32 and n == 3
    loss.backward()
    ref = logits.detach().float().requires_grad_(True)
    label_smoothed_nll(ref, target, 0.1, 0)[0].backward()
    assert logits.grad.dtype == torch.bfloat16
    torch.testing.assert_close(logits.grad.float(), ref.grad, rtol=1e-2, atol=1e-2)


def test_loss_without_smoothing_is_cross_entropy_and_pad_gets_no_mass():
    torch.manual_seed(0)
    logits, target = torch.randn(3, 5, 11), torch.randint(1, 11, (3, 5))
    target[:, -2:] = 0
    loss, nll, n = label_smoothed_nll(logits, target, 0.0, 0)
    ce = torch.nn.functional.cross_entropy(logits.view(-1, 11), target.view(-1), ignore_index=0, reduction="sum")
    torch.testing.assert_close(loss, ce)
    torch.testing.assert_close(nll, ce)
    assert n == 9
    # Raising the pad logit hurts the true NLL but is invisible to the smoothing term (q_pad = 0):
    bumped = logits.clone()
    bumped[..., 0] += 5.0
    l2, n2, _ = label_smoothed_nll(bumped, target, 0.1, 0)
    lp, lp2 = torch.log_softmax(logits, -1), torch.log_softmax(bumped, -1)
    keep = target != 0
    expected = (
        0.9 * n2 + 0.1 / 9 * -(lp2.sum(-1) - lp2.gather(-1, target[..., None]).squeeze(-1) - lp2[..., 0])[keep].sum()
    )
    torch.testing.assert_close(l2, expected)
    assert n2 > nll and lp2[..., 0].mean() > lp[..., 0].mean()


# -- schedule ---------------------------------------------------------------------------------------


def test_schedule_matches_the_paper_formula():
    d, w = 512, 4000
    formula = lambda s: d**-0.5 * min(s**-0.5, s * w**-1.5)  # noqa: E731  §5.3 eq. 3
    for s in (1, w, 4 * w):
        assert noam_lr(s, d, w) == pytest.approx(formula(s), rel=1e-12)
    assert noam_lr(w, d, w) == pytest.approx(6.98771e-4, rel=1e-5)  # the peak, by hand
    assert noam_lr(4 * w, d, w) == pytest.approx(noam_lr(w, d, w) / 2)  # inverse square root decay
    assert noam_lr(1, d, w) == pytest.approx(d**-0.5 * w**-1.5)
    assert noam_lr(10, d, w, scale=2.0) == pytest.approx(2 * formula(10))


def test_scheduler_drives_the_optimizer_and_resumes():
    d, w = 64, 10
    p = [torch.nn.Parameter(torch.zeros(2))]
    opt = torch.optim.Adam(p, lr=1.0)
    sched = noam_scheduler(opt, d, w, scale=3.0)
    seen = []
    for _ in range(25):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([noam_lr(s, d, w, 3.0) for s in range(1, 26)], rel=1e-12)
    # A fresh scheduler loaded from the state continues the same sequence.
    opt2 = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=1.0)
    sched2 = noam_scheduler(opt2, d, w, scale=3.0)
    opt2.load_state_dict(opt.state_dict())
    sched2.load_state_dict(sched.state_dict())
    assert opt2.param_groups[0]["lr"] == pytest.approx(noam_lr(26, d, w, 3.0))


def lr_sequence(
    steps: int, make: Callable[[torch.optim.Optimizer], Any], start: dict | None = None
) -> tuple[list[float], dict]:
    """The rates of `steps` updates under the scheduler `make(optimizer)` builds (resumed from `start`),
    and its state after them."""
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=1.0)
    sched = make(opt)
    if start is not None:
        sched.load_state_dict(start)
    seen = []
    for _ in range(steps):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return seen, sched.state_dict()


def test_cosine_schedule_warms_up_like_noam_then_falls_to_its_floor_at_max_steps_and_resumes():
    d, w, total = 64, 10, 50

    def run(steps: int, start: dict | None = None) -> tuple[list[float], dict]:
        return lr_sequence(steps, lambda opt: noam_scheduler(opt, d, w, scale=2.0, cosine_to=(total, 0.1)), start)

    lrs, _ = run(60)
    peak = noam_lr(w, d, w, 2.0)
    assert lrs[:w] == pytest.approx([noam_lr(s, d, w, 2.0) for s in range(1, w + 1)])  # the same warm-up
    assert lrs[w - 1] == pytest.approx(peak) and max(lrs) == pytest.approx(peak)
    after = lrs[w - 1 : total]
    assert all(a > b for a, b in zip(after, after[1:]))  # strictly falling to ...
    assert lrs[total - 1] == pytest.approx(0.1 * peak) and lrs[-1] == pytest.approx(0.1 * peak)  # ... the floor
    assert lrs[(w + total) // 2 - 1] == pytest.approx(0.55 * peak)  # half way: the cosine's midpoint
    first, state = run(20)
    rest, _ = run(40, state)
    assert first + rest == pytest.approx(lrs, rel=1e-12)


@pytest.mark.parametrize("cosine", [False, True])
def test_cooldown_keeps_the_schedule_then_falls_linearly_to_its_last_update_and_resumes_from_a_file(cosine, tmp_path):
    d, w, total, n = 64, 10, 50, 20

    def run(steps: int, cooldown: bool, start: dict | None = None) -> tuple[list[float], dict]:
        cos, cool = (total, 0.1) if cosine else None, (total, n) if cooldown else None
        return lr_sequence(steps, lambda opt: noam_scheduler(opt, d, w, 2.0, cos, cool), start)

    plain, _ = run(total, cooldown=False)
    lrs, _ = run(total, cooldown=True)
    assert lrs[: total - n] == plain[: total - n]  # a checkpoint before the cooldown resumes into it exactly
    # the k-th of the last n updates (k = 0..n-1) runs at (n - k) / n of the schedule: a line down to 1/n
    assert lrs[total - n :] == pytest.approx([p * (n - k) / n for k, p in enumerate(plain[total - n :])], rel=1e-12)
    assert lrs[-1] > 0 and lrs[-1] == pytest.approx(plain[-1] / n)
    # the saved state is plain tensors and numbers (the trainer loads it with weights_only=True)
    first, state = run(total - n - 5, cooldown=True)
    torch.save(state, tmp_path / "s.pt")
    rest, _ = run(n + 5, cooldown=True, start=torch.load(tmp_path / "s.pt", weights_only=True))
    assert first + rest == pytest.approx(lrs, rel=1e-12)


# -- config -----------------------------------------------------------------------------------------


def test_config_yaml_toml_and_dotted_overrides(tmp_path):
    (tmp_path / "c.yaml").write_text(
        "model:\n  preset: tiny\n  dropout: 0.2\noptim:\n  eps: 1e-9\n  warmup: 100\ntrain:\n  max_steps: 7\n"
    )
    (tmp_path / "c.toml").write_text(
        '[model]\npreset = "tiny"\ndropout = 0.2\n[optim]\neps = 1e-9\nwarmup = 100\n[train]\nmax_steps = 7\n'
    )
    a, b = Config.load(tmp_path / "c.yaml"), Config.load(tmp_path / "c.toml")
    assert a == b and a.optim.eps == 1e-9 and isinstance(a.optim.eps, float)
    c = Config.load(
        tmp_path / "c.yaml",
        ["--optim.lr_scale", "2", "--model.d_model=128", "--train.amp", "bf16", "--optim.betas", "[0.9, 0.997]"],
    )
    assert (c.optim.lr_scale, c.train.amp, c.optim.betas, c.optim.warmup) == (2.0, "bf16", (0.9, 0.997), 100)
    mc = c.model_config(vocab_size=99)
    assert (mc.d_model, mc.n_encoder_layers, mc.dropout, mc.vocab_size) == (128, 2, 0.2, 99)
    c.save(tmp_path / "run" / "config.yaml")
    assert Config.load(tmp_path / "run" / "config.yaml") == c
    with pytest.raises(ValueError, match="unknown optim fields.*lr_scal"):
        Config.load(None, ["--optim.lr_scal", "2"])
    with pytest.raises(ValueError, match="unknown model fields"):
        Config.load(None, ["--model.dmodel", "2"])
    with pytest.raises(ValueError, match="train.max_steps: cannot use 'many'"):
        Config.load(None, ["--train.max_steps", "many"])
    with pytest.raises(ValueError, match="amp"):
        Config.load(None, {"train.amp": "fp8"})


def test_shipped_configs_load():
    base = Config.load("wmt14_en_de_base")  # packaged recipes, by name
    big = Config.load("wmt14_en_de_big")
    o = base.optim
    assert (o.warmup, o.betas, o.eps, o.label_smoothing) == (4000, (0.9, 0.98), 1e-9, 0.1)
    assert base.model_config(37000).d_model == 512 and big.model_config(37000).d_model == 1024
    assert big.model_config(37000).dropout == 0.3 and base.train.max_steps == 100_000 and big.train.max_steps == 300_000
    for c in (base, big):  # the paper's ~25k-token batch on any GPU count, not 3125 x 8 per GPU
        assert (c.optim.tokens_per_update, c.optim.update_freq, c.data.max_tokens) == (25000, 1, 3125)
    for name in ("multi30k_de_en", "multi30k_en_de"):
        c = Config.load(name)
        assert c.data.corpus == "multi30k" and c.model["preset"] == "small"


# -- state files ------------------------------------------------------------------------------------


def test_state_round_trip_is_weights_only_and_restores_rng(tmp_path):
    import random

    import numpy as np

    rng = capture_rng()
    a = (torch.rand(3), np.random.rand(), random.random())
    save_state(tmp_path / "s.pt", {"step": 3, "rng": [rng], "data": {"epoch": 1, "position": 2}})
    restore_rng(load_state(tmp_path / "s.pt")["rng"][0])
    b = (torch.rand(3), np.random.rand(), random.random())
    assert torch.equal(a[0], b[0]) and a[1:] == b[1:]

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"step": 1, "x": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="evil.pt"):
        load_state(tmp_path / "evil.pt")
    data = (tmp_path / "s.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"corrupted or truncated training state .*cut\.pt"):
        load_state(tmp_path / "cut.pt")


class FakeCuda:
    """Stands in for torch.cuda's RNG calls on a machine without a GPU: `n` visible devices, each with
    a byte state; like torch, a device index past the visible ones raises IndexError."""

    def __init__(self, monkeypatch, n: int) -> None:
        self.n = n
        self.states = {i: torch.full((8,), 10 + i, dtype=torch.uint8) for i in range(n)}

        def index(device) -> int:
            i = torch.device("cuda", device).index if isinstance(device, int) else torch.device(device).index or 0
            if i >= self.n:
                raise IndexError(f"tuple index out of range (cuda:{i}, {self.n} visible)")
            return i

        def set_state(state, device="cuda"):
            self.states[index(device)] = state.clone()

        for name, fn in {
            "is_available": lambda: True,
            "is_initialized": lambda: True,
            "device_count": lambda: n,
            "current_device": lambda: 0,
            "get_rng_state": lambda device="cuda": self.states[index(device)].clone(),
            "set_rng_state": set_state,
            "get_rng_state_all": lambda: [self.states[i].clone() for i in range(n)],
            "set_rng_state_all": lambda states: [set_state(s, i) for i, s in enumerate(states)],
        }.items():
            monkeypatch.setattr(torch.cuda, name, fn)


def test_cuda_rng_state_is_the_ranks_own_device_and_resumes_on_fewer_gpus(tmp_path, monkeypatch):
    """A rank saves and restores only its own GPU's generator: a checkpoint written where 2 GPUs were
    visible resumes where 1 is."""
    two = FakeCuda(monkeypatch, 2)
    saved = capture_rng(torch.device("cuda", 1))  # rank 1 of a run on 2 GPUs
    assert torch.equal(saved["cuda"], two.states[1])
    save_state(tmp_path / "s.pt", {"step": 1, "rng": [saved]})

    one = FakeCuda(monkeypatch, 1)  # the resumed process sees one GPU
    restore_rng(load_state(tmp_path / "s.pt")["rng"][0], torch.device("cuda", 0))
    assert torch.equal(one.states[0], two.states[1])  # rank 1's stream continues on this process's GPU
    one.states[0].zero_()
    restore_rng(saved, torch.device("cpu"))  # resumed on CPU: the GPU's stream is not touched
    assert not one.states[0].any()
    assert "cuda" not in capture_rng(torch.device("cpu"))


# -- averaging --------------------------------------------------------------------------------------


def test_average_is_the_parameter_mean(tmp_path):
    cfg = ModelConfig.preset("tiny", vocab_size=50)
    models = []
    for i, step in enumerate((10, 20, 30)):
        torch.manual_seed(i)
        m = Transformer(cfg)
        w, s = checkpoint_paths(tmp_path, step)
        save_weights(m, w, step=step)
        save_state(s, {"step": step})
        models.append(m)
    assert [c[0] for c in list_checkpoints(tmp_path)] == [10, 20, 30]

    out = average_run(tmp_path, 2, tmp_path / "avg.safetensors")
    avg = load_model(out)
    for name, p in avg.named_parameters():
        a, b = dict(models[1].named_parameters())[name], dict(models[2].named_parameters())[name]
        assert torch.equal(p, ((a.double() + b.double()) / 2).float()), name
    assert avg.generator.weight is avg.src_embed.tokens.weight  # still tied

    three = average_checkpoints([checkpoint_paths(tmp_path, s)[0] for s in (10, 20, 30)])
    ref = torch.stack([m.encoder[0].ffn.w1.weight.double() for m in models]).mean(0).float()
    assert torch.equal(three.encoder[0].ffn.w1.weight, ref)

    # The command line: `aiayn average RUN --last 3 -o FILE`
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "aiayn",
            "average",
            str(tmp_path),
            "--last",
            "3",
            "-o",
            str(tmp_path / "avg3.safetensors"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    via_cli = load_model(tmp_path / "avg3.safetensors")
    for (n1, p1), (_, p2) in zip(via_cli.named_parameters(), three.named_parameters()):
        assert torch.equal(p1, p2), n1


# -- mixed precision --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "device, deterministic, tf32",
    [("cuda", False, True), ("cuda:1", False, True), ("cuda", True, False), ("cpu", False, False)],
)
def test_tf32_is_allowed_on_cuda_unless_deterministic(device, deterministic, tf32):
    """float32 matmuls and cuDNN convolutions may use TF32 on a GPU; a deterministic run and a CPU run leave
    torch's switches as they were (only flags are set, so no GPU is needed to check)."""
    from aiayn.train.runtime import allow_tf32

    # Process-wide switches, restored by assignment: they are properties behind the modules' __getattr__,
    # which monkeypatch cannot restore on every pytest (it deletes what it set).
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = matmul.allow_tf32, cudnn.allow_tf32
    try:
        matmul.allow_tf32 = cudnn.allow_tf32 = False
        allow_tf32(torch.device(device), deterministic)
        assert matmul.allow_tf32 is tf32 and cudnn.allow_tf32 is tf32
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved


@pytest.mark.parametrize(
    "major, emulated, expected", [(8, True, "bf16"), (9, True, "bf16"), (7, True, "fp16"), (6, False, "fp16")]
)
def test_amp_auto_picks_bf16_only_where_the_gpu_has_it(monkeypatch, major, emulated, expected):
    """A V100/T4 (compute capability 7.x) runs bf16 only by emulation, yet torch.cuda.is_bf16_supported()
    says True there; auto must choose fp16 with loss scaling instead. The CUDA queries are faked."""
    from types import SimpleNamespace

    from aiayn.train.trainer import resolve_amp

    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d=None: SimpleNamespace(major=major, minor=0))
    monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda d: emulated)  # the emulation probe
    assert resolve_amp("auto", torch.device("cuda", 0)) == expected
    assert resolve_amp("auto", torch.device("cpu")) == "none"
    assert resolve_amp("bf16", torch.device("cuda", 0)) == "bf16"  # an explicit choice is kept


# -- the global batch -------------------------------------------------------------------------------


@pytest.mark.parametrize("world, expected", [(1, 8), (2, 4), (8, 1), (3, 3), (16, 1)])
def test_update_freq_is_derived_from_the_global_token_target(world, expected):
    from aiayn.train.trainer import derive_update_freq, global_batch_warning

    uf = derive_update_freq(25000, 3125, world)
    assert uf == expected
    warning = global_batch_warning(25000, 3125, uf, world)
    if world == 16:  # one micro-batch per rank is already 50,000 tokens
        assert "= 50,000 tokens, 2x optim.tokens_per_update=25,000" in warning and "\n" not in warning
    else:  # 25,000, 25,000, 25,000 and 28,125: within 1.5x
        assert warning is None
    assert "= 16,000 tokens, 0.64x" in global_batch_warning(25000, 1000, 16, 1)  # < 25,000 / 1.5: too small warns too
    assert derive_update_freq(25000, 4096, 1) == 6 and derive_update_freq(100, 4096, 1) == 1


def test_tokens_per_update_and_update_freq_are_not_both_set():
    cfg = Config.load(None, {"optim.tokens_per_update": 25000})
    assert cfg.optim.tokens_per_update == 25000 and cfg.optim.update_freq == 1
    assert Config.load(None).optim.tokens_per_update is None  # default: update_freq as given
    with pytest.raises(ConfigError, match="both set the batch; set tokens_per_update null"):
        Config.load(None, {"optim.tokens_per_update": 25000, "optim.update_freq": 8})
    with pytest.raises(ConfigError, match="tokens_per_update must be >= 1"):
        Config.load(None, {"optim.tokens_per_update": 0})


def test_build_optimizer_passes_the_configs_cooldown_to_the_schedule():
    from aiayn.config import OptimConfig
    from aiayn.train.optim import build_optimizer

    d, total = 64, 50
    opt, sched, _ = build_optimizer(
        torch.nn.Linear(2, 2), OptimConfig(warmup=10, cooldown=20), d, torch.device("cpu"), "none", total
    )
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[29] == pytest.approx(noam_lr(30, d, 10))  # update 30: the last before the cooldown
    assert lrs[-1] == pytest.approx(noam_lr(total, d, 10) / 20)


def test_cooldown_must_fit_in_the_run():
    assert Config.load(None, {"optim.cooldown": 2000, "train.max_steps": 11000}).optim.cooldown == 2000
    with pytest.raises(ConfigError, match="longer than the run"):
        Config.load(None, {"optim.cooldown": 2000, "train.max_steps": 1000})
    with pytest.raises(ConfigError, match="cooldown must be >= 0"):
        Config.load(None, {"optim.cooldown": -1})


def test_train_state_round_trip_and_patience():
    from aiayn.train.state import TrainState

    s = TrainState(metric="loss")
    assert [s.record_validation(v) for v in (3.0, 2.5, 2.7, 2.5, 2.4)] == [True, True, False, False, True]
    assert (s.best, s.bad_evals) == (2.4, 0)
    s.record_validation(2.6)
    s.step, s.nan_total = 17, 2
    again = TrainState(metric="loss")
    again.load_state_dict(s.state_dict())
    assert again == s
    other = TrainState(metric="bleu")  # another metric: its best is no guide
    other.load_state_dict(s.state_dict())
    assert (other.best, other.bad_evals, other.step) == (None, 0, 17)


def test_patience_settings_are_checked():
    from aiayn.train.tasks import spec_for

    with pytest.raises(ConfigError, match="patience_metric=bleu needs task.eval_bleu=true"):
        spec_for(Config.from_dict({"train": {"patience": 2, "patience_metric": "bleu"}, "task": {"eval_bleu": False}}))
    with pytest.raises(ConfigError, match="eval_every"):
        Config.from_dict({"train": {"patience": 2, "eval_every": 0}})


def test_patience_metric_auto_is_the_number_each_task_is_judged_by():
    from aiayn.train.tasks import default_metric

    def metric(task: str, **train: object) -> str:
        return default_metric(Config.from_dict({"task": {"name": task}, "train": train}))

    assert metric("translate") == "bleu"
    assert metric("translate", eval_bleu=False) == "loss"
    assert (metric("lm"), metric("mlm"), metric("classify")) == ("loss", "loss", "accuracy")
    assert metric("classify", patience_metric="loss") == "loss"
    with pytest.raises(ConfigError, match="needs task classify or mlm"):
        metric("lm", patience_metric="accuracy")


# -- the update under DDP ---------------------------------------------------------------------------


def test_a_ddp_update_waits_for_the_device_once_and_scales_exactly(monkeypatch):
    """Under DDP the loss is normalised by the global token count, known only after an all-reduce. That
    count is summed and divided on the device, so the update still makes one host sync (the final sums),
    not two, and the scale is the very float the host division gave: here 2 ranks are faked by an
    all-reduce that doubles (a twin rank with the same batch; no gradient all-reduce, so each rank's
    gradient is its own), and the parameters after the update equal, bitwise, a single process's on the
    same batch, while the reported token count is the global one."""
    import copy

    import numpy as np

    import aiayn.distributed as distributed
    import aiayn.train.step as step_mod
    from aiayn.data import EncodedSplit
    from aiayn.data.batching import collate
    from aiayn.distributed import DistInfo
    from aiayn.train.step import Flags, TrainStep
    from aiayn.train.tasks import TranslationTask

    rng = np.random.default_rng(0)
    split = EncodedSplit.from_ids(
        [rng.integers(4, 40, n).tolist() for n in (3, 7, 5, 9)],
        [rng.integers(4, 40, n).tolist() for n in (4, 6, 8, 5)],
        vocab_size=40,
    )
    batch = collate(split, np.arange(4))
    mc = ModelConfig(vocab_size=40, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0)
    torch.manual_seed(0)
    base = Transformer(mc)
    run = Config.load(None, {"optim.label_smoothing": 0.1, "data.max_tokens": 1000})
    task = TranslationTask(run, mc, None, torch.device("cpu"))

    def update(world: int) -> tuple[torch.nn.Module, object, list[str]]:
        model = copy.deepcopy(base)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        step = TrainStep(task, model, model, opt, sched, None, DistInfo(world_size=1), torch.device("cpu"), 0.0)
        step.dist = DistInfo(world_size=world)  # after StopVote: one micro-batch never votes
        seen: list[str] = []
        with monkeypatch.context() as m:
            m.setattr(distributed, "all_reduce_sum", lambda t: t.mul_(world))
            m.setattr(step_mod, "all_reduce_sum", lambda t: t.mul_(world), raising=False)

            def counter(name: str):
                real = getattr(torch.Tensor, name)

                def counting(self, *a, **k):
                    seen.append(name)
                    return real(self, *a, **k)

                return counting

            for name in ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "cpu", "numpy"):
                m.setattr(torch.Tensor, name, counter(name))
            seen.clear()
            result = step([batch], Flags(), lambda: False)
        return model, result, seen

    one, r1, _ = update(1)
    two, r2, seen = update(2)
    assert r2.tokens == 2 * r1.tokens == 2 * batch.tgt_tokens
    for (n, p1), p2 in zip(one.named_parameters(), two.parameters()):
        assert torch.equal(p1, p2), n
    assert seen == ["tolist"], seen  # the final sums'; before, the token count's all-reduce made a first
