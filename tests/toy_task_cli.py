"""The command-line module of the toy task (tests/toy_task.py names it): its own verb, `aiayn reverse-check`,
and its answer to `aiayn evaluate`. Light to import, like aiayn's own (no torch until a command runs)."""

from __future__ import annotations

import argparse


def evaluate(a: argparse.Namespace) -> int:
    """`aiayn evaluate -c RUN`: exact match of the run's predictions on its own validation data."""
    from pathlib import Path

    from aiayn.train.tasks import run_spec
    from toy_task import exact_match

    run = Path(a.checkpoint[0])
    src, ref = ((run / "reverse-data" / f"valid.{side}").read_text().splitlines() for side in ("src", "tgt"))
    predict = run_spec(run).predictor(str(run), a.device)
    print(f"exact match {exact_match(predict(src), ref):.3f} ({len(ref)} sequences)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reverse-check", help="the toy task's own verb: is LETTERS reversed correctly?")
    p.add_argument("letters")

    def run(a: argparse.Namespace) -> int:
        print(" ".join(reversed(a.letters.split())))
        return 0

    p.set_defaults(run=run)
