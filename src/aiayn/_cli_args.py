"""Argument parsing shared by the commands that take config overrides (`train`, `data prepare`)."""

from __future__ import annotations

import argparse


def collect_overrides(parser: argparse.ArgumentParser) -> None:
    """Let `--section.field VALUE` pairs through: unknown arguments become `args.overrides`
    (validated by Config.load, which names the known fields), instead of an argparse error."""
    parse = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):  # type: ignore[no-untyped-def]
        ns, extra = parse(args, namespace)
        ns.overrides = list(getattr(ns, "overrides", None) or []) + extra
        return ns, []

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]
