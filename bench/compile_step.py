"""Does torch.compile speed up a decoder step on CPU? (issue 26)

    python bench/compile_step.py --size small --threads 1

Three ways to run the same 25 greedy decoder steps over 64 rows (random weights, vocab 8000):
aiayn's own cached `Transformer.step`; a static-shape step written for compilation (keys/values
preallocated over the whole capacity, the position as a tensor, a length mask instead of slicing, so
no shape ever changes and nothing recompiles); and that step through `torch.compile` (inductor,
dynamic=False). Prints the best of 5 runs for each and the compile time (paid once).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.config import ModelConfig
from aiayn.model import Transformer
from aiayn.model.masks import padding_mask

B, S, STEPS = 64, 25, 25
C = STEPS + 1  # cache capacity


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="small")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    c = ModelConfig.preset(a.size, 8000)
    torch.manual_seed(0)
    m = Transformer(c).eval()
    h, dk, L = c.n_heads, c.d_model // c.n_heads, c.n_decoder_layers
    src = torch.randint(4, 8000, (B, S))
    src[:, -1] = 3
    with torch.inference_mode():
        mem = m.encode(src)
        cross = m.init_cache(mem, padding_mask(src, 0), capacity=C).cross_kv
        cross_k = torch.stack([k for k, _ in cross])  # (L, B, h, S, dk)
        cross_v = torch.stack([v for _, v in cross])
        pe, emb = m.tgt_embed.positions.table, m.tgt_embed.tokens.weight

        def step(ids: Tensor, pos: Tensor, K: Tensor, V: Tensor) -> Tensor:  # post-LN decoder, one position
            x = F.embedding(ids, emb) * math.sqrt(c.d_model) + pe.index_select(0, pos.view(1))  # (B, 1, d)
            seen = (torch.arange(C) <= pos).view(1, 1, 1, C)  # keys written so far
            for i, layer in enumerate(m.decoder):
                q, k, v = layer.self_attn.qkv(x).view(B, 1, 3, h, dk).permute(2, 0, 3, 1, 4)  # (B, h, 1, dk) each
                K[i].index_copy_(2, pos.view(1), k)
                V[i].index_copy_(2, pos.view(1), v)
                s = (q @ K[i].transpose(-2, -1) / math.sqrt(dk)).masked_fill(~seen, float("-inf")).softmax(-1)
                x = layer.r1.norm(x + layer.self_attn.out((s @ V[i]).transpose(1, 2).reshape(B, 1, -1)))
                q = layer.cross_attn.q(x).view(B, 1, h, dk).transpose(1, 2)  # (B, h, 1, dk)
                s = (q @ cross_k[i].transpose(-2, -1) / math.sqrt(dk)).softmax(-1)  # no padding in these inputs
                x = layer.r2.norm(x + layer.cross_attn.out((s @ cross_v[i]).transpose(1, 2).reshape(B, 1, -1)))
                x = layer.r3.norm(x + layer.ffn(x))
            return m.generator(x[:, -1]).argmax(-1)  # (B,)

        def static(fn: Callable[..., Tensor]) -> Callable[[], None]:
            def run() -> None:
                K, V = torch.zeros(L, B, h, C, dk), torch.zeros(L, B, h, C, dk)
                ids = torch.full((B, 1), 2)
                for t in range(STEPS):
                    ids = fn(ids, torch.tensor(t), K, V)[:, None]

            return run

        def aiayn() -> None:
            cache = m.init_cache(mem, padding_mask(src, 0), capacity=C)
            ids = torch.full((B, 1), 2)
            for _ in range(STEPS):
                logits, cache = m.step(ids, cache)
                ids = logits[:, -1].argmax(-1)[:, None]

        def best(f: Callable[[], None]) -> float:
            f()
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                f()
                times.append(time.perf_counter() - t0)
            return min(times) * 1e3

        eager = best(static(step))
        own = best(aiayn)
        t0 = time.perf_counter()
        compiled = torch.compile(step, dynamic=False)
        static(compiled)()
        compile_s = time.perf_counter() - t0
        comp = best(static(compiled))
    print(
        f"{a.size}, {a.threads} thread(s), {STEPS} steps x {B} rows: aiayn decode {own:.0f} ms, static step eager "
        f"{eager:.0f} ms, compiled {comp:.0f} ms (compile {compile_s:.0f} s, once)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
