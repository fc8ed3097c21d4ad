"""Where tasks come from: one table, task name -> where its TaskSpec is ("module:SPEC").

aiayn's own tasks are the table below; any installed distribution adds its own (or replaces one) with an
entry point of the `aiayn.tasks` group, read the same way, so a package outside aiayn adds a task without
editing it (docs/architecture.md, "Adding a task"). That is the one way a task is registered: its record
says the rest (its settings, data, measures, predictor, evaluation, and the module of its command-line
verbs). Only names and dotted paths are read here; a record is imported when it is asked for
(aiayn.train.tasks.get_spec), and records are light to import (no torch, numpy or sentencepiece).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

TASKS_GROUP = "aiayn.tasks"

BUILTIN_TASKS = {
    "translate": "aiayn.train.tasks.translate:SPEC",
    "lm": "aiayn.train.tasks.lm:SPEC",
    "mlm": "aiayn.train.tasks.mlm:SPEC",
    "classify": "aiayn.train.tasks.classify:SPEC",
    "parse": "aiayn.train.tasks.parse:SPEC",
}


def task_paths() -> dict[str, str]:
    """Every task's name -> where its TaskSpec is: aiayn's own, then what installed distributions declare
    in the `aiayn.tasks` group (a later declaration of a name replaces an earlier one)."""
    found = dict(BUILTIN_TASKS)
    for ep in entry_points(group=TASKS_GROUP):
        found[ep.name] = ep.value
    return found


def moved_settings() -> dict[str, set[str]]:
    """ "SECTION.KEY" -> the tasks that took over that global setting (their TaskSpec.moved): every task's
    record is read (light: no torch), so aiayn.config asks only for a key a section does not know."""
    found: dict[str, set[str]] = {}
    for name, path in task_paths().items():
        for key in getattr(load(path), "moved", ()):
            found.setdefault(key, set()).add(name)
    return found


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
