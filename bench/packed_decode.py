"""Whole decodes with the model's linears swapped for packed weights (issue 26).

    python bench/packed_decode.py --size small --task greedy --rounds 8
    python bench/packed_decode.py --size base --task beam --variants plain,packed --rounds 3

The model and inputs of bench/throughput.py (random weights, 64 sentences, every sentence decoded for
exactly --decode-len steps), decoded by aiayn's greedy or beam-4 search, 1 thread by default. Variants:

  plain           nn.Linear everywhere (what `aiayn` runs)
  packed          aiayn.model.cpu_layout.pack_for_cpu (the decoder's linears packed once for MKL, any row
                  count: Translator.load(..., packed=True)); packed@N: packed for N rows instead of PACK_ROWS
  mkl-gen/-all    torch.ops.mkl._mkl_linear with weights packed by _mkl_reorder_linear_weight for the row
                  count of the full batch (64 greedy, 256 beam 4; other row counts fall back to W):
                  generator only / every decoder linear + generator
  onednn-gen/-all torch.ops.mkldnn._linear_pointwise on weights reordered by _reorder_linear_weight

Rounds alternate the variants (the order rotates each round); each ratio is the median over rounds of
plain's process CPU time / the variant's (> 1: faster), CPU time being less sensitive than wall time
to other jobs on a shared machine. Also whether each variant's outputs equal plain's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aiayn.config import ModelConfig  # noqa: E402
from aiayn.decode import beam_search, greedy_search  # noqa: E402
from aiayn.model import Transformer  # noqa: E402
from aiayn.model.cpu_layout import pack_for_cpu  # noqa: E402
from throughput import VOCAB, BanEOS, make_batches  # noqa: E402


class MklPacked(nn.Module):
    """torch.ops.mkl._mkl_linear on a weight packed for `rows` input rows (inductor's CPU freezing path)."""

    def __init__(self, lin: nn.Linear, rows: int) -> None:
        super().__init__()
        self.w, self.b, self.rows = lin.weight.detach().clone(), lin.bias, rows
        self.packed = torch.ops.mkl._mkl_reorder_linear_weight(self.w, rows)

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkl._mkl_linear(x, self.packed, self.w, self.b, self.rows)


class OneDnnPacked(nn.Module):
    """torch.ops.mkldnn._linear_pointwise on a weight in oneDNN's blocked layout."""

    def __init__(self, lin: nn.Linear, rows: int) -> None:
        super().__init__()
        self.b = lin.bias
        self.packed = torch.ops.mkldnn._reorder_linear_weight(lin.weight.detach().clone(), rows)

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.b, "none", [], "")


def make(size: str, variant: str, rows: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    net = Transformer(ModelConfig.preset(size, VOCAB)).eval()
    if variant == "plain":
        return net
    if variant.startswith("packed"):  # packed or packed@ROWS (the row count MKL is told when packing)
        rows = variant.partition("@")[2]
        return pack_for_cpu(net, int(rows)) if rows else pack_for_cpu(net)
    kind, where = variant.rsplit("-", 1)

    def swap(lin: nn.Linear) -> nn.Module:
        return MklPacked(lin, rows) if kind == "mkl" else OneDnnPacked(lin, rows)

    if where == "all":
        for parent in [m for layer in net.decoder for m in layer.modules()]:
            for name, child in list(parent.named_children()):
                if type(child) is nn.Linear:
                    setattr(parent, name, swap(child))
    net.generator = swap(net.generator)  # type: ignore[assignment]  # declared nn.Linear
    return net


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="small")
    p.add_argument("--task", default="greedy", choices=["greedy", "beam"])
    p.add_argument("--variants", default="plain,packed,mkl-gen,mkl-all,onednn-gen,onednn-all")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--decode-len", type=int, default=25)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    variants = [v for v in args.variants.split(",") if v]
    if variants[0] != "plain":
        variants.insert(0, "plain")
    beam = 4 if args.task == "beam" else 1
    src = make_batches(1, args.seed + 1)[0][0]
    L = args.decode_len

    def runner(net: nn.Module) -> Callable[[], object]:
        model = BanEOS(net, last=L - 1)  # type: ignore[arg-type]  # any variant decodes alike
        if beam == 1:
            return lambda: greedy_search(model, src, max_len_a=0.0, max_len_b=L - 1)
        return lambda: beam_search(model, src, beam=beam, length_penalty=0.6, max_len_a=0.0, max_len_b=L - 1)

    fns = {v: runner(make(args.size, v, src.size(0) * beam, args.seed)) for v in variants}
    outs = {v: f() for v, f in fns.items()}  # warm-up and outputs
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(args.rounds):
        for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
            t = time.process_time()
            fns[v]()
            cpu[v].append(time.process_time() - t)
    print(f"{args.size} {args.task}, {args.threads} thread(s), {args.rounds} rounds")
    for v in variants:
        ratios = [a / b for a, b in zip(cpu["plain"], cpu[v])]
        print(
            f"  {v:15s} cpu {statistics.median(cpu[v]) * 1e3:7.0f} ms  plain/{v} x{statistics.median(ratios):.3f}"
            f"  (rounds {' '.join(f'{x:.2f}' for x in ratios)})  same outputs as plain: {outs[v] == outs['plain']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
