"""Pictures (issue 8): attention heat maps of a real model + sentencepiece tokenizer, training curves
from real metrics.jsonl files, decoded back as images; the CLI as a real process."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import plotted
from aiayn import viz
from aiayn.checkpoint import save_weights
from aiayn.config import BOS_ID, EOS_ID, ModelConfig
from aiayn.data.tokenizer import Tokenizer
from aiayn.model import Transformer
from aiayn.train.metrics import MetricsError, read_metrics
from inprocess import run_aiayn

SENTENCE = "Ein Hund rennt über die Wiese."
CORPUS = [
    SENTENCE,
    "Zwei Männer spielen Fußball im Park.",
    "Eine Frau liest ein Buch am Fluss.",
    "Ein Kind rennt mit einem Ball.",
    "Die Hunde spielen auf der Wiese.",
    "Ein Mann fährt Fahrrad.",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory with a tiny model trained to copy its input (so greedy decoding stops on its
    own) and the sentencepiece model it was trained with."""
    run = tmp_path_factory.mktemp("run")
    tok = Tokenizer.train(CORPUS * 20, run / "spm.model", vocab_size=330, threads=1)
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=tok.vocab_size, dropout=0.0))
    pairs = [tok.encode(s) for s in CORPUS]
    S = max(map(len, pairs)) + 1
    src = torch.tensor([p + [EOS_ID] + [0] * (S - len(p) - 1) for p in pairs])  # (6, S)
    tgt_in = torch.tensor([[BOS_ID] + p + [0] * (S - len(p) - 1) for p in pairs])
    tgt_out = torch.tensor([p + [EOS_ID] + [0] * (S - len(p) - 1) for p in pairs])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is ~20x faster on a busy 2-core machine
    try:
        for step in range(300):
            loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=0)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 10 == 9 and greedy(model.eval(), tok.encode(SENTENCE)) == tok.encode(SENTENCE):
                break
            model.train()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    save_weights(model, run / "best.safetensors", step=1)
    return run, model, tok


def greedy(model, ids, max_len=40):
    """A plain greedy loop without the cache, to cross-check the library's decoding."""
    src, out = torch.tensor([ids + [EOS_ID]]), [BOS_ID]
    with torch.no_grad():
        for _ in range(max_len):
            nxt = int(model(src, torch.tensor([out]))[0, -1].argmax())
            if nxt == EOS_ID:
                break
            out.append(nxt)
    return out[1:]


def test_attention_map_pairs_pieces_with_weights(run_dir):
    _, model, tok = run_dir
    own = greedy(model, tok.encode(SENTENCE))
    assert tok.decode(own) == SENTENCE  # the copy task was learned: decoding stops by itself
    amap = viz.attention_map(model, tok, SENTENCE)  # translation from the library's greedy search
    assert amap.out_labels[:-1] == tok.pieces(SENTENCE) and amap.translation == SENTENCE
    same = viz.attention_map(model, tok, SENTENCE, target_ids=own)
    assert amap.tgt_labels == same.tgt_labels
    S, T = len(tok.encode(SENTENCE)) + 1, len(own) + 1
    assert amap.src_labels == tok.pieces(SENTENCE) + ["</s>"] and len(amap.src_labels) == S
    assert amap.tgt_labels[0] == "<s>" and amap.out_labels[-1] == "</s>" and len(amap.tgt_labels) == T
    for kind, shape in [("encoder", (4, S, S)), ("decoder", (4, T, T)), ("cross", (4, T, S))]:
        assert len(amap.weights[kind]) == 2
        for w in amap.weights[kind]:
            assert w.shape == shape
            np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)  # each query's distribution
    assert np.triu(amap.weights["decoder"][0], k=1).max() == 0  # no look-ahead
    assert model.training is False


def png_shape(path):
    import matplotlib.image as mpimg

    return mpimg.imread(path).shape


