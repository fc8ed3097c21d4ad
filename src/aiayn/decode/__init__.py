"""Decoding: greedy and beam search on the incremental cache, and the text-in/text-out Translator.

Names load lazily (PEP 562) so `aiayn.decode.commands` registers its subcommands without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {"beam_search": "search", "greedy_search": "search", "max_lengths": "search",
            "Translator": "translator"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"aiayn.decode.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'aiayn.decode' has no attribute {name!r}")


if TYPE_CHECKING:
    from aiayn.decode.search import beam_search, greedy_search, max_lengths
    from aiayn.decode.translator import Translator
