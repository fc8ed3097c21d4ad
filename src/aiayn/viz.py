"""Pictures: attention heat maps (paper §3.2, Figures 3-5) and training curves (§5).

matplotlib is optional (`pip install 'aiayn[plot]'`) and imported only when a picture is drawn.
Figures are built on `matplotlib.figure.Figure` with the Agg canvas, never through pyplot, so
drawing touches no global backend state (safe inside notebooks, servers and tests).

Sizes are exact: a figure is `width_in x height_in` inches at `dpi`, saved without tight
cropping, so the PNG is `round(width_in * dpi) x round(height_in * dpi)` pixels.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # heavy imports stay out of `aiayn --help`
    from matplotlib.figure import Figure

    from aiayn.data.tokenizer import Tokenizer
    from aiayn.model import Transformer

from aiayn.config import DecodeConfig
from aiayn.errors import AiaynError
from aiayn.train.metrics import read_metrics

PLOT_HINT = "plotting needs matplotlib: pip install 'aiayn[plot]'"
KINDS = ("encoder", "decoder", "cross")
KIND_TITLES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "encoder-decoder attention",
}


class PlotError(AiaynError, ValueError):
    """A picture cannot be drawn as asked (no such layer/head, unreadable metrics file)."""


class PlotDependencyError(AiaynError, ImportError):
    """matplotlib is not installed."""


def new_figure(width_in: float, height_in: float, dpi: int) -> Figure:
    """A Figure on the Agg canvas; a one-line install hint when matplotlib is missing."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotDependencyError(PLOT_HINT) from None
    fig = Figure(figsize=(width_in, height_in), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def label_text(s: str) -> str:
    """Label-safe text: control characters (byte pieces decoded raw) shown as escapes, and `$`
    escaped so matplotlib does not read mathtext."""
    s = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in s)
    return s.replace("$", r"\$")


def save_png(fig: Figure, out: str | os.PathLike) -> Path:
    """`fig` as a PNG at `out` (its folder made), at exactly the figure's size."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")  # no bbox_inches="tight": the pixel size stays as documented
    return out


# -- attention heat maps ---------------------------------------------------------------------------


@dataclass
class AttentionMap:
    """Attention probabilities of one sentence pair, with subword pieces for the axes.

    Rows of every matrix are queries, columns keys. Encoder rows/columns: source pieces + </s>.
    Decoder self-attention rows/columns: the decoder input, <s> + translation pieces. Encoder-decoder
    rows are labelled with the piece each decoder position *produces* (translation pieces + </s>),
    the reading of the paper's alignment-like figures; its columns are the source pieces.
    """

    source: str
    translation: str
    src_labels: list[str]
    tgt_labels: list[str]  # decoder input: <s> y_1 .. y_n
    out_labels: list[str]  # decoder output: y_1 .. y_n </s>
    weights: dict[str, list[Any]] = field(repr=False)  # kind -> per layer numpy (h, T_q, T_k)

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(query labels, key labels) of `kind`."""
        return {
            "encoder": (self.src_labels, self.src_labels),
            "decoder": (self.tgt_labels, self.tgt_labels),
            "cross": (self.out_labels, self.src_labels),
        }[kind]


def attention_map(
    model: Transformer,
    tokenizer: Tokenizer,
    sentence: str,
    target_ids: Sequence[int] | None = None,
    max_len_a: float = DecodeConfig.max_len_a,
    max_len_b: int = DecodeConfig.max_len_b,
) -> AttentionMap:
    """Encode `sentence`, translate it greedily (or take `target_ids`, pieces without BOS/EOS) and
    record every layer's attention while the model reads the pair by teacher forcing."""
    import torch

    c = model.config
    ids = tokenizer.encode(sentence) + [c.eos_id]
    device = next(model.parameters()).device
    src = torch.tensor([ids], device=device)  # (1, S)
    was_training = model.training
    model.eval()  # dropout off: the picture shows the model as it translates
    try:
        if target_ids is None:
            from aiayn.decode import greedy_search

            target_ids = greedy_search(model, src, max_len_a=max_len_a, max_len_b=max_len_b)[0]
        target_ids = [int(i) for i in target_ids]
        tgt_in = torch.tensor([[c.bos_id] + target_ids], device=device)  # (1, T)
        raw = model.attention_weights(src, tgt_in)
    finally:
        model.train(was_training)
    weights = {k: [w[0].float().cpu().numpy() for w in raw[k]] for k in KINDS}  # per layer (h, T_q, T_k)

    piece = tokenizer.sp.id_to_piece
    src_labels = tokenizer.pieces(sentence) + [piece(c.eos_id)]
    if len(src_labels) != len(ids):  # pieces() and encode() segment identically; be safe anyway
        src_labels = [piece(i) for i in ids]
    return AttentionMap(
        source=sentence,
        translation=tokenizer.decode(target_ids),
        src_labels=src_labels,
        tgt_labels=[piece(i) for i in [c.bos_id] + target_ids],
        out_labels=[piece(i) for i in target_ids + [c.eos_id]],
        weights=weights,
    )


