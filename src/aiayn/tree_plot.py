"""Pictures of constituency trees (the parse task, paper §6.3): `aiayn parse --draw`.

Drawn with aiayn.viz's figures (the Agg canvas, exact sizes, matplotlib imported only when a picture is
drawn), saved through it as its own pictures are.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from aiayn import viz

if TYPE_CHECKING:
    from aiayn.data.treebank import Tree


def tree_layout(tree: Tree) -> tuple[list[tuple[str, float, int]], list[tuple[float, int, float, int]], int]:
    """Where each node of `tree` is drawn: (label, x, depth) per node, (x0, d0, x1, d1) per edge, and the
    depth of the words' row. Word i stands at x = i on the bottom row; a constituent stands at its depth,
    centred over its children, so no two edges cross (children are in order and spans are contiguous)."""
    nodes: list[tuple[str, float, int]] = []
    edges: list[tuple[float, int, float, int]] = []

    def height(t: Tree) -> int:
        return 1 if t.is_preterminal else 1 + max((height(c) for c in t.children if not isinstance(c, str)), default=0)

    if not tree.leaves():
        raise viz.PlotError("a tree without words has nothing to draw")
    bottom = height(tree)  # words one row below the deepest tag
    next_word = 0

    def place(t: Tree, depth: int) -> float:
        nonlocal next_word
        if t.is_preterminal:
            x = float(next_word)
            next_word += 1
            nodes.append((str(t.children[0]), x, bottom))
            edges.append((x, depth, x, bottom))
        else:
            xs = [place(c, depth + 1) for c in t.children if not isinstance(c, str) and c.leaves()]
            x = sum(xs) / len(xs)
            edges.extend((x, depth, cx, depth + 1) for cx in xs)
        nodes.append((t.label, x, depth))
        return x

    place(tree, 0)
    return nodes, edges, bottom


def plot_tree(tree: Tree, out: str | os.PathLike, dpi: int = 100) -> Path:
    """A constituency tree (paper §6.3) as a PNG: the words along the bottom in order, each constituent
    above the words it spans. The picture is 0.9 inch per word (at least 3) by 0.55 inch per row."""
    nodes, edges, bottom = tree_layout(tree)
    n_words = len(tree.leaves())
    fig = viz.new_figure(max(3.0, 0.9 * n_words), 0.55 * (bottom + 1) + 0.3, dpi)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(-0.6, n_words - 0.4)
    ax.set_ylim(bottom + 0.6, -0.6)  # the root on top
    ax.axis("off")
    for x0, d0, x1, d1 in edges:
        ax.plot([x0, x1], [d0, d1], color="0.6", linewidth=1.0, zorder=1)
    for label, x, depth in nodes:
        word = depth == bottom
        ax.text(
            x,
            depth,
            viz.label_text(label),
            ha="center",
            va="center",
            fontsize=9,
            color="black" if word else "#1f4e99",
            fontweight="normal" if word else "bold",
            bbox=dict(facecolor="white", edgecolor="none", pad=1.5),
            zorder=2,
        )
    return viz.save_png(fig, out)