def test_attention_png_grid_and_single_panel(run_dir, tmp_path):
    import matplotlib  # noqa: F401  a [test] dependency: missing, the test fails instead of skipping

    _, model, tok = run_dir
    amap = viz.attention_map(model, tok, SENTENCE)
    n_tok = max(len(amap.src_labels), len(amap.tgt_labels))

    grid = viz.plot_attention(amap, tmp_path / "all.png")  # 3 kinds x 2 layers rows, 4 head columns
    w, h, _ = viz.attention_grid_size(6, 4, n_tok)
    img = np.asarray(png_shape(grid))
    assert tuple(img[:2]) == (round(h * 100), round(w * 100))
    assert grid.stat().st_size > 50_000

    one = viz.plot_attention(amap, tmp_path / "one.png", kind="cross", layer=2, head=3, dpi=80)
    w1, h1, cell = viz.attention_grid_size(1, 1, n_tok)
    assert png_shape(one)[:2] == (round(h1 * 80), round(w1 * 80)) and cell >= 4.0

    import matplotlib.image as mpimg

    a = mpimg.imread(viz.plot_attention(amap, tmp_path / "h1.png", kind="cross", layer=2, head=1))
    b = mpimg.imread(viz.plot_attention(amap, tmp_path / "h2.png", kind="cross", layer=2, head=2))
    assert a.shape == b.shape and np.abs(a - b).sum() > 0  # different heads, different pictures
    assert a[..., :3].std() > 0.05  # not a blank canvas


@pytest.mark.parametrize("n", [12, 300])
def test_every_piece_is_labelled_unless_the_labels_would_overlap(n, tmp_path, monkeypatch):
    """A long (or runaway) output: past the 4-point type floor a label would overlap the next row's, so
    every stride-th piece is labelled, first piece included, and the labels that are drawn do not touch."""
    pieces = [f"p{i}" for i in range(n)]
    w = np.random.default_rng(0).dirichlet(np.ones(n), size=(1, n))  # (h, T_q, T_k)
    amap = viz.AttentionMap("s", "t", pieces, ["<s>", *pieces[1:]], pieces, {"cross": [w]})
    with plotted.figures(monkeypatch) as saved:
        out = viz.plot_attention(amap, tmp_path / "a.png", kind="cross")
    ax = saved[out].axes[0]
    xs = [t.get_text() for t in ax.get_xticklabels()]
    ys = [t.get_text() for t in ax.get_yticklabels()]
    stride = math.ceil(n / len(xs))
    assert xs == ys == pieces[::stride]
    if n == 12:
        assert stride == 1
    else:
        assert stride > 1
        height_pt = ax.get_position().height * saved[out].get_figheight() * 72
        assert height_pt / n * stride >= 5 > height_pt / n * (stride - 1)  # no wider apart than needed


def test_a_row_of_heads_labels_its_queries_once(tmp_path, monkeypatch):
    """The heads of one row share their queries: the leftmost panel names them, the others do not repeat
    them (half the labels to lay out for a grid of 4-8 heads); every panel names its keys."""
    pieces = [f"p{i}" for i in range(6)]
    w = np.random.default_rng(0).dirichlet(np.ones(6), size=(3, 6))  # (h, T_q, T_k)
    amap = viz.AttentionMap("s", "t", pieces, ["<s>", *pieces[1:]], pieces, {"cross": [w, w]})
    with plotted.figures(monkeypatch) as saved:
        out = viz.plot_attention(amap, tmp_path / "a.png", kind="cross")
    panels = [ax for ax in saved[out].axes if ax.images]  # the colour bar has no image
    assert len(panels) == 6
    for i, ax in enumerate(panels):  # row-major: 2 layers x 3 heads
        ys = [t.get_text() for t in ax.get_yticklabels()]
        assert ys == (pieces if i % 3 == 0 else []), i
        assert [t.get_text() for t in ax.get_xticklabels()] == pieces


