"""What a plot shows, read from the matplotlib figure before it is saved (not from the PNG's size)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest


@contextmanager
def figures(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[Path, object]]:
    """Every figure aiayn.viz saves (its own and aiayn.tree_plot's) while inside, by the path it is saved to
    (the PNG is still written)."""
    from aiayn import viz

    saved: dict[Path, object] = {}
    real = viz.save_png

    def keep(fig, out):
        saved[Path(out)] = fig
        return real(fig, out)

    monkeypatch.setattr(viz, "save_png", keep)
    yield saved


def panels(fig) -> dict[str, dict[str, tuple[list[float], list[float]]]]:
    """{panel title: {line label: (x values, y values)}}; a panel showing "no records" maps to {}."""
    out: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for ax in fig.axes:
        lines = {
            ln.get_label(): (list(map(float, ln.get_xdata())), list(map(float, ln.get_ydata()))) for ln in ax.lines
        }
        if any(t.get_text() == "no records" for t in ax.texts):
            assert not lines
        out[ax.get_title()] = lines
    return out


def color_pixels(png: Path, rgb: tuple[float, float, float], tol: float = 0.02) -> int:
    """How many pixels of the PNG have this colour (channels 0-1)."""
    import matplotlib.image as mpimg

    img = mpimg.imread(png)[..., :3]
    return int((np.abs(img - np.asarray(rgb)) <= tol).all(-1).sum())
