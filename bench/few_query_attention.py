"""SDPA against two plain products for few queries per row on the CPU (issue 26; aiayn.model.attention).

    python bench/few_query_attention.py                 # 1 and 2 threads, 1-32 queries per row

Beam search folds a sentence's beams onto its source in cross-attention (4 queries per row at beam 4);
incremental decoding has one query per row. Times F.scaled_dot_product_attention and the explicit
softmax(Q K^T / sqrt(d)) V that `attention` runs for up to FEW_QUERIES queries per row on the CPU,
with a key-padding mask, at the small model's shape (64 sentences, 8 heads, 30 source positions,
d_k 32); also checks that the two agree.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.model.attention import FEW_QUERIES


def sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def explicit(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v  # what aiayn.model.attention.attention runs for few queries


def per_call_us(f: Callable[..., Tensor], *args: Tensor, n: int = 200) -> float:
    for _ in range(10):
        f(*args)
    t = time.perf_counter()
    for _ in range(n):
        f(*args)
    return (time.perf_counter() - t) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--queries", default="1,4,8,16,32")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--keys", type=int, default=30)
    p.add_argument("--d-k", type=int, default=32)
    a = p.parse_args(argv)
    B, h, S, d = a.sentences, 8, a.keys, a.d_k
    print(f"explicit path in aiayn for up to {FEW_QUERIES} queries per row")
    with torch.inference_mode():
        for threads in (int(t) for t in a.threads.split(",")):
            torch.set_num_threads(threads)
            for T in (int(t) for t in a.queries.split(",")):
                q, k, v = torch.randn(B, h, T, d), torch.randn(B, h, S, d), torch.randn(B, h, S, d)
                mask = torch.ones(B, 1, 1, S, dtype=torch.bool)
                mask[::2, ..., S - 5 :] = False  # padded sources

                args = (q, k, v, mask)
                torch.testing.assert_close(explicit(*args), sdpa(*args), rtol=1e-4, atol=1e-5)
                s, e = per_call_us(sdpa, *args), per_call_us(explicit, *args)
                print(
                    f"  {threads} thread(s), {T:2d} queries/row: SDPA {s:6.0f} us, explicit {e:6.0f} us, x{s / e:.2f}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
