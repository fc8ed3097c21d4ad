"""`aiayn quickstart` (parsing only; the recipe lives in aiayn.quickstart)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quickstart",
        help="train a small de->en model on Multi30k for a few minutes, score it and show translations and pictures",
    )
    p.add_argument("--minutes", type=float, default=15.0, help="training budget in minutes (default 15)")
    p.add_argument(
        "--run-dir",
        default="runs/quickstart",
        help="where the run goes (default runs/quickstart); an existing run is resumed",
    )
    p.add_argument("--data-dir", default=None, help="offline Multi30k mirror (default: $AIAYN_DATA_DIR)")
    p.add_argument("--beam", type=int, help="beam size (default: the run's decode.beam)")
    p.add_argument(
        "--corpus",
        choices=["multi30k", "embedded"],
        default=None,
        help="skip the automatic choice (multi30k if reachable, else embedded)",
    )
    p.add_argument("--test-limit", type=int, default=None, help="score only the first N test sentences")

    def _run(a: argparse.Namespace) -> int:
        from aiayn.quickstart import run

        out = run(a.minutes, a.run_dir, a.data_dir, a.beam, a.corpus, a.test_limit)
        return 130 if out.get("interrupted") else 0

    p.set_defaults(run=_run)
