"""`aiayn predict`: any task's model on lines of text, through the predictor its TaskSpec builds (parsing
only; the task's own verbs, such as `aiayn translate` or `aiayn classify`, have every option)."""

from __future__ import annotations

import argparse
import json
import sys


def _run(a: argparse.Namespace) -> int:
    from aiayn.data.io import read_lines
    from aiayn.errors import AiaynError
    from aiayn.hub import resolve_run
    from aiayn.train.tasks import run_spec

    run = str(resolve_run(a.checkpoint))
    spec = run_spec(run)
    if spec.predictor is None:
        raise AiaynError(f"task {spec.name} has no predictor (its TaskSpec builds none)")
    predict = spec.predictor(run, a.device)
    lines = read_lines(a.input) if a.input else [x.rstrip("\n") for x in sys.stdin]
    out = open(a.output, "w") if a.output else sys.stdout
    try:
        for k in range(0, len(lines), a.batch):
            out.writelines(
                (y if isinstance(y, str) else json.dumps(y, ensure_ascii=False)) + "\n"
                for y in predict(lines[k : k + a.batch])
            )
            out.flush()
    finally:
        if a.output:
            out.close()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="run any task's model on lines (stdin -> stdout): what the run's task predicts, one line each",
    )
    p.add_argument("-c", "--checkpoint", required=True, metavar="RUN", help="run directory, weights file or hf://...")
    p.add_argument("--input", help="input lines (default: stdin)")
    p.add_argument("--output", help="output file (default: stdout)")
    p.add_argument("--batch", type=int, default=64, help="lines per call of the predictor (default 64)")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda if present)")
    p.set_defaults(run=_run)
