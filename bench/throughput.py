"""Synthetic throughput: training and decoding of random-weight models side by side with peers. For what a
user's own trained model decodes at, use bench/translate.py (whole files, one process per engine).

    python bench/throughput.py                          # small size, all peers, 3 repeats, 2 threads
    python bench/throughput.py --size base --repeats 3 --train-batches 1
    python bench/throughput.py --peers torch,hf --tasks train --no-memory

Engines (same shape: layers, d_model, heads, d_ff, vocab 8000; post-LN; ReLU; tied embeddings):
  aiayn      aiayn.model.Transformer; decoding with aiayn.decode.greedy_search / beam_search
  aiayn-int8 the same model through aiayn.model.int8.quantize_int8 (int8 weights per output row, dynamic
             int8 activations), decoding only; compared with ct2-int8 (its ratio aiayn-int8/ct2-int8)
  torch      torch.nn.Transformer + embeddings + sinusoidal positions + output projection (training only:
             it has no incremental decoder)
  hf         transformers.MarianMTModel from a random MarianConfig (activation relu); generate()
  ct2        CTranslate2 translate_batch on OUR model exported by aiayn.export (identical weights),
             float32 and int8 compute types

Inputs are identical for every engine: fixed seed, batches of 64 pairs, source and target lengths
uniform in 20..30 (EOS included), ids uniform over the 8k vocabulary, right padding.

Training: target tokens/s (non-pad tgt_out tokens) for forward + label-smoothed (0.1) cross-entropy + backward
+ fused Adam step, dropout 0.1 as in the presets; aiayn uses its trainer's loss
(aiayn.train.loss.label_smoothed_nll), the peers F.cross_entropy(label_smoothing=0.1). Decoding: every engine
runs exactly --decode-len decoder steps per sentence (EOS banned before, forced/stopped at that length: min =
max length on HF and CT2, an EOS-banning wrapper + max_len on aiayn), because untrained random models either
stop at once or run to the length limit at random; the work per step is then the same everywhere. Reported as
target tokens/s (decode-len x sentences / s) and sentences/s.

Repeats alternate engines (the order rotates each repeat) so a load change on the shared machine hits everyone
alike (they alternate batch by batch); each figure is the median over repeats, and each ratio aiayn/peer is
the median of the per-repeat ratios. Process CPU time is recorded beside wall time (tokens_per_cpu_s,
cpu_ratios): on a shared machine it is less sensitive to other jobs. Peak memory: each (engine, task) runs
once more in a fresh subprocess; the figure is the growth of resident memory over the process's RSS just
before the work (peak VmHWM, reset through /proc/self/clear_refs, minus VmRSS): activations, gradients, Adam
state, caches, allocator slack. torch's CPU allocator is plain malloc, so tracemalloc does not see it.

CTranslate2 in the same process slows torch down: once it has decoded, torch's small parallel ops run
several times slower for as long as its translator lives (its OpenMP calls land in torch's runtime from
a thread of its own: docs/benchmarks.md), so the aiayn engines' decoding figures here are low whenever
the ct2 peers run beside them (the ct2 figures are not affected): the ratios printed against ct2 carry
no verdict. Engines are compared one process each by bench/translate.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig
from aiayn.model import Transformer
from aiayn.train.loss import label_smoothed_nll

VOCAB, BATCH, MIN_LEN, MAX_LEN = 8000, 64, 20, 30
TRAIN_ENGINES = ["aiayn", "torch", "hf"]
DECODE_ENGINES = ["aiayn", "aiayn-int8", "hf", "ct2-float32", "ct2-int8"]
# + our int8 decoder beside CT2's
PEERS = {"torch": ["torch"], "hf": ["hf"], "ct2": ["ct2-float32", "ct2-int8", "aiayn-int8"]}
GOALS = {  # ratio aiayn / peer that must hold on CPU
    ("train", "hf"): 1.3,
    ("train", "torch"): 1.0,
    ("beam", "hf"): 3.0,
}  # decoding against CTranslate2: bench/translate.py, see above
INT8 = ("aiayn-int8", "ct2-int8")  # compared with each other, not with float32 aiayn


# -- inputs --------------------------------------------------------------------------------------


def make_batches(n: int, seed: int) -> list[tuple[Tensor, Tensor, Tensor]]:
    """n batches of (src, tgt_in, tgt_out): 64 pairs, lengths 20..30 with EOS, right padded."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        S = torch.randint(MIN_LEN, MAX_LEN + 1, (BATCH,), generator=g)
        T = torch.randint(MIN_LEN, MAX_LEN + 1, (BATCH,), generator=g)
        src = torch.full((BATCH, int(S.max())), PAD_ID)
        tin, tout = torch.full((BATCH, int(T.max())), PAD_ID), torch.full((BATCH, int(T.max())), PAD_ID)
        for i, (s, t) in enumerate(zip(S.tolist(), T.tolist())):
            src[i, : s - 1] = torch.randint(4, VOCAB, (s - 1,), generator=g)
            src[i, s - 1] = EOS_ID
            y = torch.randint(4, VOCAB, (t - 1,), generator=g)
            tin[i, 0], tin[i, 1:t] = BOS_ID, y
            tout[i, : t - 1], tout[i, t - 1] = y, EOS_ID
        out.append((src, tin, tout))
    return out