def _select(
    amap: AttentionMap, kind: str, layer: int | None, head: int | None
) -> tuple[list[str], list[int], list[int]]:
    """Validate the 1-based layer/head selection -> (kinds, layer indices, head indices), 0-based."""
    kinds = list(KINDS) if kind == "all" else [kind]
    if kind != "all" and kind not in KINDS:
        raise PlotError(f"--kind must be one of encoder, decoder, cross, all; not {kind!r}")
    n_heads = amap.weights[kinds[0]][0].shape[0]
    n_layers = min(len(amap.weights[k]) for k in kinds)
    if layer is not None and not 1 <= layer <= n_layers:
        raise PlotError(f"layer {layer} does not exist: the model has {n_layers} layers (counted from 1)")
    if head is not None and not 1 <= head <= n_heads:
        raise PlotError(f"head {head} does not exist: the model has {n_heads} heads (counted from 1)")
    layers = [layer - 1] if layer is not None else list(range(n_layers))
    heads = [head - 1] if head is not None else list(range(n_heads))
    return kinds, layers, heads


def attention_grid_size(n_rows: int, n_cols: int, n_tokens: int) -> tuple[float, float, float]:
    """(width_in, height_in, cell_in) of a grid of `n_rows` x `n_cols` heat maps over at most
    `n_tokens` pieces per axis: cells grow with the sentence so piece labels stay legible."""
    single = n_rows == n_cols == 1
    cell = min(max(0.16 * n_tokens + 0.6, 4.0 if single else 1.8), 8.0)
    gap = 1.0  # room for each panel's piece labels
    left, right, top, bottom = 1.6, 0.9, 0.9, 0.4
    return (
        left + n_cols * cell + (n_cols - 1) * gap + right,
        top + n_rows * cell + (n_rows - 1) * gap + bottom + gap,
        cell,
    )


def plot_attention(
    amap: AttentionMap,
    out: str | os.PathLike,
    kind: str = "all",
    layer: int | None = None,
    head: int | None = None,
    dpi: int = 100,
) -> Path:
    """Write a PNG grid of heat maps: one row per (kind, layer), one column per head.

    `layer` and `head` count from 1 like the paper's figures ("layer 5 of 6"); None means all.
    """
    kinds, layers, heads = _select(amap, kind, layer, head)
    panels = [(k, li) for k in kinds for li in layers]
    n_tok = max(len(lab) for k in kinds for lab in amap.axes(k))
    width, height, cell = attention_grid_size(len(panels), len(heads), n_tok)
    fig = new_figure(width, height, dpi)
    gap = 1.0
    fig.subplots_adjust(
        left=1.6 / width,
        right=1 - 0.9 / width,
        top=1 - 0.9 / height,
        bottom=(0.4 + gap) / height,
        wspace=gap / cell,
        hspace=gap / cell,
    )
    axes = fig.subplots(len(panels), len(heads), squeeze=False)
    fontsize = max(4.0, min(8.0, 72 * 0.8 * cell / max(n_tok, 1)))  # a label fits its cell row
    # Rows under 5 points (the 4-point floor above) would overlap their labels: label every stride-th token,
    # as matplotlib thins a crowded axis. Only long outputs (over ~115 tokens) get here.
    stride = max(1, math.ceil(n_tok * 5 / (72 * cell)))
    image = None
    for r, (k, li) in enumerate(panels):
        q_labels, k_labels = amap.axes(k)
        n_layers = len(amap.weights[k])
        k_shown, q_shown = [label_text(t) for t in k_labels[::stride]], [label_text(t) for t in q_labels[::stride]]
        for c, hi in enumerate(heads):
            ax = axes[r][c]
            image = ax.imshow(
                amap.weights[k][li][hi], vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", interpolation="nearest"
            )
            ax.set_xticks(range(0, len(k_labels), stride), k_shown, rotation=90, fontsize=fontsize)
            ax.tick_params(length=0, pad=1)
            if r == 0 or len(panels) == 1:
                ax.set_title(f"head {hi + 1}", fontsize=9)
            if c == 0:  # a row's panels share their queries: named once, at its left, beside the row's title
                ax.set_yticks(range(0, len(q_labels), stride), q_shown, fontsize=fontsize)
                ax.set_ylabel(f"{KIND_TITLES[k]}\nlayer {li + 1} of {n_layers}", fontsize=9)
            else:
                ax.set_yticks([])
    cax = fig.add_axes((1 - 0.55 / width, (0.4 + gap) / height, 0.12 / width, min(cell, height - 2.3) / height))
    assert image is not None  # at least one head was drawn
    fig.colorbar(image, cax=cax).ax.tick_params(labelsize=7)
    title = label_text(f"{amap.source}  →  {amap.translation}")
    fig.suptitle(title if len(title) < 160 else title[:157] + "...", fontsize=10, y=1 - 0.25 / height)
    return save_png(fig, out)


