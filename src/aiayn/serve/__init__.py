"""`aiayn serve`: an HTTP translation server with cross-request batching and a web page.

Needs the serve extra (`pip install 'aiayn[serve]'`: FastAPI, uvicorn, prometheus_client). Names
load lazily (PEP 562) so `aiayn.cli.serve` registers its subcommand without those installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiayn._lazy import lazy_exports

_EXPORTS = {  # submodule -> the names it gives the package
    "app": ("create_app",),
    "settings": ("ServeSettings",),
    "batcher": ("Batcher", "SearchOptions"),
    "engines": ("load_engine", "TorchServeEngine", "CTranslate2ServeEngine"),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from aiayn.serve.app import create_app
    from aiayn.serve.batcher import Batcher, SearchOptions
    from aiayn.serve.engines import CTranslate2ServeEngine, TorchServeEngine, load_engine
    from aiayn.serve.settings import ServeSettings