def test_bad_selection_says_what_exists(run_dir, tmp_path):
    _, model, tok = run_dir
    amap = viz.attention_map(model, tok, SENTENCE, target_ids=[10, 11])
    with pytest.raises(ValueError, match="has 2 layers"):
        viz.plot_attention(amap, tmp_path / "x.png", layer=3)
    with pytest.raises(ValueError, match="has 4 heads"):
        viz.plot_attention(amap, tmp_path / "x.png", head=0)
    with pytest.raises(ValueError, match="--kind"):
        viz.plot_attention(amap, tmp_path / "x.png", kind="self")
    assert not (tmp_path / "x.png").exists()


def test_missing_matplotlib_gives_the_install_hint(tmp_path, monkeypatch):
    write_metrics(tmp_path / "r", [(1, 2.0)], [])
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # import of these now fails
    with pytest.raises(ImportError, match=r"pip install 'aiayn\[plot\]'"):
        viz.plot_runs([tmp_path / "r"], tmp_path / "c.png")


# -- training curves -------------------------------------------------------------------------------


def write_metrics(run, train, valid, tail=""):
    run.mkdir(parents=True, exist_ok=True)
    with open(run / "metrics.jsonl", "w") as f:
        for step, loss in train:
            f.write(
                json.dumps(
                    {
                        "kind": "train",
                        "step": step,
                        "loss": loss,
                        "nll": loss - 0.2,
                        "ppl": math.exp(loss - 0.2),
                        "lr": 1e-3 * min(1, step / 100),
                        "tokens_per_s": 5000.0,
                        "elapsed": step / 10,
                    }
                )
                + "\n"
            )
        for step, nll, bleu in valid:
            f.write(
                json.dumps(
                    {"kind": "valid", "step": step, "loss": nll + 0.3, "nll": nll, "ppl": math.exp(nll), "bleu": bleu}
                )
                + "\n"
            )
        f.write(tail)


def test_read_metrics_resume_duplicates_and_a_cut_last_line(tmp_path):
    # Crashed after step 30, resumed from the step-20 checkpoint: steps 20-30 are logged twice.
    write_metrics(
        tmp_path / "r",
        [(10, 5.0), (20, 4.0), (30, 3.5), (20, 4.1), (30, 3.4), (40, 3.0)],
        [(20, 3.9, 5.0), (40, 2.9, 9.0)],
        tail='{"kind": "train", "st',
    )
    m = read_metrics(tmp_path / "r")
    assert [r["step"] for r in m["train"]] == [10, 20, 30, 40]
    assert [r["loss"] for r in m["train"]] == [5.0, 4.1, 3.4, 3.0]  # the resumed run's records win
    assert [r["bleu"] for r in m["valid"]] == [5.0, 9.0]

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "metrics.jsonl").write_text(
        '{"kind": "train", "step": 1}\nnot json\n{"kind": "x", "step": 2}\n'
    )
    with pytest.raises(ValueError, match=r"metrics.jsonl:2"):
        read_metrics(tmp_path / "bad")
    with pytest.raises(MetricsError, match="metrics.jsonl"):
        read_metrics(tmp_path / "nowhere")


def test_plot_runs_overlays_runs(tmp_path, monkeypatch):
    import matplotlib  # noqa: F401  a [test] dependency: missing, the test fails instead of skipping
    import matplotlib.image as mpimg

    train = [(s, 6 * math.exp(-s / 300) + 2) for s in range(20, 1001, 20)]
    valid = [(s, 3 - s / 1000, s / 40) for s in (250, 500, 750, 1000)]
    write_metrics(tmp_path / "a", train, valid)
    write_metrics(tmp_path / "b", [(s, x + 0.5) for s, x in train], [])  # no validation yet
    with plotted.figures(monkeypatch) as figs:
        both = viz.plot_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "both.png")
        only_b = viz.plot_runs([tmp_path / "b"], tmp_path / "b.png")
    x, y = mpimg.imread(both), mpimg.imread(only_b)
    assert x.shape[:2] == y.shape[:2] == (800, 1100)
    steps = [s for s, _ in train]
    lr = [1e-3 * min(1, s / 100) for s in steps]
    assert plotted.panels(figs[both]) == {  # each panel shows each run's own records
        "training loss": {"a": (steps, [v for _, v in train]), "b": (steps, [v + 0.5 for _, v in train])},
        "validation loss (NLL per token)": {"a": ([s for s, _, _ in valid], [n for _, n, _ in valid])},
        "validation BLEU": {"a": ([s for s, _, _ in valid], [b for _, _, b in valid])},
        "learning rate": {"a": (steps, lr), "b": (steps, lr)},
    }
    shown = plotted.panels(figs[only_b])
    assert shown["validation loss (NLL per token)"] == shown["validation BLEU"] == {}  # "no records"
    assert list(shown["training loss"]) == ["b"]
    # and the PNG shows both runs' colours (tab10's first two), the one-run PNG only the first
    blue, orange = (0x1F / 255, 0x77 / 255, 0xB4 / 255), (0xFF / 255, 0x7F / 255, 0x0E / 255)
    assert plotted.color_pixels(both, blue) > 500 and plotted.color_pixels(both, orange) > 500
    assert plotted.color_pixels(only_b, blue) > 500 and plotted.color_pixels(only_b, orange) == 0


