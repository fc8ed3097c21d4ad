"""`aiayn model`: build a preset, print its size and run one forward pass."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model", help="build a model preset, print its size and run one forward pass")
    p.add_argument("--preset", default="base", help="base | big | small | tiny (default: base)")
    p.add_argument("--vocab-size", type=int, default=37000)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--length", type=int, default=16)

    def run(a: argparse.Namespace) -> int:
        import time

        import torch

        from aiayn.config import ModelConfig
        from aiayn.model import Transformer

        torch.manual_seed(0)
        cfg = ModelConfig.preset(a.preset, vocab_size=a.vocab_size)
        model = Transformer(cfg).eval()
        print(f"preset {a.preset}: {model.num_parameters():,} parameters")
        print("  " + ", ".join(f"{k}={v}" for k, v in cfg.to_dict().items()))
        src = torch.randint(4, cfg.vocab_size, (a.batch, a.length))
        tgt = torch.randint(4, cfg.vocab_size, (a.batch, a.length))
        t0 = time.perf_counter()
        with torch.no_grad():
            logits = model(src, tgt)
        print(
            f"forward (B={a.batch}, S=T={a.length}) -> logits {tuple(logits.shape)} "
            f"in {time.perf_counter() - t0:.3f}s (untrained weights)"
        )
        return 0

    p.set_defaults(run=run)
