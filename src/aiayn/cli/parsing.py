"""`aiayn parse`: sentences in, constituency trees out, with a `task: parse` run; or a run's own split
parsed and scored with EVALB (parsing only; the work is in aiayn.decode.parser and aiayn.evalb)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _run(a: argparse.Namespace) -> int:
    from aiayn import evalb
    from aiayn.data.io import read_lines
    from aiayn.data.treebank import pretty
    from aiayn.decode.parser import Parser
    from aiayn.errors import AiaynError

    if a.gold or a.test:  # score two tree files, no model
        if not (a.gold and a.test):
            raise AiaynError("--gold and --test go together")
        scored = evalb.evaluate_files(a.gold, a.test)
        # as the C evalb: the table on stdout, each error sentence's line on stderr, and status 1 when
        # more than MAX_ERROR errors stopped it (its table then ends where it stopped, with no summary)
        print(scored.report(), end="", flush=True)
        print(scored.stderr(), end="", file=sys.stderr, flush=True)
        return 1 if scored.aborted else 0
    if not a.checkpoint:
        raise AiaynError("give -c RUN (or --gold and --test to score tree files)")
    parser = Parser.load(a.checkpoint, a.device, constrain=not a.unconstrained, decode=None)
    search = parser.translator.search_config(a.beam, a.lenpen, a.max_len_a, a.max_len_b)
    parser.translator.decode = search
    if a.split:
        res = parser.score_split(a.checkpoint, a.split, a.limit)
        if a.output:
            with open(a.output, "w") as f:
                f.writelines(t + "\n" for t in res["trees"])
        print(format_scores(a.split, res, search))
        return 0
    lines = read_lines(a.input) if a.input else [x.rstrip("\n") for x in sys.stdin]
    out = open(a.output, "w") if a.output else sys.stdout
    trees = parser.parse(lines)
    try:
        for tree in trees:
            out.write((pretty(tree) if a.pretty else str(tree)) + "\n")
            out.flush()
    finally:
        if a.output:
            out.close()
    if a.draw:
        from aiayn.tree_plot import plot_tree

        first = next((t for t in trees if t.leaves()), None)
        if first is None:
            raise AiaynError("--draw: no sentence with words to draw")
        print(f"aiayn parse: drew the first sentence's tree to {plot_tree(first, a.draw)}", file=sys.stderr)
    return 0


def evaluate(a: argparse.Namespace) -> int:
    """`aiayn evaluate -c RUN --split S` on a parse run: the parse TaskSpec's `evaluate`."""
    from aiayn.cli.translate import decode_config

    return evaluate_parse_run(a.checkpoint[0], a.split, a.device, decode_config(a), a.json)


def evaluate_parse_run(run: str, split: str | None, device: str | None, decode: Any, as_json: bool) -> int:
    """`aiayn evaluate` on a parse run: its split parsed and scored with EVALB instead of BLEU."""
    import json

    from aiayn.decode.parser import Parser
    from aiayn.errors import AiaynError

    if not split:
        raise AiaynError("a parse run is evaluated on its own data: give --split test (or valid)")
    parser = Parser.load(run, device, decode=decode)
    res = parser.score_split(run, split)
    print(format_scores(split, res, parser.translator.decode))
    if as_json:
        print(json.dumps({k: v for k, v in res.items() if k != "trees"}))
    return 0


def format_scores(split: str, res: dict[str, Any], search: Any) -> str:
    """The F1 line, then F1 per 10-word length bucket (sentences in brackets)."""
    buckets = " | ".join(f"{lo}-{lo + 9}: {f:.1f} ({n})" for lo, n, f in res.get("by_length", []))
    return (
        f"{split}: EVALB F1 {res['f1']:.2f} (all {res['sentences']} sentences), {res['f1_40']:.2f} (length <= 40) "
        f"[beam {search.beam}, length penalty {search.length_penalty:g}]"
        + (f"\nF1 by length: {buckets}" if buckets else "")
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "parse",
        help="parse sentences into constituency trees with a parse run (paper §6.3), or score trees with EVALB",
        description="Sentences of space-separated words in (stdin or --input), one tree per line out; "
        "--split test parses the run's own test set and reports EVALB F1 (all lengths and <= 40); "
        "--gold G --test T scores two tree files (EVALB, COLLINS.prm).",
    )
    p.add_argument("-c", "--checkpoint", metavar="RUN", help="a task: parse run directory (or weights in one)")
    p.add_argument("--input", help="sentences, one per line, words separated by spaces (default: stdin)")
    p.add_argument("--output", help="trees here (default: stdout)")
    p.add_argument("--pretty", action="store_true", help="each tree over several lines, indented")
    p.add_argument("--draw", metavar="PNG", help="also draw the first sentence's tree to this PNG (needs matplotlib)")
    p.add_argument("--split", help="test | valid: parse the run's own split and score it with EVALB")
    p.add_argument("--limit", type=int, metavar="N", help="with --split: its first N sentences only")
    p.add_argument("--gold", help="gold trees, one per line (with --test: score, no model)")
    p.add_argument("--test", help="parsed trees, one per line, aligned with --gold")
    p.add_argument("--beam", type=int, help="beam size (default: the run's decode.beam)")
    p.add_argument("--lenpen", type=float, help="length penalty alpha (default: the run's)")
    p.add_argument("--max-len-a", type=float, help="max output = a * input + b (default: the run's)")
    p.add_argument("--max-len-b", type=int, help="(default: the run's)")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda if present)")
    p.add_argument(
        "--unconstrained",
        action="store_true",
        help="search any output, not only trees over exactly the sentence's words (the output is still "
        "made a tree afterwards; faster engines may then decode)",
    )
    p.set_defaults(run=_run)