# -- peers ---------------------------------------------------------------------------------------


class TorchSeq2Seq(nn.Module):
    """torch.nn.Transformer with tied embeddings x sqrt(d), sinusoidal positions and a projection."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        from aiayn.model.embedding import sinusoidal_table

        self.c = c
        self.emb = nn.Embedding(c.vocab_size, c.d_model, padding_idx=PAD_ID)
        nn.init.normal_(self.emb.weight, 0.0, c.d_model**-0.5)
        self.register_buffer("pe", sinusoidal_table(c.max_positions, c.d_model), persistent=False)
        self.drop = nn.Dropout(c.dropout)
        self.tf = nn.Transformer(
            c.d_model,
            c.n_heads,
            c.n_encoder_layers,
            c.n_decoder_layers,
            c.d_ff,
            c.dropout,
            batch_first=True,
            norm_first=c.norm == "pre",
        )
        self.proj = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.proj.weight = self.emb.weight

    def embed(self, ids: Tensor) -> Tensor:
        return self.drop(self.emb(ids) * math.sqrt(self.c.d_model) + self.pe[: ids.size(1)])

    def forward(self, src: Tensor, tin: Tensor) -> Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tin.size(1), device=tin.device, dtype=torch.bool)
        h = self.tf(
            self.embed(src),
            self.embed(tin),
            tgt_mask=causal,
            src_key_padding_mask=src == PAD_ID,
            tgt_key_padding_mask=tin == PAD_ID,
            memory_key_padding_mask=src == PAD_ID,
            tgt_is_causal=True,
        )
        return self.proj(h)


def marian(c: ModelConfig) -> nn.Module:
    from transformers import MarianConfig, MarianMTModel

    cfg = MarianConfig(
        vocab_size=c.vocab_size,
        d_model=c.d_model,
        encoder_layers=c.n_encoder_layers,
        decoder_layers=c.n_decoder_layers,
        encoder_attention_heads=c.n_heads,
        decoder_attention_heads=c.n_heads,
        encoder_ffn_dim=c.d_ff,
        decoder_ffn_dim=c.d_ff,
        activation_function="relu",
        dropout=c.dropout,
        attention_dropout=0.0,
        activation_dropout=0.0,
        max_position_embeddings=c.max_positions,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        bos_token_id=BOS_ID,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
    )
    return MarianMTModel(cfg)


class BanEOS:
    """Wraps our model for decoding so EOS is not chosen before step `last` (where the search forces it)."""

    def __init__(self, model: Transformer, last: int) -> None:
        self.model, self.config, self.last = model, model.config, last

    def encode(self, src: Tensor) -> Tensor:
        return self.model.encode(src)

    def init_cache(self, memory: Tensor, src_mask: Tensor, capacity: int = 64) -> Any:
        return self.model.init_cache(memory, src_mask, capacity)

    def step(self, ids: Tensor, cache: Any) -> tuple[Tensor, Any]:
        step = cache.length  # 0-based index of the position being predicted
        logits, cache = self.model.step(ids, cache)
        if step < self.last:
            logits[..., EOS_ID] = float("-inf")
        return logits, cache


# -- measured work -------------------------------------------------------------------------------


def build_train(engine: str, c: ModelConfig, seed: int) -> Callable[[tuple[Tensor, ...]], None]:
    torch.manual_seed(seed)
    if engine == "aiayn":
        model: nn.Module = Transformer(c)
        fwd = lambda src, tin: model(src, tin)  # noqa: E731
    elif engine == "torch":
        model = TorchSeq2Seq(c)
        fwd = lambda src, tin: model(src, tin)  # noqa: E731
    elif engine == "hf":
        model = marian(c)

        def fwd(src: torch.Tensor, tin: torch.Tensor) -> torch.Tensor:
            return model(
                input_ids=src,
                attention_mask=src != PAD_ID,
                decoder_input_ids=tin,
                decoder_attention_mask=tin != PAD_ID,
                use_cache=False,
            ).logits

    else:
        raise ValueError(engine)
    model.train()
    # fused Adam for every engine (the single-kernel CPU step aiayn's trainer uses; a peer's user can
    # turn it on too), so only model and loss differ
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)

    def step(batch: tuple[Tensor, ...]) -> None:
        src, tin, tout = batch
        if engine == "aiayn":  # the paper's label smoothing 0.1, each engine with its own loss, as its trainer
            keep = (tout.view(-1) != PAD_ID).nonzero().squeeze(1)  # projects non-pad positions only
            loss_sum, _, n = label_smoothed_nll(model(src, tin, keep=keep), tout.view(-1)[keep], 0.1, PAD_ID)
            loss = loss_sum / n
        else:
            logits = fwd(src, tin)  # (B, T, V)
            loss = F.cross_entropy(
                logits.reshape(-1, logits.size(-1)), tout.reshape(-1), ignore_index=PAD_ID, label_smoothing=0.1
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step.params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())  # type: ignore[attr-defined]
    return step


def build_decode(
    engine: str, c: ModelConfig, seed: int, beam: int, length: int, threads: int, workdir: Path
) -> Callable[[Tensor], list[int]]:
    """A function src (B, S) -> output lengths; every engine runs `length` decoder steps."""
    torch.manual_seed(seed)
    if engine in ("aiayn", "aiayn-int8"):
        from aiayn.decode import beam_search, greedy_search

        net: nn.Module = Transformer(c).eval()
        if engine == "aiayn-int8":
            from aiayn.model.int8 import quantize_int8

            net = quantize_int8(net)
        model = BanEOS(net, last=length - 1)  # type: ignore[arg-type]  # a quantized copy decodes alike

        def run(src: Tensor) -> list[int]:
            if beam == 1:  # length-1 tokens + the forced EOS = `length` steps
                return [len(h) + 1 for h in greedy_search(model, src, max_len_a=0.0, max_len_b=length - 1)]
            hyps = beam_search(model, src, beam=beam, length_penalty=0.6, max_len_a=0.0, max_len_b=length - 1)
            return [len(h[0][0]) + 1 for h in hyps]

        return run
    if engine == "hf":
        hf = marian(c).eval()

        @torch.inference_mode()
        def run(src: Tensor) -> list[int]:
            out = hf.generate(
                input_ids=src,
                attention_mask=src != PAD_ID,
                num_beams=beam,
                do_sample=False,
                max_new_tokens=length,
                min_new_tokens=length,
                **({"length_penalty": 0.6, "early_stopping": False} if beam > 1 else {}),
            )
            # out: (B, 1 + length), the decoder start + the new tokens
            return [out.size(1) - 1] * out.size(0)

        return run
    if engine.startswith("ct2-"):
        import ctranslate2

        from aiayn.export import save_ctranslate2

        vocab = ["<pad>", "<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(4, c.vocab_size)]
        out_dir = workdir / f"ct2-{c.d_model}-{c.n_encoder_layers}-{seed}"
        if not (out_dir / "model.bin").exists():
            save_ctranslate2(Transformer(c), vocab, out_dir, force=True)  # same weights as aiayn (same seed)
        tr = ctranslate2.Translator(
            str(out_dir), device="cpu", compute_type=engine[4:], intra_threads=threads, inter_threads=1
        )

        def run(src: Tensor) -> list[int]:
            tokens = [[vocab[i] for i in row if i > EOS_ID] for row in src.tolist()]  # CT2 appends EOS
            res = tr.translate_batch(
                tokens,
                beam_size=beam,
                length_penalty=0.6,
                max_decoding_length=length,
                min_decoding_length=length,
                max_batch_size=0,
            )
            return [len(r.hypotheses[0]) for r in res]

        return run
    raise ValueError(engine)


# -- measurement ---------------------------------------------------------------------------------


def flops_per_token(c: ModelConfig, task: str, src_len: float, tgt_len: float, beam: int = 4) -> float:
    """Model FLOPs per target token (2 per multiply-add; useful work, padding not counted).

    Encoder per source token: 4 d^2 (W^Q,K,V,O) + 2 d d_ff + attention 2 S d, and the decoder's cross
    K/V projections 2 d^2 per decoder layer. Decoder per target token: 6 d^2 (self Q,K,V,O, cross Q,O)
    + 2 d d_ff + attention 2 (T + S) d per layer, then d V for the vocabulary projection. Training is
    3x the forward pass (backward = 2x forward, the usual 6 N D). Decoding runs the decoder once per
    beam row per step (attention over the t tokens so far, T/2 on average) and the encoder once.
    """
    d, f, V = c.d_model, c.d_ff, c.vocab_size
    enc_tok = c.n_encoder_layers * (4 * d * d + 2 * d * f + 2 * src_len * d) + c.n_decoder_layers * 2 * d * d
    if task == "train":
        dec_tok = c.n_decoder_layers * (6 * d * d + 2 * d * f + 2 * (tgt_len + src_len) * d) + d * V
        return 2 * 3 * (dec_tok + enc_tok * src_len / tgt_len)
    rows = beam if task == "beam" else 1
    dec_row = c.n_decoder_layers * (6 * d * d + 2 * d * f + 2 * (tgt_len / 2 + src_len) * d) + d * V
    return 2 * (rows * dec_row + enc_tok * src_len / tgt_len)


def gemm_ceiling(threads: int, n: int = 1024, repeats: int = 20) -> float:
    """GFLOP/s of torch's float32 matrix product (n x n x n) at `threads`: the CPU's practical peak."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


def rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def memory_probe(args: argparse.Namespace) -> dict[str, float]:
    """Subprocess body: build one engine, then peak RSS growth over one measured unit of work."""
    torch.set_num_threads(args.threads)
    c = ModelConfig.preset(args.size, VOCAB)
    task, engine = args.probe
    with tempfile.TemporaryDirectory() as tmp:
        if task == "train":
            step = build_train(engine, c, args.seed)
            batch = make_batches(1, args.seed)[0]
            work = lambda: step(batch)  # noqa: E731
        else:
            run = build_decode(
                engine, c, args.seed, 4 if task == "beam" else 1, args.decode_len, args.threads, Path(tmp)
            )
            src = make_batches(1, args.seed + 1)[0][0]
            run(src[:2])  # lazy one-time initialisation (thread pools, kernels) outside the measurement
            work = lambda: run(src)  # noqa: E731
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM (Linux >= 4.0)
        base = rss_kb("VmRSS")
        work()
        peak = rss_kb("VmHWM")
    return {"peak_rss_mb": peak / 1024, "growth_mb": (peak - base) / 1024}


def put_ratio(
    res: dict[str, Any], runs: dict[str, list[float]], cpu: dict[str, list[float]], row: str, mine: str, peer: str
) -> None:
    """On `row`: the throughput ratio mine / peer, the median over repeats of peer's seconds / mine's."""
    res.setdefault("ratios", {})[row] = statistics.median(b / a for a, b in zip(runs[mine], runs[peer]))
    res.setdefault("cpu_ratios", {})[row] = statistics.median(b / a for a, b in zip(cpu[mine], cpu[peer]))
    res.setdefault("ratio_of", {})[row] = mine


