"""Argument parsing shared by the commands that take config overrides (`train`, `data prepare`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def collect_overrides(parser: argparse.ArgumentParser) -> None:
    """Mark a subcommand as taking `--section.field VALUE` pairs: `parse` hands the arguments argparse
    does not know to it as `args.overrides` (validated by Config.load, which names the known fields)."""
    parser.set_defaults(overrides=[], takes_overrides=True)


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser.parse_args`, except that a command marked by `collect_overrides` receives the unknown
    arguments as its overrides instead of an error."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not getattr(args, "takes_overrides", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = list(args.overrides) + extra
    return args
