"""aiayn: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Lazy (PEP 562): `import aiayn` stays light; torch loads only when Translator is used.
    if name == "Translator":
        from aiayn.decode.translator import Translator

        return Translator
    raise AttributeError(f"module 'aiayn' has no attribute {name!r}")