def measure(args: argparse.Namespace, size: str) -> dict[str, Any]:
    c = ModelConfig.preset(size, VOCAB)
    peers = [e for p in args.peers for e in PEERS[p]]
    result: dict[str, Any] = {"config": c.to_dict(), "gemm_gflops": gemm_ceiling(args.threads)}
    tmp = tempfile.TemporaryDirectory()
    workdir = Path(tmp.name)

    for task in args.tasks:
        engines = ["aiayn"] + [e for e in (TRAIN_ENGINES if task == "train" else DECODE_ENGINES) if e in peers]
        if task == "train":
            batches = make_batches(args.train_batches, args.seed)
            tokens = sum(int((b[2] != PAD_ID).sum()) for b in batches)
            fns = {e: build_train(e, c, args.seed) for e in engines}
            result["params"] = {e: fns[e].params for e in engines}  # type: ignore[attr-defined]
            for e in engines:  # warm-up: allocator, Adam state, lazy init
                fns[e](batches[0])
            units, per = tokens, None
            pairs = BATCH * len(batches)
            src_len = sum(int((b[0] != PAD_ID).sum()) for b in batches) / pairs
            result.setdefault("flops_per_token", {})[task] = flops_per_token(c, task, src_len, tokens / pairs)
        else:
            beam = 4 if task == "beam" else 1
            batches = [b[0] for b in make_batches(args.decode_batches, args.seed + 1)]
            fns = {e: build_decode(e, c, args.seed, beam, args.decode_len, args.threads, workdir) for e in engines}
            for e in engines:  # warm-up, and check every engine really runs decode_len steps
                lengths = fns[e](batches[0])
                if set(lengths) != {args.decode_len}:
                    raise RuntimeError(f"{e} {task}: output lengths {sorted(set(lengths))} != {args.decode_len}")
            units, per = args.decode_len * BATCH * len(batches), BATCH * len(batches)
            src_len = sum(int((b != PAD_ID).sum()) for b in batches) / per
            result.setdefault("flops_per_token", {})[task] = flops_per_token(c, task, src_len, args.decode_len, beam)
        runs: dict[str, list[float]] = {e: [] for e in engines}
        cpu: dict[str, list[float]] = {e: [] for e in engines}
        for r in range(args.repeats):
            order = engines[r % len(engines) :] + engines[: r % len(engines)]
            wall, proc = dict.fromkeys(engines, 0.0), dict.fromkeys(engines, 0.0)
            for b in batches:  # engines alternate batch by batch: load changes hit all alike
                for e in order:
                    w, c0 = time.perf_counter(), time.process_time()
                    fns[e](b)
                    wall[e] += time.perf_counter() - w
                    proc[e] += time.process_time() - c0
            for e in engines:
                runs[e].append(wall[e])
                cpu[e].append(proc[e])
            print(
                f"  {size} {task} repeat {r + 1}: "
                + ", ".join(f"{e} {units / runs[e][-1]:,.0f} tok/s" for e in engines),
                flush=True,
            )
        res: dict[str, Any] = {}
        for e in engines:
            secs = runs[e]
            res[e] = {
                "seconds": secs,
                "cpu_seconds": cpu[e],
                "tokens_per_s": statistics.median(units / s for s in secs),
                "tokens_per_cpu_s": statistics.median(units / s for s in cpu[e]),
            }
            if per:
                res[e]["sentences_per_s"] = statistics.median(per / s for s in secs)
        for e in engines[1:]:  # aiayn / peer on the peer's row
            if e != INT8[0]:
                mine = INT8[0] if e == INT8[1] and INT8[0] in engines else "aiayn"  # int8 against int8
                put_ratio(res, runs, cpu, e, mine, e)
        result[task] = res
        del fns

    if args.memory:
        mem: dict[str, Any] = {}
        for task in args.tasks:
            for e in ["aiayn"] + [e for e in (TRAIN_ENGINES if task == "train" else DECODE_ENGINES) if e in peers]:
                cmd = [
                    sys.executable,
                    __file__,
                    "--size",
                    size,
                    "--threads",
                    str(args.threads),
                    "--seed",
                    str(args.seed),
                    "--decode-len",
                    str(args.decode_len),
                    "--probe",
                    task,
                    e,
                ]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                mem.setdefault(task, {})[e] = json.loads(out.strip().splitlines()[-1])
        result["memory"] = mem
    tmp.cleanup()
    return result


