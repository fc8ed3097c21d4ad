"""`aiayn train` and `aiayn average` (parsing only; the loop lives in aiayn.train)."""

from __future__ import annotations

import argparse

from aiayn import registry
from aiayn.cli._args import collect_overrides


def register(sub: argparse._SubParsersAction) -> None:
    _add_train(sub)
    _add_recipes(sub)
    _add_average(sub)


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a model (paper §5); resumable",
        description="Train from a YAML/TOML config; any field can be overridden as --section.field VALUE "
        "(e.g. --optim.lr_scale 2 --model.d_model 256 --train.max_steps 1000). Under torchrun "
        "(`torchrun --nproc_per_node=N -m aiayn train ...`) it trains with DDP.",
        epilog="resume after a crash or Ctrl-C: aiayn train --resume RUN_DIR [overrides]; fine-tune: "
        "aiayn train --init-from RUN_DIR --run-dir NEW_RUN [--config ...] [overrides]",
    )
    p.add_argument("--config", help="a YAML or TOML file, or a packaged recipe's name (`aiayn recipes` lists them)")
    p.add_argument(
        "--task",
        help="what to train (sets task.name; default translate, the paper's): one of "
        f"{', '.join(registry.task_paths())} (aiayn.train.tasks; a task's own settings: --task.KEY VALUE)",
    )
    _add_run_args(p)
    p.set_defaults(run=_train)
    collect_overrides(p)


def _add_run_args(p: argparse.ArgumentParser) -> None:
    """Which run: a new one, one to resume, or a new one that starts from another's weights."""
    p.add_argument("--run-dir", "-o", help="run directory (config, tokenizer, checkpoints, metrics)")
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue RUN_DIR from its newest usable checkpoint, with its config.yaml (plus any overrides)",
    )
    p.add_argument(
        "--init-from",
        metavar="RUN_OR_WEIGHTS",
        help="fine-tune: start from these weights (a run directory's default: its weights.json's, else best, "
        "else newest; or a .safetensors file) and their spm.model, with a fresh optimizer and schedule at "
        "step 0; without --config the run directory's config.yaml is the base",
    )


def _train(a: argparse.Namespace) -> int:
    from pathlib import Path

    from aiayn.config import Config, ConfigError

    overrides = list(a.overrides or []) + (["--task.name", a.task] if a.task else [])
    if a.resume:
        run_dir = Path(a.resume)
        saved = run_dir / "config.yaml"
        if not saved.is_file():
            raise ConfigError(f"cannot resume: {saved} not found (is {run_dir} a run directory?)")
        cfg = Config.load(a.config or str(saved), overrides)
        if a.init_from:
            raise ConfigError("--init-from starts a new run; --resume continues one from its own checkpoints")
    else:
        if not a.run_dir:
            raise ConfigError("give a run directory with --run-dir (or --resume RUN_DIR)")
        run_dir = Path(a.run_dir)
        base = a.config
        if base is None and a.init_from and (Path(a.init_from) / "config.yaml").is_file():
            base = str(Path(a.init_from) / "config.yaml")
        cfg = Config.load(base, overrides)
    if not a.resume:  # the command that made the run, for its model card (aiayn push); resumes keep it
        import shlex

        from aiayn.fileio import atomic_write

        run_dir.mkdir(parents=True, exist_ok=True)
        line = shlex.join(["aiayn", *a.argv]) + "\n"
        atomic_write(run_dir / "command.txt", lambda tmp: Path(tmp).write_text(line, encoding="utf-8"))
    from aiayn.train import train  # torch loads here, after the settings checked out: a typo fails at once

    summary = train(cfg, run_dir, resume=bool(a.resume), init_from=a.init_from)
    return 130 if summary["interrupted"] else 0


def _add_recipes(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "recipes",
        help="list the training recipes that ship with aiayn (--config NAME), or print one",
        description="Without NAME: each packaged recipe, one line each. With NAME: the recipe's file, to read "
        "or to copy and edit (aiayn recipes quickstart > my.yaml; aiayn train --config my.yaml ...).",
    )
    p.add_argument("name", nargs="?", help="a recipe to print")
    p.set_defaults(run=_recipes)


def _recipes(a: argparse.Namespace) -> int:
    from aiayn import recipes

    if a.name:
        print(recipes.path(a.name).read_text(encoding="utf-8"), end="")
        return 0
    names = recipes.names()
    width = max(map(len, names))
    for name in names:
        print(f"{name:<{width}}  {recipes.summary(name)}")
    return 0


def _add_average(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("average", help="average the last N checkpoints of a run (paper §6.1)")
    p.add_argument("run_dir")
    p.add_argument("--last", type=int, default=5)
    p.add_argument("-o", "--output", help="output weights file (default: RUN_DIR/average_lastN.safetensors)")
    p.add_argument(
        "--default",
        action="store_true",
        help="make the average the run's default weights (RUN_DIR/weights.json): what translate, evaluate, "
        "serve, export and push load for -c RUN_DIR; the output must lie inside the run",
    )
    p.set_defaults(run=_average)


def _average(a: argparse.Namespace) -> int:
    from pathlib import Path

    from aiayn.averaging import average_run
    from aiayn.checkpoint import DEFAULT_WEIGHTS

    out = Path(a.output or Path(a.run_dir) / f"average_last{a.last}.safetensors")
    path = average_run(
        a.run_dir, a.last, out, default_because="made the default by aiayn average --default" if a.default else None
    )
    print(f"wrote {path}")
    if a.default:
        print(f"{Path(a.run_dir) / DEFAULT_WEIGHTS}: -c {a.run_dir} now loads {path}")
    return 0
