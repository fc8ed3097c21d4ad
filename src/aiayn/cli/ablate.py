"""`aiayn ablate`: Table 3's model variations (parsing only; the study lives in aiayn.ablation)."""

from __future__ import annotations

import argparse
from pathlib import Path

from aiayn.config import Config, parse_overrides


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ablate",
        help="train Table 3's model variations at small scale and tabulate them",
        description="Trains the base preset and each variant of the chosen Table 3 rows with "
        "the same budget; writes OUT/table.md and OUT/curves.png.",
    )
    p.add_argument("--rows", default="all", help="Table 3 rows, e.g. A,E (default: all = A,B,C,D,E)")
    p.add_argument("--preset", help="base model preset: base | big | small | tiny (default: config's, else small)")
    p.add_argument("--data", help="corpus: multi30k | embedded | files (default: config's)")
    p.add_argument("--steps", type=int, help="training steps per variant (the same budget for all)")
    p.add_argument("-c", "--config", help="base YAML/TOML config, a file or a recipe's name (e.g. multi30k_de_en)")
    p.add_argument("-o", "--out", default="runs/ablation", help="output directory (default: runs/ablation)")
    p.add_argument("--dry-run", action="store_true", help="list the variants and their sizes, train nothing")
    p.add_argument(
        "-s",
        "--set",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="config override, repeatable (e.g. --set train.eval_every=200)",
    )

    def run(a: argparse.Namespace) -> int:
        from aiayn.ablation import ablate, apply, count_parameters, variants

        overrides = parse_overrides([f"--{kv}" for kv in a.set])
        if a.preset:
            overrides["model.preset"] = a.preset
        if a.data:
            overrides["data.corpus"] = a.data
        if a.steps:
            overrides["train.max_steps"] = a.steps
        cfg = Config.load(a.config, overrides)
        if a.dry_run:
            base = cfg.model_config(cfg.data.vocab_size)
            for v in variants(a.rows, base, cfg.optim.label_smoothing):
                n = count_parameters(apply(base, v))
                print(f"{v.name:<18} {n / 1e6:8.2f}M  model {v.model or '-'}  optim {v.optim or '-'}")
            return 0
        ablate(cfg, a.rows, a.out)
        print(Path(a.out) / "table.md")
        return 0

    p.set_defaults(run=run)