def report(size: str, r: dict[str, Any]) -> None:
    print(
        f"\n== {size}: "
        + ", ".join(f"{e} {n / 1e6:.2f}M params" for e, n in r.get("params", {}).items())
        + f"; float32 GEMM {r['gemm_gflops']:.0f} GFLOP/s"
    )
    for task in ("train", "greedy", "beam"):
        if task not in r:
            continue
        t = r[task]
        for e, v in t.items():
            if e in ("ratios", "cpu_ratios", "ratio_of"):
                continue
            sent = f"  {v['sentences_per_s']:8.1f} sent/s" if "sentences_per_s" in v else ""
            ratio = t.get("ratios", {}).get(e)
            cr = t.get("cpu_ratios", {}).get(e)
            mine = t.get("ratio_of", {}).get(e, "aiayn")
            goal = GOALS.get((task, e))
            rs = (
                ""
                if ratio is None
                else f"  {mine}/{e} = {ratio:.2f}x (cpu-time {cr:.2f}x)"
                + ("" if goal is None else f" (goal >= {goal}x: {'met' if ratio >= goal else 'NOT met'})")
            )
            mem = r.get("memory", {}).get(task, {}).get(e)
            ms = "" if mem is None else f"  +{mem['growth_mb']:.0f} MB (peak RSS {mem['peak_rss_mb']:.0f} MB)"
            fl = r.get("flops_per_token", {}).get(task)
            gf = (
                ""
                if fl is None
                else f"  {v['tokens_per_s'] * fl / 1e9:5.0f} GFLOP/s "
                f"({v['tokens_per_s'] * fl / 1e9 / r['gemm_gflops']:.0%} of GEMM)"
            )
            print(f"  {task:6s} {e:12s} {v['tokens_per_s']:9,.0f} tok/s{sent}{gf}{ms}{rs}")
        if (fl := r.get("flops_per_token", {}).get(task)) is not None:
            bound = r["gemm_gflops"] * 1e9 / fl
            print(
                f"  {task:6s} ceiling: {fl / 1e6:.1f} MFLOP per token at {r['gemm_gflops']:.0f} GFLOP/s (n=1024 "
                f"GEMM) = {bound:,.0f} tok/s if nothing but GEMMs at full speed ran"
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="small", help="small | base | big | tiny, or comma-separated (default small)")
    p.add_argument("--peers", default="torch,hf,ct2", help="comma-separated subset of torch, hf, ct2")
    p.add_argument("--tasks", default="train,greedy,beam", help="comma-separated subset of train, greedy, beam")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--train-batches", type=int, default=2, help="timed training steps per repeat")
    p.add_argument("--decode-batches", type=int, default=1, help="timed 64-sentence batches per repeat")
    p.add_argument("--decode-len", type=int, default=25, help="decoder steps per sentence (default 25)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory subprocesses")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/throughput-SIZE.json)")
    p.add_argument("--probe", nargs=2, metavar=("TASK", "ENGINE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.probe:
        args.size = args.size.split(",")[0]
        print(json.dumps(memory_probe(args)))
        return 0
    args.peers = [x for x in args.peers.split(",") if x]
    args.tasks = [x for x in args.tasks.split(",") if x]
    if unknown := set(args.peers) - set(PEERS):
        p.error(f"unknown peers {sorted(unknown)}")
    if unknown := set(args.tasks) - {"train", "greedy", "beam"}:
        p.error(f"unknown tasks {sorted(unknown)}")
    torch.set_num_threads(args.threads)
    versions = {"torch": torch.__version__}
    for mod in ("transformers", "ctranslate2"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            pass
    for size in args.size.split(","):
        meta = {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "size": size,
            "machine": platform.processor() or platform.machine(),
            "cpu": _cpu_name(),
            "threads": args.threads,
            "versions": versions,
            "load_before": os.getloadavg(),
            "args": {k: v for k, v in vars(args).items() if k != "probe"},
        }
        print(f"{size}: threads {args.threads}, load {meta['load_before'][0]:.2f}", flush=True)
        r = measure(args, size)
        meta["load_after"] = os.getloadavg()
        report(size, r)
        out = Path(args.out or Path(__file__).parent / "results" / f"throughput-{size}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"meta": meta, **r}, indent=1) + "\n")
        print(f"wrote {out}")
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    raise SystemExit(main())
