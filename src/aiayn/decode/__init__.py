"""Decoding: greedy and beam search on the incremental cache, ensembles, the text-in/text-out Translator,
and sampling from decoder-only models.

Names load lazily (PEP 562) so `aiayn.cli.translate` registers its subcommands without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiayn._lazy import lazy_exports

_EXPORTS = {  # submodule -> the names it gives the package
    "search": ("beam_search", "greedy_search", "max_lengths"),
    "ensemble": ("Ensemble", "load_members"),
    "translator": ("Translator",),
    "sampling": ("Sampling", "generate", "log_likelihood"),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from aiayn.decode.ensemble import Ensemble, load_members
    from aiayn.decode.sampling import Sampling, generate, log_likelihood
    from aiayn.decode.search import beam_search, greedy_search, max_lengths
    from aiayn.decode.translator import Translator
