"""The paper's model-variation study (Table 3, §6.2) as presets, scaled to any base model.

Each row of Table 3 is a pure function `row_x(base) -> [Variant]`; a `Variant` is
(name, ModelConfig overrides, OptimConfig overrides) relative to `base`.

Scaling rule. Table 3 varies the paper's base model (N=6, d_model=512, d_ff=2048, h=8,
d_k=d_v=64, P_drop=0.1, eps_ls=0.1). Every *size* it tries is read as a multiple of the paper's
base value, and that multiple is applied to the chosen base:

    (B) d_k 16, 32        -> base d_k x 1/4, 1/2, d_v kept             (h unchanged: fewer parameters)
    (C) N 2, 4, 8         -> base N x 1/3, 2/3, 4/3 (rounded, >= 1; encoder and decoder each)
        d_model 256, 1024 -> base d_model x 1/2, 2 (d_k = d_model/h follows, d_ff unchanged, as in the paper)
        d_ff 1024, 4096   -> base d_ff x 1/2, 2

so for `small` (N=3, d_model 256, d_ff 1024, h=4, d_k 64): N 1/2/4, d_model 128/512, d_ff 512/2048,
d_k 16/32. Head counts and rates are not sizes and stay absolute:

    (A) h 1, 4, 16, 32 at constant computation: d_k = d_v = d_model/h (heads that do not divide
        d_model are left out); parameters and FLOPs equal the base's
    (D) P_drop 0.0, 0.2 and label smoothing eps_ls 0.0, 0.2
    (E) learned positional embeddings instead of sinusoids (§3.5; the other kind if base is learned)

A variant identical to the base (e.g. h=4 on `small`) or to an earlier variant is left out: it
would spend the same budget on the base row again.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from aiayn.checkpoint import read_metadata, resolve_weights
from aiayn.config import ModelConfig
from aiayn.errors import AiaynError
from aiayn.model import Transformer
from aiayn.train import train
from aiayn.train.metrics import read_metrics
from aiayn.viz import plot_runs

PAPER = dict(N=6, d_model=512, d_ff=2048, h=8, d_k=64)  # Table 3, row "base"


class AblationError(AiaynError, ValueError):
    """Unknown Table 3 rows or nothing to tabulate."""


class Variant(NamedTuple):
    name: str  # "base", "A h=1", "C d_model=128", ...
    model: dict[str, Any]  # ModelConfig overrides relative to the base
    optim: dict[str, Any]  # OptimConfig overrides (label smoothing)

    @property
    def row(self) -> str:
        return "base" if self.name == "base" else self.name.split()[0]

    @property
    def slug(self) -> str:
        """Run-directory name: 'C d_model=128' -> 'C_d_model_128'."""
        return re.sub(r"[^A-Za-z0-9]+", "_", self.name).strip("_")


def _scaled(base_value: int, paper_value: int, paper_base: int) -> int:
    return max(1, round(base_value * paper_value / paper_base))


def row_a(base: ModelConfig) -> list[Variant]:
    """(A) h = 1, 4, 16, 32 with d_k = d_v = d_model / h: the same computation for every h."""
    out = []
    for h in (1, 4, 16, 32):
        if base.d_model % h:
            continue
        model: dict[str, Any] = {"n_heads": h}
        if base.d_head is not None:
            model["d_head"] = None  # constant computation: back to d_model / h
        out.append(Variant(f"A h={h}", model, {}))
    return out


def row_b(base: ModelConfig) -> list[Variant]:
    """(B) smaller attention keys: d_k = 16, 32 (scaled from the paper's 64) at h and d_v unchanged."""
    return [
        Variant(f"B d_k={d}", {"d_head": d, "d_value": base.value_dim}, {})
        for d in (_scaled(base.head_dim, x, PAPER["d_k"]) for x in (16, 32))
    ]


def row_c(base: ModelConfig) -> list[Variant]:
    """(C) bigger and smaller models: N = 2, 4, 8; d_model = 256, 1024; d_ff = 1024, 4096 (scaled)."""
    out = []
    for n in (2, 4, 8):
        enc = _scaled(base.n_encoder_layers, n, PAPER["N"])
        dec = _scaled(base.n_decoder_layers, n, PAPER["N"])
        out.append(
            Variant(
                f"C N={enc}" if enc == dec else f"C N={enc}/{dec}",
                {"n_encoder_layers": enc, "n_decoder_layers": dec},
                {},
            )
        )
    for x in (256, 1024):
        d = _scaled(base.d_model, x, PAPER["d_model"])
        model: dict[str, Any] = {"d_model": d}
        if base.d_head is not None:
            model["d_head"] = _scaled(base.d_head, x, PAPER["d_model"])
        else:
            d = base.n_heads * max(1, round(d / base.n_heads))  # d_k = d_model / h must be whole
            model["d_model"] = d
        out.append(Variant(f"C d_model={d}", model, {}))
    for x in (1024, 4096):
        f = _scaled(base.d_ff, x, PAPER["d_ff"])
        out.append(Variant(f"C d_ff={f}", {"d_ff": f}, {}))
    return out


def row_d(base: ModelConfig) -> list[Variant]:
    """(D) regularisation: residual dropout P_drop = 0.0, 0.2; label smoothing eps_ls = 0.0, 0.2."""
    return [Variant(f"D P_drop={p}", {"dropout": p}, {}) for p in (0.0, 0.2)] + [
        Variant(f"D ls={e}", {}, {"label_smoothing": e}) for e in (0.0, 0.2)
    ]


def row_e(base: ModelConfig) -> list[Variant]:
    """(E) learned positional embeddings instead of sinusoids (§3.5)."""
    other = "sinusoidal" if base.positional == "learned" else "learned"
    return [Variant(f"E {other}", {"positional": other}, {})]


ROWS: dict[str, Callable[[ModelConfig], list[Variant]]] = {"A": row_a, "B": row_b, "C": row_c, "D": row_d, "E": row_e}


def parse_rows(spec: str | Sequence[str]) -> list[str]:
    """'A,E' or 'all' -> ['A', 'E']."""
    items = spec.replace(" ", "").split(",") if isinstance(spec, str) else list(spec)
    if items == ["all"]:
        return list(ROWS)
    rows = [r.upper() for r in items if r]
    bad = [r for r in rows if r not in ROWS]
    if bad or not rows:
        raise AblationError(f"unknown Table 3 rows {bad or spec!r}; choose from {', '.join(ROWS)} (or 'all')")
    return list(dict.fromkeys(rows))


def variants(
    rows: str | Sequence[str], base: ModelConfig, label_smoothing: float = 0.1, include_base: bool = True
) -> list[Variant]:
    """The base row followed by each requested row's variants, without duplicates of the base."""
    seen = [_effective(base, label_smoothing, Variant("base", {}, {}))]
    out = [Variant("base", {}, {})] if include_base else []
    for r in parse_rows(rows):
        for v in ROWS[r](base):
            key = _effective(base, label_smoothing, v)
            if key not in seen:
                seen.append(key)
                out.append(v)
    return out


def _effective(base: ModelConfig, label_smoothing: float, v: Variant) -> tuple:
    cfg = dataclasses.replace(base, **v.model)
    return (
        cfg.d_model,
        cfg.n_heads,
        cfg.head_dim,
        cfg.value_dim,
        cfg.d_ff,
        cfg.n_encoder_layers,
        cfg.n_decoder_layers,
        cfg.dropout,
        cfg.positional,
        v.optim.get("label_smoothing", label_smoothing),
    )


def apply(base: ModelConfig, variant: Variant) -> ModelConfig:
    return dataclasses.replace(base, **variant.model)


def count_parameters(config: ModelConfig) -> int:
    """Parameters of the model `config` describes, built on the meta device (no memory, no init cost)."""
    with torch.device("meta"):
        return Transformer(config).num_parameters()


# -- results table ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    variant: Variant
    config: ModelConfig  # the variant's resolved model
    label_smoothing: float
    params: int
    steps: int | None = None  # last logged training step
    ppl: float | None = None  # dev perplexity per subword at the last validation
    bleu: float | None = None  # dev BLEU at the last validation


def read_result(
    variant: Variant, config: ModelConfig, label_smoothing: float, run_dir: str | os.PathLike, params: int | None = None
) -> Result:
    """A finished run's numbers from RUN/metrics.jsonl: the last validation record (same budget
    for every variant, so the last one, not the best one)."""
    m = read_metrics(run_dir)
    valid = m["valid"][-1] if m["valid"] else {}
    steps = max([r["step"] for r in m["train"] + m["valid"]], default=None)
    ppl = valid.get("ppl")
    if ppl is None and valid.get("nll") is not None:
        ppl = math.exp(valid["nll"])
    return Result(
        variant,
        config,
        label_smoothing,
        params if params is not None else count_parameters(config),
        steps,
        ppl,
        valid.get("bleu"),
    )


COLUMNS = (
    "",
    "N",
    "d_model",
    "d_ff",
    "h",
    "d_k",
    "d_v",
    "P_drop",
    "ε_ls",
    "PE",
    "train steps",
    "PPL (dev)",
    "BLEU (dev)",
    "params ×10⁶",
)


def _cells(r: Result) -> list[str]:
    c = r.config
    n = (
        str(c.n_encoder_layers)
        if c.n_encoder_layers == c.n_decoder_layers
        else f"{c.n_encoder_layers}/{c.n_decoder_layers}"
    )
    return [
        n,
        str(c.d_model),
        str(c.d_ff),
        str(c.n_heads),
        str(c.head_dim),
        str(c.value_dim),
        f"{c.dropout:g}",
        f"{r.label_smoothing:g}",
        "learned" if c.positional == "learned" else "sinusoid",
    ]


def markdown_table(results: Sequence[Result]) -> str:
    """Table 3's layout: the base row in full, each variant showing only what it changes, then
    steps, dev perplexity, dev BLEU and parameter count (millions)."""
    if not results:
        raise AblationError("no results to tabulate")
    base = next((r for r in results if r.variant.name == "base"), results[0])
    base_cells = _cells(base)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join([":--"] + ["--:"] * (len(COLUMNS) - 1)) + "|"]
    last_row = None
    for r in results:
        cells = _cells(r)
        if r is not base:
            cells = [x if x != b else "" for x, b in zip(cells, base_cells)]
        row = r.variant.row
        label = "base" if row == "base" else (f"({row})" if row != last_row else "")
        last_row = row
        ppl = "" if r.ppl is None else f"{r.ppl:.2f}"
        bleu = "" if r.bleu is None else f"{r.bleu:.1f}"
        steps = "" if r.steps is None else str(r.steps)
        lines.append("| " + " | ".join([label, *cells, steps, ppl, bleu, f"{r.params / 1e6:.2f}"]) + " |")
    return "\n".join(lines) + "\n"


