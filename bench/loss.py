"""Forward + backward time of the label-smoothed loss on (N, V) logits, aiayn's against PyTorch's.

    python bench/loss.py                       # N 4096, V 8000, 2 threads, 20 repeats
    python bench/loss.py --n 4096 --vocab 32000 --threads 2

aiayn: aiayn.train.loss.label_smoothed_nll (hand-written forward/backward on log_softmax).
peer:  F.cross_entropy(label_smoothing=0.1, ignore_index=pad, reduction="sum") through autograd.
The two alternate call by call; each figure is the median over repeats, the ratio peer/aiayn the
median of per-repeat ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from aiayn.train.loss import label_smoothed_nll


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="target positions (B x T)")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    a = ap.parse_args()
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
            if i >= 2:  # first two: warm-up
                times[name].append(time.perf_counter() - t)
    ratio = statistics.median(p / o for o, p in zip(times["aiayn"], times["F.cross_entropy"]))
    for name, ts in times.items():
        print(f"{name:16s} {1000 * statistics.median(ts):7.1f} ms  (N {a.n}, V {a.vocab}, {a.threads} threads)")
    print(f"F.cross_entropy / aiayn: {ratio:.2f}x")


if __name__ == "__main__":
    main()