# -- training curves -------------------------------------------------------------------------------


def _run_labels(paths: Sequence[Path]) -> list[str]:
    """Directory names, or longer path tails where names collide."""
    for depth in range(1, 6):
        labels = [str(Path(*p.parts[-depth:])) for p in paths]
        if len(set(labels)) == len(labels):
            return labels
    return [str(p) for p in paths]


def plot_runs(
    runs: Sequence[str | os.PathLike], out: str | os.PathLike, labels: Sequence[str] | None = None, dpi: int = 100
) -> Path:
    """Training loss, validation loss (per-token NLL), validation BLEU and learning rate over steps,
    every run overlaid; writes an 11 x 8 inch PNG. Validation loss plots `nll` when logged, so runs
    with different label smoothing (Table 3 row D) compare on the same scale."""
    if not runs:
        raise PlotError("plot needs at least one run directory")
    paths = [Path(r) for r in runs]
    metrics = [read_metrics(p) for p in paths]
    names = list(labels) if labels is not None else _run_labels([p.parent if p.is_file() else p for p in paths])
    fig = new_figure(11.0, 8.0, dpi)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.93, bottom=0.08, wspace=0.22, hspace=0.3)
    axes = fig.subplots(2, 2)
    panels = [
        (axes[0][0], "train", ("loss",), "training loss"),
        (axes[0][1], "valid", ("nll", "loss"), "validation loss (NLL per token)"),
        (axes[1][0], "valid", ("bleu",), "validation BLEU"),
        (axes[1][1], "train", ("lr",), "learning rate"),
    ]
    for ax, kind, keys, title in panels:
        drawn = 0
        for m, name, color in zip(metrics, names, _colors(len(names))):
            recs = m[kind]
            key = next((k for k in keys if any(k in r for r in recs)), None)
            pts = [(r["step"], r[key]) for r in recs if key and r.get(key) is not None and math.isfinite(float(r[key]))]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(
                    xs, ys, color=color, label=label_text(name), lw=1.4, marker="o" if len(pts) < 20 else None, ms=3
                )
                drawn += 1
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        if kind == "train" and "lr" in keys:
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        if not drawn:
            ax.text(0.5, 0.5, "no records", ha="center", va="center", transform=ax.transAxes, color="gray")
    handles, legend = axes[0][0].get_legend_handles_labels()
    if not handles:
        handles, legend = axes[1][1].get_legend_handles_labels()
    if handles:
        fig.legend(handles, legend, loc="upper center", ncol=min(len(legend), 5), fontsize=8, frameon=False)
    return save_png(fig, out)


def _colors(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


# -- command line ----------------------------------------------------------------------------------


def load_for_attention(path: str) -> tuple[Transformer, Tokenizer]:
    from aiayn.decode import Translator

    translator = Translator.load(path, device="cpu", engine="torch")  # attention maps need our model
    return translator.model, translator.tokenizer


def plot_confusion(s: dict[str, Any], out: str | os.PathLike, dpi: int = 100) -> Path:
    """A confusion-matrix heat map (rows gold, columns predicted; each cell's count written in it)."""
    import numpy as np

    m = np.asarray(s["confusion"])
    names = [label_text(x) for x in s["labels"]]
    size = 2.0 + 0.45 * len(names)
    fig = new_figure(size + 1.0, size, dpi)
    ax = fig.add_subplot(1, 1, 1)
    rows = m.sum(1, keepdims=True)
    share = np.divide(m, rows, out=np.zeros(m.shape), where=rows > 0)  # colour: share of the gold row
    image = ax.imshow(share, vmin=0.0, vmax=1.0, cmap="Blues")
    for i in range(len(names)):
        for j in range(len(names)):
            ax.text(
                j,
                i,
                str(m[i, j]),
                ha="center",
                va="center",
                fontsize=8,
                color="white" if share[i, j] > 0.5 else "black",
            )
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    ax.set_title(f"accuracy {s['accuracy']:.3f}, macro F1 {s['macro_f1']:.3f}", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=7)
    fig.subplots_adjust(left=0.25, bottom=0.25, right=0.88, top=0.9)
    return save_png(fig, out)
