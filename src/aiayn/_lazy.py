"""Lazy package exports (PEP 562): `import aiayn` and `aiayn --help` stay light; torch loads on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """A module `__getattr__` that loads a name from `package.<submodule>` when first asked for;
    `exports` maps each submodule to the names it gives the package."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
