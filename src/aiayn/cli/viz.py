"""`aiayn attention` and `aiayn plot` (parsing only; the drawing lives in aiayn.viz)."""

from __future__ import annotations

import argparse
from pathlib import Path

from aiayn.viz import KINDS, attention_map, load_for_attention, plot_attention, plot_runs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("attention", help="draw attention heat maps of one sentence and its greedy translation")
    p.add_argument("sentence", help="source sentence, e.g. 'Ein Hund rennt über die Wiese.'")
    p.add_argument("-c", "--checkpoint", required=True, help="run directory or weights file")
    p.add_argument(
        "--kind",
        default="all",
        choices=[*KINDS, "all"],
        help="encoder / decoder self-attention, cross (encoder-decoder), or all (default)",
    )
    p.add_argument("--layer", type=int, help="one layer, counted from 1 (default: all)")
    p.add_argument("--head", type=int, help="one head, counted from 1 (default: all)")
    p.add_argument("-o", "--output", help="PNG path (default: RUN_DIR/plots/attention.png)")
    p.add_argument("--dpi", type=int, default=100)

    def run_attention(a: argparse.Namespace) -> int:
        model, tokenizer = load_for_attention(a.checkpoint)
        amap = attention_map(model, tokenizer, a.sentence)
        ckpt = Path(a.checkpoint)
        out = a.output or (ckpt if ckpt.is_dir() else ckpt.parent) / "plots" / "attention.png"
        print(plot_attention(amap, out, kind=a.kind, layer=a.layer, head=a.head, dpi=a.dpi))
        return 0

    p.set_defaults(run=run_attention)

    p = sub.add_parser("plot", help="draw training curves of one or more runs, overlaid")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (or metrics.jsonl files)")
    p.add_argument(
        "-o", "--output", help="PNG path (default: RUN_DIR/plots/curves.png for one run, curves.png for several)"
    )
    p.add_argument("--dpi", type=int, default=100)

    def run_plot(a: argparse.Namespace) -> int:
        out = a.output
        if out is None:
            one = Path(a.runs[0])
            out = (one if one.is_dir() else one.parent) / "plots" / "curves.png" if len(a.runs) == 1 else "curves.png"
        print(plot_runs(a.runs, out, dpi=a.dpi))
        return 0

    p.set_defaults(run=run_plot)
