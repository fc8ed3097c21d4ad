"""`aiayn` command line. Subcommands only parse arguments and call the library.

Each concern's module has a `register(sub)` function (listed in `_COMMANDS`) that adds its parser
and the function it runs; library imports stay inside the runners so `aiayn --help` starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from aiayn import __version__, ablation, classification, quickstart, viz
from aiayn import export as export_commands
from aiayn._cli_args import parse
from aiayn.data import commands as data_commands
from aiayn.decode import commands as decode_commands
from aiayn.decode import lm_commands
from aiayn.errors import AiaynError
from aiayn.serve import commands as serve_commands
from aiayn.train import commands as train_commands


def _add_model(sub: argparse._SubParsersAction) -> None:
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


_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [  # in the order of a user's workflow
    quickstart.register,
    data_commands.register,
    train_commands.register,
    decode_commands.register,
    lm_commands.register,
    classification.register,
    viz.register,
    ablation.register,
    export_commands.register,
    serve_commands.register,
    _add_model,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aiayn", description="The Transformer of 'Attention Is All You Need': train, translate, evaluate."
    )
    parser.add_argument("--version", action="version", version=f"aiayn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse(parser, argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 0
    try:
        return int(args.run(args) or 0)
    except AiaynError as e:  # something the user can fix: one line, no traceback
        if os.environ.get("AIAYN_DEBUG"):
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
