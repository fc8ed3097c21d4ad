"""Where tasks come from: the entry points of the `aiayn.tasks` group (name -> a module's TaskSpec) and
of `aiayn.commands` (a task's own command-line module, whose `register(sub)` adds its verbs and whose
`evaluate(args)`, if any, answers `aiayn evaluate` for its runs).

Any installed distribution may declare them, so a package outside aiayn adds a task without editing
it (docs/architecture.md, "Adding a task"). Only names and dotted paths are read here: nothing is
imported until a task is used, so `aiayn --help` stays free of torch.

The built-in tasks are declared in pyproject.toml; the same list is kept below for a checkout used
without (re)installing (tests/test_tasks.py checks that the two agree).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

TASKS_GROUP = "aiayn.tasks"
COMMANDS_GROUP = "aiayn.commands"

BUILTIN_TASKS = {
    "translate": "aiayn.train.tasks.translate:SPEC",
    "lm": "aiayn.train.tasks.lm:SPEC",
    "mlm": "aiayn.train.tasks.mlm:SPEC",
    "classify": "aiayn.train.tasks.classify:SPEC",
    "parse": "aiayn.train.tasks.parse:SPEC",
}
BUILTIN_COMMANDS = {
    "translate": "aiayn.cli.translate",
    "lm": "aiayn.cli.lm",
    "classify": "aiayn.cli.classify",
    "parse": "aiayn.cli.parsing",
}


def _declared(group: str, builtin: dict[str, str]) -> dict[str, str]:
    """name -> "module[:attribute]": the built-in list, then what installed distributions declare
    (a later declaration of a name replaces an earlier one)."""
    found = dict(builtin)
    for ep in entry_points(group=group):
        found[ep.name] = ep.value
    return found


def task_paths() -> dict[str, str]:
    """Every task's name -> where its TaskSpec is ("module:SPEC")."""
    return _declared(TASKS_GROUP, BUILTIN_TASKS)


def command_paths() -> dict[str, str]:
    """Task name -> its command-line module (tasks without one are absent)."""
    return _declared(COMMANDS_GROUP, BUILTIN_COMMANDS)


def load(path: str) -> Any:
    """The object "module:attribute" names (the module itself without an attribute)."""
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else []:
        obj = getattr(obj, part)
    return obj


class Later:
    """A function (or class) named by "module:attribute", imported when first called: a task's record
    names its model half this way, so reading the record (its settings, its data) loads no torch."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._target: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._target is None:
            self._target = load(self.path)
        return self._target(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Later({self.path!r})"
