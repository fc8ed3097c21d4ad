"""Pre-packed weights for the decoder's linear layers on CPU (issue 26): F.linear against torch's packed ops.

    python bench/packed_linear.py                       # small and base shapes, 1 and 2 threads
    python bench/packed_linear.py --sizes small --threads 1 --rounds 5

CTranslate2 packs its float32 weights once (cblas_sgemm_pack) and multiplies with cblas_sgemm_compute;
torch's F.linear calls MKL sgemm on the plain row-major weight every step. torch 2.x carries the
packed paths inductor's CPU freezing uses; this script times them on the shapes of one decoder step:

  F.linear      torch.nn.functional.linear(x, W, b) (MKL sgemm; what aiayn runs)
  transposed    torch.addmm(b, x, Wt) (x @ Wt without bias), Wt = W.t().contiguous() made once: plain
                sgemm again, on the (in, out) layout instead of the (out, in) one nn.Linear stores
  mkl-packed    torch.ops.mkl._mkl_linear(x, P, W, b, M), P = torch.ops.mkl._mkl_reorder_linear_weight(W, M)
                (MKL cblas_sgemm_pack / cblas_sgemm_compute; any other row count falls back to W)
  aiayn-packed  the op of aiayn.model.cpu_layout.PackedLinear, called bare like the others: W packed
                once for PACK_ROWS rows and multiplied with the actual row count, so one pack serves
                every M (Translator.load(..., packed=True))
  onednn-packed torch.ops.mkldnn._linear_pointwise(x, P, b, "none", [], ""),
                P = torch.ops.mkldnn._reorder_linear_weight(W, M) (oneDNN inner product, weight in its
                blocked layout)
  onednn-tensor torch._C._nn.mkldnn_linear on x.to_mkldnn(), W.to_mkldnn(), b.to_mkldnn(), then .to_dense()

Rows M: 64 (greedy, 64 sentences) and 256 (beam 4, 64 sentences). Per size, the shapes of one decoder
layer's step (self-attention [W^Q|W^K|W^V] and W^O, cross-attention W^Q and W^O, FFN W1 and W2) and
the pre-softmax projection (vocab 8000, no bias, as in bench/throughput.py). Variants alternate
round by round; each figure is the median over rounds of the mean time per call, the ratio is
F.linear / variant (> 1: the variant is faster). Also the largest |difference| from F.linear and
whether the outputs are bitwise equal.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.config import ModelConfig
from aiayn.model.cpu_layout import pack_linear

VOCAB = 8000


def step_shapes(size: str) -> list[tuple[str, int, int, bool, int]]:
    """(name, out_features, in_features, has_bias, calls per decoder step) for one decoder step."""
    c = ModelConfig.preset(size, VOCAB)
    d, f, L = c.d_model, c.d_ff, c.n_decoder_layers
    return [
        ("self qkv", 3 * d, d, True, L),
        ("W^O (self, cross)", d, d, True, 2 * L),
        ("cross W^Q", d, d, True, L),
        ("FFN W1", f, d, True, L),
        ("FFN W2", d, f, True, L),
        ("generator", VOCAB, d, False, 1),
    ]


def variants(w: Tensor, b: Tensor | None, M: int) -> dict[str, Callable[[Tensor], Tensor]]:
    out: dict[str, Callable[[Tensor], Tensor]] = {"F.linear": lambda x: F.linear(x, w, b)}
    wt = w.t().contiguous()
    out["transposed"] = (lambda x: x @ wt) if b is None else (lambda x: torch.addmm(b, x, wt))
    try:
        mkl_w = torch.ops.mkl._mkl_reorder_linear_weight(w, M)
        out["mkl-packed"] = lambda x: torch.ops.mkl._mkl_linear(x, mkl_w, w, b, M)
    except (AttributeError, RuntimeError) as e:
        print(f"    mkl-packed unavailable: {e}")
    lin = torch.nn.Linear(w.size(1), w.size(0), bias=b is not None)
    with torch.no_grad():
        lin.weight.copy_(w)
        if b is not None:
            lin.bias.copy_(b)
    if (layer := pack_linear(lin)) is not None:  # its op called bare, as the other variants are (no module)
        packed = layer.packed
        out["aiayn-packed"] = lambda x: torch.ops.mkl._mkl_linear(x, packed, w, b, x.size(0))
    else:
        print("    aiayn-packed unavailable (no MKL packed GEMM in this torch build)")
    try:
        dnn_w = torch.ops.mkldnn._reorder_linear_weight(w, M)
        out["onednn-packed"] = lambda x: torch.ops.mkldnn._linear_pointwise(x, dnn_w, b, "none", [], "")
    except (AttributeError, RuntimeError) as e:
        print(f"    onednn-packed unavailable: {e}")
    try:
        tw = w.to_mkldnn()
        tb = None if b is None else b.to_mkldnn()
        out["onednn-tensor"] = lambda x: torch._C._nn.mkldnn_linear(x.to_mkldnn(), tw, tb).to_dense()
    except (AttributeError, RuntimeError) as e:
        print(f"    onednn-tensor unavailable: {e}")
    return out


def time_calls(fn: Callable[[Tensor], Tensor], x: Tensor, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter() - t) / calls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="small,base")
    p.add_argument("--rows", default="64,256", help="M: 64 greedy, 256 beam 4 (64 sentences)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--min-seconds", type=float, default=0.02, help="time per variant per round and shape")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}")
    with torch.inference_mode():
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            for size in args.sizes.split(","):
                for M in (int(m) for m in args.rows.split(",")):
                    print(f"\n== {size}, M={M}, {threads} thread(s)")
                    step: dict[str, float] = {}
                    for name, n, k, bias, count in step_shapes(size):
                        w = torch.randn(n, k) * k**-0.5
                        b = torch.randn(n) * 0.1 if bias else None
                        x = torch.randn(M, k)
                        fns = variants(w, b, M)
                        ref = fns["F.linear"](x)
                        diff = {}
                        for v, fn in fns.items():
                            y = fn(x)
                            diff[v] = (float((y - ref).abs().max()), bool(torch.equal(y, ref)))
                        t0 = time.perf_counter()  # calls per round so one round lasts ~min_seconds
                        for _ in range(5):
                            ref = fns["F.linear"](x)
                        calls = max(3, int(args.min_seconds / ((time.perf_counter() - t0) / 5)))
                        times: dict[str, list[float]] = {v: [] for v in fns}
                        for r in range(args.rounds):
                            names = list(fns)
                            for v in names[r % len(names) :] + names[: r % len(names)]:
                                times[v].append(time_calls(fns[v], x, calls))
                        base = statistics.median(times["F.linear"])
                        cells = []
                        for v in fns:
                            med = statistics.median(times[v])
                            step[v] = step.get(v, 0.0) + count * med
                            d, eq = diff[v]
                            cells.append(
                                f"{v} {med * 1e6:7.1f} us x{base / med:4.2f}"
                                + ("" if v == "F.linear" else f" (max|d| {d:.1e}{', bitwise' if eq else ''})")
                            )
                        print(f"  {name:18s} {n:5d}x{k:<5d} x{count}: " + "; ".join(cells))
                    ref_step = step["F.linear"]
                    print(
                        "  one decoder step's products: "
                        + "; ".join(f"{v} {s * 1e3:.2f} ms (x{ref_step / s:.2f})" for v, s in step.items())
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
