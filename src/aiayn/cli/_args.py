"""Argument parsing shared by the commands: config overrides (`train`, `data prepare`), options passed on."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


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


def same_named(a: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options whose keyword has the option's own name, to pass through as `**same_named(a, ...)`."""
    return {name: getattr(a, name) for name in names}