# -- running the study -----------------------------------------------------------------------------


def _finished(run_dir: Path, steps: int) -> bool:
    if not (run_dir / "metrics.jsonl").is_file():
        return False
    m = read_metrics(run_dir)
    return bool(m["valid"]) and m["valid"][-1]["step"] >= steps


def ablate(
    config: Any,
    rows: str | Sequence[str],
    out_dir: str | os.PathLike,
    train_fn: Callable[..., Any] | None = None,
    log: Callable[[str], None] = print,
) -> list[Result]:
    """Train the base and every variant of `rows` with `config`'s budget (same data, batch, steps
    and seed), one run directory each under `out_dir`; write out_dir/table.md and curves.png.

    `config` is an `aiayn.config.Config`; its `model` preset is the base. A variant whose run
    already finished (a validation record at the last step) is read, not retrained.
    """
    if train_fn is None:
        train_fn = train

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = config.model_config(config.data.vocab_size)  # vocabulary size does not change the variants
    ls = config.optim.label_smoothing
    results = []
    todo = variants(rows, base, ls)
    for i, v in enumerate(todo, 1):
        cfg = dataclasses.replace(
            config, model={**config.model, **v.model}, optim=dataclasses.replace(config.optim, **v.optim)
        )
        run_dir = out / v.slug
        if _finished(run_dir, config.train.max_steps):
            log(f"[{i}/{len(todo)}] {v.name}: finished earlier in {run_dir}")
        else:
            log(f"[{i}/{len(todo)}] {v.name}: training {config.train.max_steps} steps in {run_dir}")
            resume = (run_dir / "checkpoints").is_dir() and any((run_dir / "checkpoints").iterdir())
            summary = train_fn(cfg, run_dir, resume=resume)
            if isinstance(summary, dict) and summary.get("interrupted"):  # Ctrl-C / SIGTERM: stop the study
                log(f"{v.name} interrupted at step {summary.get('step')}; run the same command again to continue")
                raise KeyboardInterrupt
        model_cfg = _trained_config(run_dir) or apply(base, v)
        results.append(read_result(v, model_cfg, cfg.optim.label_smoothing, run_dir))
    table = markdown_table(results)
    (out / "table.md").write_text(_table_doc(config, table), encoding="utf-8")
    try:
        plot_runs([out / r.variant.slug for r in results], out / "curves.png", labels=[r.variant.name for r in results])
    except ImportError as e:  # the table is the result; the picture is optional
        log(f"no plot: {e}")
    return results


def _trained_config(run_dir: Path) -> ModelConfig | None:
    """The model config a run really trained (its vocabulary size included), from its weights."""
    try:
        return ModelConfig.from_dict(json.loads(read_metadata(resolve_weights(run_dir))["model_config"]))
    except Exception:  # no weights (e.g. a fake run in tests): fall back to the preset arithmetic
        return None


def _table_doc(config: Any, table: str) -> str:
    d = config.data
    return (
        f"# Table 3 at small scale: base preset `{config.model.get('preset')}`\n\n"
        f"Data: {d.corpus} {d.src_lang}→{d.tgt_lang}, vocabulary {d.vocab_size}, {d.max_tokens} tokens "
        f"per batch, {config.train.max_steps} steps per variant, seed {config.train.seed}.\n"
        "PPL: dev perplexity per subword; BLEU: dev BLEU of greedy decoding logged by the trainer, "
        "both at the last validation. Sizes scaled from the paper's base as described in "
        "`aiayn.ablation`; empty cells equal the base row.\n\n" + table
    )
