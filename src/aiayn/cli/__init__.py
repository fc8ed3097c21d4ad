"""`aiayn` command line: all argument parsing lives in this package; subcommands only parse
arguments and call the library.

Each module here has a `register(sub)` function that adds its parser and the function it runs: the
general commands are listed below, a task's own verbs (`aiayn translate`, `aiayn generate`, ...) come
from the command module its record names (TaskSpec.commands; the records: aiayn.registry), so a task
installed from another distribution brings its verbs too. Imports of torch-heavy library code
stay inside the runners so `aiayn --help` starts fast; the library never imports argparse
(tests/test_layers.py checks both directions).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

# Torch's CPU threads (GNU OpenMP) spin at every barrier by default. With another process on one of the
# cores, each parallel op then waits a scheduler time slice for the thread that lost its core while
# the others burn theirs: greedy decoding fell to 2-40 % of its speed and training to 4 % beside one
# busy process. Passive threads sleep instead, and both keep about 50-95 % (docs/benchmarks.md, "Beside
# a busy process"), with the same outputs. libgomp reads this once, when torch loads: here, before any
# command imports torch. A policy the user set is kept (OMP_WAIT_POLICY=ACTIVE: the old behaviour).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from aiayn import __version__, registry
from aiayn.cli import ablate, data, export, hub, model, predict, quickstart, serve, synthetic, train, viz
from aiayn.cli._args import parse
from aiayn.errors import AiaynError

Register = Callable[[argparse._SubParsersAction], None]

# in the order of a user's workflow; the tasks' own verbs come after `train`
_BEFORE_TASKS: list[Register] = [quickstart.register, data.register, train.register]
_AFTER_TASKS: list[Register] = [
    synthetic.register,
    synthetic.register_distill,
    predict.register,
    viz.register,
    ablate.register,
    export.register,
    serve.register,
    hub.register,
    model.register,
]


def task_commands() -> list[Register]:
    """The `register` of every task's command module (a module, or "module:function"), each once, in
    the order of the registry."""
    from aiayn.train.tasks import get_spec  # the records are light: no torch, numpy or sentencepiece

    found: list[Register] = []
    for path in dict.fromkeys(get_spec(name).commands for name in registry.task_paths()):
        if path is not None:
            obj = registry.load(path)
            found.append(obj if callable(obj) else obj.register)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aiayn", description="The Transformer of 'Attention Is All You Need': train, translate, evaluate."
    )
    parser.add_argument("--version", action="version", version=f"aiayn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _BEFORE_TASKS + task_commands() + _AFTER_TASKS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse(parser, argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command as given (aiayn train records it)
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