def run_cli(*args, cwd=None):
    return run_aiayn(*args, text=True, cwd=cwd)


def test_cli_attention_and_plot(run_dir, tmp_path):
    import matplotlib  # noqa: F401  a [test] dependency: missing, the test fails instead of skipping

    run, _, _ = run_dir
    r = run_cli("attention", "-c", run, SENTENCE, "--kind", "cross", "--layer", "1", "-o", tmp_path / "a.png")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "a.png") and png_shape(tmp_path / "a.png")[0] > 300
    r = run_cli("attention", "-c", run, SENTENCE, "--layer", "9")
    assert (
        r.returncode == 2
        and r.stderr.strip() == "error: layer 9 does not exist: the model has 2 layers (counted from 1)"
    ), r.stderr

    write_metrics(tmp_path / "r1", [(10, 4.0), (20, 3.0)], [(20, 2.5, 12.0)])
    r = run_cli("plot", tmp_path / "r1")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "r1" / "plots" / "curves.png"
    assert r.stdout.strip() == str(out) and png_shape(out)[:2] == (800, 1100)


def test_a_tree_is_drawn_words_in_order_each_constituent_over_its_span(tmp_path, monkeypatch):
    from aiayn.data.treebank import Tree, parse_tree
    from aiayn.tree_plot import plot_tree

    tree = parse_tree("(TOP (S (NP (DT The) (NNS mice)) (VP (VBD ran) (PP (IN to) (NP (NN food)))) (. .)))")
    with plotted.figures(monkeypatch) as saved:
        out = plot_tree(tree, tmp_path / "tree.png", dpi=40)
    assert plt_image(out).shape[:2] == (166, 216)  # (0.55 inch x 7 rows + 0.3) and 0.9 inch x 6 words, at 40 dpi
    ax = saved[out].axes[0]
    at = {}
    for t in ax.texts:
        at.setdefault(t.get_text(), []).append(t.get_position())
    words = ["The", "mice", "ran", "to", "food", "."]
    assert [at[w][0] for w in words] == [(i, 6) for i in range(6)]  # the bottom row, in order
    assert at["PP"] == [(3.5, 3)] and at["VP"] == [(2.75, 2)]  # centred over their children
    assert at["S"] == [((0.5 + 2.75 + 5) / 3, 1)] and at["TOP"] == [(2.75, 0)]
    edges = {((ln.get_xdata()[0], ln.get_ydata()[0]), (ln.get_xdata()[1], ln.get_ydata()[1])) for ln in ax.lines}
    assert ((3.5, 3), (3, 4)) in edges and ((3.5, 3), (4, 4)) in edges  # PP to IN and to NP
    assert len(edges) == len(ax.texts) - 1  # a tree: one edge into every node but the root
    with pytest.raises(viz.PlotError, match="without words"):
        plot_tree(Tree("TOP", [Tree("S")]), tmp_path / "empty.png")


def plt_image(path):
    import matplotlib.image

    return matplotlib.image.imread(path)
