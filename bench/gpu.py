"""The GPU check: training and decoding speed of the paper's shapes on one CUDA device, beside peers, in
one command that stays under 8 minutes on an H100 and leaves its figures in one JSON and one Markdown file.

    python bench/gpu.py --out gpu.json --md gpu.md          # on the GPU (about 6 minutes on an H100)
    python bench/gpu.py --smoke --out s.json --md s.md      # CPU, tiny shapes, seconds: CI runs this

Training (the paper's base and big shapes, vocabulary 32,000, label smoothing 0.1, fused Adam, gradient
clipping at 1.0 as HF's Trainer does by default): target tokens/s, peak memory and MFU for aiayn's
Transformer, torch.nn.Transformer (TorchSeq2Seq of bench/throughput.py: embeddings, positions, tied
projection) and HF MarianMTModel (the same shape: post-LN, ReLU, tied embeddings), each under
  fp32          float32 weights, TF32 matrix products (what `aiayn train` does on CUDA with train.amp=none)
  bf16          torch.autocast(bfloat16), float32 weights (train.amp=bf16, the default on such GPUs)
  bf16-compile  the same through torch.compile, dynamic shapes marked as aiayn's trainer marks them
Every engine trains on the same batches: length-grouped, about --tokens target tokens (and as many
source tokens) each, the shapes varying from batch to batch as the trainer's do. aiayn projects only
the non-pad target positions onto the vocabulary (its trainer's `keep`); the peers project every
position, as their users' code does.

MFU = model FLOPs per target token (bench/throughput.py flops_per_token: 6 x the forward's multiply-adds
of the non-pad tokens, attention included, padding not counted) x tokens/s over the device's dense bf16
peak (a table of datasheet figures by device name, --peak-tflops to override; where the name is not in
the table, the measured bf16 matrix-product rate, and the JSON says which). fp32 runs are divided by the
same bf16 peak, so the three modes read on one scale.

Decoding (random-weight base models, batch 64, sources of 20..30 tokens, every sentence decoded to
exactly --decode-len tokens: EOS banned before, forced there, so the work is fixed whatever the random
weights say): sentences/s of beam 4 (length penalty 0.6) and greedy for aiayn's torch engine (float32
and bfloat16 weights) and CTranslate2 on the same weights (float16 and int8_float16; in --smoke, on the
CPU, float32 and int8). CTranslate2 runs in a subprocess of its own, so its failure to load (its CUDA
libraries) is recorded and the rest goes on.

The SDPA kernels are torch's defaults less cuDNN's, as aiayn.devices sets them on CUDA for every engine
(--cudnn-sdp keeps cuDNN's: it builds a plan for each new attention shape, 1.7-2.7 s each on an H100).

Each measurement stops after --seconds of timed work (after its warm-up, compilation included), the
JSON is rewritten after every one (a run killed half-way leaves what it measured), and cases that would
start after --budget seconds are recorded as skipped. Order: training without compile, decoding, then
the compiled training runs (the slow ones to start).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aiayn.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig  # noqa: E402
from aiayn.devices import shape_free_attention  # noqa: E402
from aiayn.model import Transformer  # noqa: E402
from aiayn.train.loss import label_smoothed_nll  # noqa: E402
from throughput import BanEOS, TorchSeq2Seq, flops_per_token, marian  # noqa: E402

MODES = ("fp32", "bf16", "bf16-compile")
ENGINES = ("aiayn", "hf", "torch")
# dense bf16 tensor-core peaks from the datasheets (TFLOP/s, without sparsity), matched on the device name
PEAK_BF16 = [("H200", 989.4), ("H100 PCIe", 756.0), ("H100", 989.4), ("A100", 312.0), ("L40S", 362.0), ("L4", 121.0)]
GOALS = {"train_vs_hf": 1.3, "mfu": 0.40, "beam_vs_ct2_float16": 0.8}


# -- inputs --------------------------------------------------------------------------------------


def make_batches(
    n: int, tokens: int, vocab: int, lo: int, hi: int, seed: int, multiple: int = 1
) -> list[tuple[Tensor, Tensor, Tensor]]:
    """n length-grouped batches of (src, tgt_in, tgt_out), each about `tokens` target tokens (EOS included):
    a batch draws a length L in lo..hi, its sentences' source and target lengths lie in L-3..L, right padded
    (to a width that is a multiple of `multiple`: the same sentences, more padding)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        L = int(torch.randint(lo, hi + 1, (1,), generator=g))
        B = max(1, tokens // L)
        S = torch.randint(max(2, L - 3), L + 1, (B,), generator=g)
        T = torch.randint(max(2, L - 3), L + 1, (B,), generator=g)
        src = torch.randint(4, vocab, (B, int(S.max())), generator=g)
        y = torch.randint(4, vocab, (B, int(T.max())), generator=g)
        src, y = (F.pad(x, (0, -x.size(1) % multiple), value=PAD_ID) for x in (src, y))
        pos_s, pos_t = torch.arange(src.size(1)), torch.arange(y.size(1))
        src = torch.where(pos_s < (S - 1)[:, None], src, PAD_ID)
        src[torch.arange(B), S - 1] = EOS_ID
        tout = torch.where(pos_t < (T - 1)[:, None], y, PAD_ID)
        tout[torch.arange(B), T - 1] = EOS_ID
        tin = torch.cat([torch.full((B, 1), BOS_ID), tout[:, :-1]], 1)
        tin = torch.where(tin == EOS_ID, PAD_ID, tin)  # BOS + y, the EOS position is not an input
        out.append((src, tin, tout))
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# -- training ------------------------------------------------------------------------------------


def build_model(engine: str, c: ModelConfig) -> nn.Module:
    if engine == "aiayn":
        return Transformer(c)
    if engine == "torch":
        return TorchSeq2Seq(c)
    if engine == "hf":
        return marian(c)
    raise ValueError(engine)


def train_case(
    engine: str,
    c: ModelConfig,
    mode: str,
    batches: list[tuple[Tensor, Tensor, Tensor]],
    device: torch.device,
    seconds: float,
    warmup: int,
    compile_backend: str,
) -> dict[str, Any]:
    """One engine's training at one mode: warm-up updates (compilation in them), then updates until
    `seconds` of timed work -> tokens/s, seconds per update, peak memory."""
    torch.manual_seed(0)
    t_build = time.perf_counter()
    model = build_model(engine, c).to(device).train()
    params = list({id(p): p for p in model.parameters()}.values())
    opt = torch.optim.Adam(params, lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=device.type in ("cuda", "cpu"))
    fwd: Any = model
    compiled = mode.endswith("compile")
    if compiled:
        fwd = torch.compile(model, backend=compile_backend)
    amp = torch.autocast(device.type, dtype=torch.bfloat16) if mode.startswith("bf16") else contextlib.nullcontext()
    on_dev = [tuple(t.to(device) for t in b) for b in batches]
    # the non-pad target positions, computed on the host as aiayn's trainer does (no CUDA sync)
    keeps = [(b[2].view(-1) != PAD_ID).nonzero().squeeze(1).to(device) for b in batches]
    ntok = [int((b[2] != PAD_ID).sum()) for b in batches]

    def step(i: int) -> Tensor:
        src, tin, tout = on_dev[i]
        if compiled:  # as aiayn.train.tasks.translate marks them: one graph for every batch shape
            for t in (src, tin):
                torch._dynamo.maybe_mark_dynamic(t, 0)
                torch._dynamo.maybe_mark_dynamic(t, 1)
            torch._dynamo.maybe_mark_dynamic(keeps[i], 0)
        with amp:
            if engine == "aiayn":
                logits = fwd(src, tin, keep=keeps[i])  # (n, V)
            elif engine == "hf":
                logits = fwd(
                    input_ids=src,
                    attention_mask=src != PAD_ID,
                    decoder_input_ids=tin,
                    decoder_attention_mask=tin != PAD_ID,
                    use_cache=False,
                ).logits  # (B, T, V)
            else:
                logits = fwd(src, tin)  # (B, T, V)
        if engine == "aiayn":  # its trainer's loss (float32 inside)
            loss_sum, _, _ = label_smoothed_nll(logits, tout.view(-1).index_select(0, keeps[i]), 0.1, PAD_ID)
            loss = loss_sum / ntok[i]
        else:
            loss = F.cross_entropy(
                logits.float().reshape(-1, logits.size(-1)), tout.reshape(-1), ignore_index=PAD_ID, label_smoothing=0.1
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.detach()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    if compiled:  # every batch shape once: the recompilations dynamic shapes still need (an alignment guard,
        # T % 8) are a start-up cost. Uncompiled runs see new shapes in the timed part, as training does.
        warmup = max(warmup, len(batches))
    t0 = time.perf_counter()
    warm_each = []
    for i in range(warmup):
        t = time.perf_counter()
        step(i % len(batches))
        sync(device)
        warm_each.append(time.perf_counter() - t)
    warm_s = time.perf_counter() - t0
    done, tokens, losses, each = 0, 0, [], []
    t0 = time.perf_counter()
    while True:
        i = (warmup + done) % len(batches)
        t = time.perf_counter()
        losses.append(step(i))
        sync(device)  # the trainer's one host sync per update
        each.append(time.perf_counter() - t)
        done, tokens = done + 1, tokens + ntok[i]
        if time.perf_counter() - t0 >= seconds:
            break
    wall = time.perf_counter() - t0
    out = {
        "tokens_per_s": tokens / wall,
        "s_per_update": wall / done,
        "updates": done,
        "tokens_per_update": tokens / done,
        "warmup_s": warm_s,
        "build_s": t0 - t_build - warm_s,
        "params": sum(p.numel() for p in params),
        "loss_last": float(losses[-1]),
        # each update's seconds: a batch shape met for the first time can cost far more (compilation, kernel plans)
        "warmup_update_s": [round(x, 4) for x in warm_each],
        "update_s": [round(x, 4) for x in each[:40]],
    }
    if device.type == "cuda":
        out["peak_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return out  # its model, optimizer and batches go with this frame: the caller then frees the cache


# -- decoding ------------------------------------------------------------------------------------


def decode_sources(n_batches: int, batch: int, vocab: int, seed: int) -> list[Tensor]:
    """(batch, S) sources of 20..30 tokens (EOS included), right padded."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        S = torch.randint(20, 31, (batch,), generator=g)
        src = torch.randint(4, vocab, (batch, int(S.max())), generator=g)
        src = torch.where(torch.arange(src.size(1)) < (S - 1)[:, None], src, PAD_ID)
        src[torch.arange(batch), S - 1] = EOS_ID
        out.append(src)
    return out


def timed_batches(run: Callable[[Tensor], Any], sources: list[Tensor], seconds: float) -> dict[str, Any]:
    """Warm up on the first batch, then whole batches until `seconds` -> sentences/s."""
    run(sources[0])
    n = 0
    t0 = time.perf_counter()
    while True:
        run(sources[n % len(sources)])
        n += 1
        if time.perf_counter() - t0 >= seconds:
            break
    wall = time.perf_counter() - t0
    sents = sum(sources[i % len(sources)].size(0) for i in range(n))
    return {"sentences_per_s": sents / wall, "batches": n}


def torch_decode(c: ModelConfig, dtype: torch.dtype, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    from aiayn.decode import beam_search, greedy_search

    torch.manual_seed(args.seed)
    net = Transformer(c).eval().to(device=device, dtype=dtype)
    model = BanEOS(net, last=args.decode_len - 1)  # type: ignore[arg-type]
    sources = [s.to(device) for s in decode_sources(args.decode_batches, args.decode_batch, c.vocab_size, args.seed)]
    res: dict[str, Any] = {}
    for search, beam in (("beam4", 4), ("greedy", 1)):

        def run(src: Tensor, beam: int = beam) -> Any:
            with torch.inference_mode():
                if beam == 1:
                    out = greedy_search(model, src, max_len_a=0.0, max_len_b=args.decode_len - 1)
                    assert all(len(h) == args.decode_len - 1 for h in out)
                    return out
                n = args.decode_len - 1
                hyps = beam_search(model, src, beam=beam, length_penalty=0.6, max_len_a=0.0, max_len_b=n)
                assert all(len(h[0][0]) == args.decode_len - 1 for h in hyps)
                return hyps

        res[search] = timed_batches(lambda s: (run(s), sync(device)), sources, args.seconds)
    return res


CT2_CHILD = r"""
import json, sys, time
sys.path[:0] = [sys.argv[1]]
import ctranslate2, torch
from gpu import decode_sources, timed_batches
from aiayn.config import EOS_ID, ModelConfig
from aiayn.export import save_ctranslate2
from aiayn.model import Transformer
a = json.loads(sys.argv[2])
c = ModelConfig.from_dict(a["config"])
vocab = ["<pad>", "<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(4, c.vocab_size)]
torch.manual_seed(a["seed"])
save_ctranslate2(Transformer(c), vocab, a["dir"], force=True)  # the weights torch_decode draws (same seed)
res = {"ctranslate2": ctranslate2.__version__, "cuda_devices": ctranslate2.get_cuda_device_count()}
for ct in a["compute_types"]:
    tr = ctranslate2.Translator(a["dir"], device=a["device"], compute_type=ct, intra_threads=a["threads"])
    sources = decode_sources(a["batches"], a["batch"], c.vocab_size, a["seed"])
    for search, beam in (("beam4", 4), ("greedy", 1)):
        def run(src, beam=beam):
            tokens = [[vocab[i] for i in row if i > EOS_ID] for row in src.tolist()]  # CT2 appends EOS
            out = tr.translate_batch(tokens, beam_size=beam, length_penalty=0.6, max_decoding_length=a["len"] - 1,
                                     min_decoding_length=a["len"] - 1, max_batch_size=0)
            assert all(len(r.hypotheses[0]) == a["len"] - 1 for r in out), [len(r.hypotheses[0]) for r in out][:4]
            return out
        res[f"ct2-{ct}/{search}"] = timed_batches(run, sources, a["seconds"])
    del tr
print("RESULT " + json.dumps(res))
"""


def cublas12_shim(tmp: Path) -> str | None:
    """A folder where libcublas.so.12 / libcublasLt.so.12 name torch's own cuBLAS (the CUDA 13 build of a
    CUDA 13 torch): CTranslate2's wheels load the CUDA 12 names at run time. None when torch has none."""
    import glob

    found = {}
    for d in sys.path:
        for f in glob.glob(os.path.join(d, "nvidia", "**", "libcublas*.so.*"), recursive=True):
            found.setdefault(Path(f).name.split(".so")[0], f)
    if "libcublas" not in found:
        return None
    tmp.mkdir(parents=True, exist_ok=True)
    for name, f in found.items():
        link = tmp / f"{name}.so.12"
        if not link.exists():
            link.symlink_to(f)
    return str(tmp)


def ct2_decode(c: ModelConfig, device: torch.device, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cts = ["float16", "int8_float16"] if device.type == "cuda" else ["float32", "int8"]
    a = {
        "config": c.to_dict(),
        "seed": args.seed,
        "dir": str(tmp / "ct2"),
        "device": device.type,
        "compute_types": cts,
        "threads": 1 if device.type == "cuda" else max(1, torch.get_num_threads()),
        "batches": args.decode_batches,
        "batch": args.decode_batch,
        "len": args.decode_len,
        "seconds": args.seconds,
    }
    env = dict(os.environ)
    tries: list[dict[str, str]] = [{}]
    shim = cublas12_shim(tmp / "cublas12") if device.type == "cuda" else None
    if shim:
        tries.append({"LD_LIBRARY_PATH": shim + os.pathsep + env.get("LD_LIBRARY_PATH", "")})
    errors = []
    for extra in tries:
        p = subprocess.run(
            [sys.executable, "-c", CT2_CHILD, str(Path(__file__).resolve().parent), json.dumps(a)],
            capture_output=True,
            text=True,
            env={**env, **extra},
            timeout=max(60.0, 12 * args.seconds + 60),
        )
        for line in p.stdout.splitlines():
            if line.startswith("RESULT "):
                res = json.loads(line[7:])
                res["cublas"] = "CUDA 12 names linked to torch's cuBLAS" if extra else "as found"
                return res
        errors.append(f"{'with the cuBLAS 12 shim: ' if extra else ''}exit {p.returncode}: {p.stderr[-1500:]}")
    return {"error": "\n".join(errors)}


# -- the run -------------------------------------------------------------------------------------


def device_info(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        info.update(
            name=p.name,
            cuda=torch.version.cuda,
            sms=p.multi_processor_count,
            memory_gib=p.total_memory / 2**30,
            capability=f"{p.major}.{p.minor}",
            flash_sdp=torch.backends.cuda.flash_sdp_enabled(),
            mem_efficient_sdp=torch.backends.cuda.mem_efficient_sdp_enabled(),
        )
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    else:
        info["name"] = platform.processor() or platform.machine()
        info["threads"] = torch.get_num_threads()
    return info


def matmul_tflops(device: torch.device, n: int, dtype: torch.dtype, repeats: int = 10) -> float:
    """The measured matrix-product rate (random data, n x n x n, median of `repeats`)."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        sync(device)
        t = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t)
    del a, b
    free(device)
    return 2 * n**3 / statistics.median(times) / 1e12


def peak_for(name: str) -> float | None:
    for key, tflops in PEAK_BF16:
        if key in name:
            return tflops
    return None


def sdpa_paths(device: torch.device, c: ModelConfig) -> dict[str, str]:
    """Which SDPA kernels take aiayn's three attention calls at training shapes under bf16 (each alone):
    self-attention with a padding mask, the causal decoder self-attention, cross-attention."""
    if device.type != "cuda":
        return {}
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, T, h, d = 32, 40, c.n_heads, c.d_model // c.n_heads
    q = torch.randn(B, h, T, d, device=device, dtype=torch.bfloat16)
    mask = torch.ones(B, 1, 1, T, dtype=torch.bool, device=device)
    out = {}
    for what, kw in (("padding mask", {"attn_mask": mask}), ("causal", {"is_causal": True})):
        ok = []
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
            try:
                with sdpa_kernel(backend):
                    F.scaled_dot_product_attention(q, q, q, **kw)  # type: ignore[arg-type]
                ok.append(backend.name)
            except RuntimeError:
                pass
        out[what] = "first of: " + ", ".join(ok)
    return out


def profile_step(c: ModelConfig, device: torch.device, batches: list[tuple[Tensor, Tensor, Tensor]]) -> str:
    """The top CUDA kernels of a few aiayn bf16 updates (what to fix first)."""
    from torch.profiler import ProfilerActivity, profile

    model = Transformer(c).to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
    keeps = [(b[2].view(-1) != PAD_ID).nonzero().squeeze(1).to(device) for b in batches]
    on_dev = [tuple(t.to(device) for t in b) for b in batches]

    def step(i: int) -> None:
        src, tin, tout = on_dev[i]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(src, tin, keep=keeps[i])
        loss, _, n = label_smoothed_nll(logits, tout.view(-1).index_select(0, keeps[i]), 0.1, PAD_ID)
        opt.zero_grad(set_to_none=True)
        (loss / n).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for i in range(2):
        step(i)
    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(3):
            step(i % len(batches))
        sync(device)
    return str(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70))


def cases(args: argparse.Namespace) -> Iterator[tuple[str, str, str]]:
    """(shape, mode, engine) in run order: uncompiled first, compiled last (slow to start)."""
    for compiled in (False, True):
        for shape in args.shapes:
            for mode in args.modes:
                if mode.endswith("compile") != compiled:
                    continue
                for engine in args.compile_engines if compiled else args.engines:
                    yield shape, mode, engine


def summarise(r: dict[str, Any], peak: float | None) -> None:
    """Ratios, MFU and the goals, from the raw figures."""
    for row in r["train"].values():
        if "tokens_per_s" in row and peak:
            row["mfu"] = row["tokens_per_s"] * row["flops_per_token"] / (peak * 1e12)
    ratios: dict[str, float] = {}
    for key, row in r["train"].items():
        shape, mode, engine = key.split("/")
        if engine != "aiayn" or "tokens_per_s" not in row:
            continue
        for peer in ("hf", "torch"):
            other = r["train"].get(f"{shape}/{mode}/{peer}", {})
            if "tokens_per_s" in other:
                ratios[f"train {shape} {mode} aiayn/{peer}"] = row["tokens_per_s"] / other["tokens_per_s"]
                if "peak_mem_gib" in row and "peak_mem_gib" in other:
                    ratios[f"memory {shape} {mode} aiayn/{peer}"] = row["peak_mem_gib"] / other["peak_mem_gib"]
    dec = r.get("decode", {})
    for search in ("beam4", "greedy"):
        for mine in ("aiayn-float32", "aiayn-bfloat16"):
            for peer in ("ct2-float16", "ct2-float32"):
                a, b = dec.get(f"{mine}/{search}", {}), dec.get(f"{peer}/{search}", {})
                if "sentences_per_s" in a and "sentences_per_s" in b:
                    ratios[f"decode {search} {mine}/{peer}"] = a["sentences_per_s"] / b["sentences_per_s"]
    r["ratios"] = ratios
    base = r["train"].get("base/bf16-compile/aiayn", {})
    goals: dict[str, Any] = {}
    if "base bf16-compile aiayn/hf" in ratios:
        goals["train base bf16-compile aiayn/hf >= 1.3"] = ratios["base bf16-compile aiayn/hf"]
    if "mfu" in base:
        goals["MFU base bf16-compile >= 0.40"] = base["mfu"]
    if "memory base bf16-compile aiayn/hf" in ratios:
        goals["memory base bf16-compile aiayn/hf <= 1"] = ratios["memory base bf16-compile aiayn/hf"]
    best = max(
        (v for k, v in ratios.items() if k.startswith("decode beam4 aiayn") and k.endswith("/ct2-float16")),
        default=None,
    )
    if best is not None:
        goals["decode beam4 best aiayn/ct2-float16 >= 0.8"] = best
    r["goals"] = goals


def markdown(r: dict[str, Any]) -> str:
    info = r["device"]
    lines = [
        f"Device: {info.get('name')} (torch {info.get('torch')}, CUDA {info.get('cuda')}, "
        f"transformers {info.get('transformers', '-')}); bf16 peak {r.get('peak_tflops')} TFLOP/s "
        f"({r.get('peak_source')}), measured bf16 matrix product {r.get('matmul_bf16_tflops', 0):.0f} TFLOP/s; "
        f"whole run {r.get('wall_s', 0):.0f} s.",
        "",
        "| shape | mode | engine | tokens/s | s/update | peak GiB | MFU | warm-up s |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for key, row in r["train"].items():
        shape, mode, engine = key.split("/")
        if "tokens_per_s" not in row:
            lines.append(f"| {shape} | {mode} | {engine} | {row.get('skipped') or row.get('error', '')[:80]} |||||")
            continue
        mfu = f"{100 * row['mfu']:.1f} %" if "mfu" in row else "-"
        mem = f"{row['peak_mem_gib']:.1f}" if "peak_mem_gib" in row else "-"
        lines.append(
            f"| {shape} | {mode} | {engine} | {row['tokens_per_s']:,.0f} | {row['s_per_update']:.3f} | {mem} | {mfu} "
            f"| {row['warmup_s']:.1f} |"
        )
    lines += [
        "",
        f"| decoding ({r.get('decode_shape')}, batch {r['args']['decode_batch']}) | sentences/s |",
        "|---|---:|",
    ]
    for key, row in r.get("decode", {}).items():
        val = f"{row['sentences_per_s']:,.0f}" if "sentences_per_s" in row else str(row)[:100]
        lines.append(f"| {key} | {val} |")
    lines += ["", "| ratio | value |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in r.get("ratios", {}).items()]
    lines += ["", "| goal | measured |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in r.get("goals", {}).items()]
    return "\n".join(lines) + "\n"


def train_in_child(key: str, args: argparse.Namespace, timeout: float) -> dict[str, Any]:
    """One training case in a fresh process (this script with --case), cut off after `timeout` seconds."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--case", key, *args.argv]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"not done after {timeout:.0f} s (compilation included)") from None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            row = json.loads(line[7:])
            if os.environ.get("TORCH_LOGS"):  # what torch logged (recompiles, graph breaks)
                row["torch_logs"] = p.stderr[-6000:]
            return row
    raise RuntimeError(f"exit {p.returncode}: {p.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, seconds (what CI runs)")
    ap.add_argument("--out", type=Path, default=Path("gpu.json"))
    ap.add_argument("--md", type=Path, default=None, help="also write the tables as Markdown here")
    ap.add_argument("--shapes", default="base,big")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--tokens", type=int, default=25_000, help="target tokens per update (and about as many source)")
    ap.add_argument("--vocab", type=int, default=32_000)
    ap.add_argument("--seconds", type=float, default=5.0, help="timed work per measurement")
    ap.add_argument("--warmup", type=int, default=3, help="untimed updates first (compilation happens here)")
    ap.add_argument("--budget", type=float, default=380.0, help="no measurement starts after this many seconds")
    ap.add_argument("--decode-len", type=int, default=32)
    ap.add_argument("--decode-batch", type=int, default=64)
    ap.add_argument("--decode-batches", type=int, default=8)
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=None, help="the device's dense bf16 peak, TFLOP/s")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compile-min", type=float, default=60.0, help="a compiled case starts only with this much budget")
    ap.add_argument("--compile-grace", type=float, default=60.0, help="a compiled case may overrun the budget so much")
    ap.add_argument(
        "--pad-multiple", type=int, default=1, help="pad batch widths to a multiple of this (8: one compiled graph)"
    )
    ap.add_argument("--cudnn-sdp", action="store_true", help="keep SDPA's cuDNN kernel (torch's own default)")
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)  # shape/mode/engine: one case, JSON on stdout
    args = ap.parse_args(argv)
    args.argv = [a for a in (sys.argv[1:] if argv is None else argv)]
    start = time.perf_counter()
    compile_backend = "inductor"
    if args.smoke:  # tiny shapes on the CPU; compile through dynamo's eager backend (traces, no C++ build)
        args.shapes, args.tokens, args.vocab, args.seconds, args.warmup = "tiny", 600, 1000, 0.2, 1
        args.decode_len, args.decode_batch, args.decode_batches = 6, 8, 2
        compile_backend = "eager"
        device = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            print("no CUDA device: run with --smoke for the CPU check", file=sys.stderr)
            return 2
        device = torch.device("cuda")
        torch.backends.cuda.matmul.allow_tf32 = True  # what aiayn's trainer sets on CUDA (fp32 mode = TF32)
        torch.backends.cudnn.allow_tf32 = True
        if args.cudnn_sdp:
            os.environ["AIAYN_CUDNN_SDP"] = "1"  # children (compiled cases, CTranslate2) inherit it
        shape_free_attention(device)
    args.shapes, args.modes, args.engines = (s.split(",") for s in (args.shapes, args.modes, args.engines))
    if args.smoke:  # one compiled case is enough to keep that path from rotting
        args.compile_engines = ["aiayn"]
    else:
        args.compile_engines = args.engines
    if "hf" in args.engines:
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("transformers is not installed: HF Marian is left out", file=sys.stderr)
            args.engines.remove("hf")

    if args.case:
        shape, mode, engine = args.case.split("/")
        c = ModelConfig.preset(shape, args.vocab)
        bs = make_batches(6, args.tokens, args.vocab, 10, 60, args.seed, args.pad_multiple)
        row = train_case(engine, c, mode, bs, device, args.seconds, args.warmup, compile_backend)
        print("RESULT " + json.dumps(row))
        return 0
    r: dict[str, Any] = {"device": device_info(device), "args": {k: str(v) for k, v in vars(args).items()}}
    r["train"], r["decode"] = {}, {}
    if device.type == "cuda":
        r["matmul_bf16_tflops"] = matmul_tflops(device, 8192, torch.bfloat16)
    peak = args.peak_tflops or peak_for(r["device"].get("name", ""))
    r["peak_source"] = "--peak-tflops" if args.peak_tflops else ("datasheet" if peak else "measured matrix product")
    peak = peak or r.get("matmul_bf16_tflops")
    r["peak_tflops"] = peak

    def save() -> None:
        r["wall_s"] = time.perf_counter() - start
        summarise(r, peak)
        args.out.write_text(json.dumps(r, indent=1))
        if args.md:
            args.md.write_text(markdown(r))

    shapes = {s: ModelConfig.preset(s, args.vocab) for s in args.shapes}
    batches = {s: make_batches(6, args.tokens, args.vocab, 10, 60, args.seed, args.pad_multiple) for s in args.shapes}
    for s, c in shapes.items():  # average lengths of the real tokens, for the FLOP count
        bs = batches[s]
        src_tok = sum(int((b[0] != PAD_ID).sum()) for b in bs) / sum(b[0].size(0) for b in bs)
        tgt_tok = sum(int((b[2] != PAD_ID).sum()) for b in bs) / sum(b[2].size(0) for b in bs)
        r.setdefault("flops_per_token", {})[s] = flops_per_token(c, "train", src_tok, tgt_tok)
    r["sdpa"] = sdpa_paths(device, shapes[args.shapes[0]])
    save()

    def train(shape: str, mode: str, engine: str) -> None:
        key = f"{shape}/{mode}/{engine}"
        left = args.budget - (time.perf_counter() - start)
        compiled = mode.endswith("compile")
        if left < (args.compile_min if compiled else 5 * args.seconds):
            r["train"][key] = {"skipped": f"budget ({left:.0f} s left)"}
            save()
            return
        print(f"[{time.perf_counter() - start:5.0f} s] train {key}", flush=True)
        try:
            if compiled:  # in a process of its own: a compilation that runs long is cut off, not waited for
                row = train_in_child(key, args, left + args.compile_grace)
            else:
                row = train_case(
                    engine, shapes[shape], mode, batches[shape], device, args.seconds, args.warmup, compile_backend
                )
                free(device)
            row["flops_per_token"] = r["flops_per_token"][shape]
            r["train"][key] = row
            print(f"        {row['tokens_per_s']:,.0f} tokens/s", flush=True)
        except Exception as e:  # noqa: BLE001 - an out-of-memory or compile failure is a finding, not the end
            r["train"][key] = {"error": f"{type(e).__name__}: {str(e)[:2000]}"}
            print(f"        failed: {type(e).__name__}: {str(e)[-600:]}", flush=True)
            free(device)
        save()

    all_cases = list(cases(args))
    for shape, mode, engine in [x for x in all_cases if not x[1].endswith("compile")]:
        train(shape, mode, engine)
    if not args.no_decode:
        r["decode_shape"] = "base" if "base" in shapes else next(iter(shapes))
        c = shapes[r["decode_shape"]]
        print(f"[{time.perf_counter() - start:5.0f} s] decode", flush=True)
        for dtype in (torch.float32, torch.bfloat16):
            name = f"aiayn-{str(dtype).removeprefix('torch.')}"
            try:
                for search, row in torch_decode(c, dtype, device, args).items():
                    r["decode"][f"{name}/{search}"] = row
                free(device)
            except Exception as e:  # noqa: BLE001
                r["decode"][name] = {"error": f"{type(e).__name__}: {str(e)[:2000]}"}
            save()
        with tempfile.TemporaryDirectory() as tmp:
            ct2 = ct2_decode(c, device, args, Path(tmp))
        if "error" in ct2:
            r["decode"]["ct2"] = ct2
        else:
            r["decode"].update({k: v for k, v in ct2.items() if isinstance(v, dict)})
            r["decode"]["ct2-info"] = {k: v for k, v in ct2.items() if not isinstance(v, dict)}
        save()
    if device.type == "cuda" and not args.no_profile and "base" in shapes:
        try:
            (args.out.parent / (args.out.stem + "_profile.txt")).write_text(
                profile_step(shapes["base"], device, batches["base"])
            )
            free(device)
        except Exception as e:  # noqa: BLE001
            r["profile_error"] = str(e)[:1000]
    for shape, mode, engine in [x for x in all_cases if x[1].endswith("compile")]:
        train(shape, mode, engine)
    save()
    print(markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
