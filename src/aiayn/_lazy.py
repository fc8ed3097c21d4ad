"""Lazy package exports (PEP 562): `import aiayn` and `aiayn --help` stay light; torch loads on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` that loads `name` from `package.<exports[name]>` when first asked for."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
