"""Restricted self-attention (Table 1) against full attention: time and peak memory of one attention
call (B=1, h=8, d_k=64, forward only, float32) at n = 512 / 2048 / 8192, each in a fresh process.

    python bench/restricted_attention.py [--window 64] [--n 512 2048 8192] [--threads 2]

Methods: `windowed` (the blocked O(n r) kernel), `band-mask` (SDPA with the n x n band mask, what
restricting full attention by a mask costs) and `full` (SDPA, no mask: the O(n^2) baseline).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
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
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
times = []
for _ in range(5):
    t = time.perf_counter(); run(); times.append(time.perf_counter() - t)
print(json.dumps({"n": n, "window": r, "method": method, "ms": round(1000 * min(times), 2),
                  "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[512, 2048, 8192])
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    rows = []
    for n in a.n:
        for method in ("windowed", "band-mask", "full"):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(n), str(a.window), method, str(a.threads)],
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


if __name__ == "__main__":
    main()
