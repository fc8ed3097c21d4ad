"""aiayn: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

from typing import TYPE_CHECKING

from aiayn._lazy import lazy_exports

__version__ = "0.1.0"
_EXPORTS = {"decode.translator": ("Translator",)}
__getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from aiayn.decode.translator import Translator
