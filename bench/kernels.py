"""The two kernels the paper's choices rest on, each against its plain PyTorch peer.

    python bench/kernels.py loss [--n 4096] [--vocab 8000] [--threads 2] [--repeats 20]
    python bench/kernels.py attention [--n 512 2048 8192] [--window 64] [--threads 2]

loss: forward + backward of the label-smoothed loss (§5.4) on (N, V) logits. aiayn's
  `label_smoothed_nll` (hand-written forward/backward on log_softmax) against
  F.cross_entropy(label_smoothing=0.1, ignore_index=pad, reduction="sum") through autograd; the two
  alternate call by call, each figure the median over repeats, the ratio the median of per-repeat ratios.
attention: restricted self-attention (Table 1, neighbourhood r = --window) against full attention:
  time and peak memory of one call (B=1, h=8, d_k=64, forward, float32) at each n, each in a fresh
  process. Methods: `windowed` (the blocked O(n r) kernel), `band-mask` (SDPA with the n x n band
  mask: what restricting full attention by a mask costs) and `full` (SDPA, no mask: O(n^2)).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

ATTENTION_CHILD = r"""
import json, resource, sys, time, torch
n, r, method, threads = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
torch.set_num_threads(threads)
import torch.nn.functional as F
from aiayn.model.attention import windowed_attention
from aiayn.model.masks import band_mask
q, k, v = (torch.randn(1, 8, n, 64) for _ in range(3))
def run():
    if method == "windowed":
        return windowed_attention(q, k, v, r, causal=False)
    if method == "band-mask":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=band_mask(n, n, r))
    return F.scaled_dot_product_attention(q, k, v)
run()
times = []
for _ in range(5):
    t = time.perf_counter(); run(); times.append(time.perf_counter() - t)
print(json.dumps({"n": n, "window": r, "method": method, "ms": round(1000 * min(times), 2),
                  "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
"""


def loss(a: argparse.Namespace) -> None:
    import torch
    import torch.nn.functional as F

    from aiayn.train.loss import label_smoothed_nll

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    logits = torch.randn(a.n, a.vocab, requires_grad=True)
    target = torch.randint(1, a.vocab, (a.n,))
    target[: a.n // 10] = 0  # some padding

    def ours() -> None:
        label_smoothed_nll(logits, target, 0.1, 0)[0].backward()

    def peer() -> None:
        F.cross_entropy(logits, target, ignore_index=0, label_smoothing=0.1, reduction="sum").backward()

    times: dict[str, list[float]] = {"aiayn": [], "F.cross_entropy": []}
    for i in range(a.repeats + 2):
        for name, fn in (("aiayn", ours), ("F.cross_entropy", peer)):
            t = time.perf_counter()
            fn()
            logits.grad = None
            if i >= 2:  # the first two are warm-up
                times[name].append(time.perf_counter() - t)
    ratio = statistics.median(p / o for o, p in zip(times["aiayn"], times["F.cross_entropy"]))
    for name, ts in times.items():
        print(f"{name:16s} {1000 * statistics.median(ts):7.1f} ms  (N {a.n}, V {a.vocab}, {a.threads} threads)")
    print(json.dumps({"kernel": "loss", "n": a.n, "vocab": a.vocab, "threads": a.threads, "peer_over_aiayn": ratio}))
    print(f"F.cross_entropy / aiayn: {ratio:.2f}x")


def attention(a: argparse.Namespace) -> None:
    rows = []
    for n in a.n:
        for method in ("windowed", "band-mask", "full"):
            out = subprocess.run(
                [sys.executable, "-c", ATTENTION_CHILD, str(n), str(a.window), method, str(a.threads)],
                capture_output=True,
                text=True,
            )
            row = (
                json.loads(out.stdout)
                if out.returncode == 0
                else {"n": n, "method": method, "error": out.stderr.strip()[-200:]}
            )
            rows.append(row)
            print(json.dumps(row), flush=True)
    by = {(r["n"], r["method"]): r for r in rows if "ms" in r}
    for n in a.n:
        if (n, "windowed") in by and (n, "full") in by:
            w, f = by[n, "windowed"], by[n, "full"]
            print(
                f"n={n}: windowed {w['ms']} ms / {w['peak_mb']} MB peak RSS; full {f['ms']} ms / {f['peak_mb']} MB; "
                f"full/windowed time {f['ms'] / w['ms']:.2f}x"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="kernel", required=True)
    p = sub.add_parser("loss", help="label-smoothed loss, forward + backward, against F.cross_entropy")
    p.add_argument("--n", type=int, default=4096, help="target positions (B x T)")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=20)
    p.set_defaults(run=loss)
    p = sub.add_parser("attention", help="restricted (windowed) against full self-attention")
    p.add_argument("--n", type=int, nargs="+", default=[512, 2048, 8192])
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.set_defaults(run=attention)
    a = ap.parse_args()
    a.run(a)


if __name__ == "__main__":
    main()
