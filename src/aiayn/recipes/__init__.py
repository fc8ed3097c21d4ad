"""The recipes: training configs that ship inside the package, so `--config NAME` works from a wheel
installed anywhere, not only from a checkout (where `configs/` links here).

Each recipe is `NAME.yaml` in this directory; its first line is a comment that says in one line what it
trains (`aiayn recipes` lists them). Torch-free: `aiayn.config.read_config_file` resolves names with it.
"""

from __future__ import annotations

from pathlib import Path

from aiayn.errors import ConfigError

# The files beside this module: package data of the wheel and sdist (pyproject.toml), read in place.
HERE = Path(__file__).resolve().parent
SUFFIX = ".yaml"


def names() -> list[str]:
    """The packaged recipes' names, sorted."""
    return sorted(p.stem for p in HERE.glob("*" + SUFFIX))


def path(name: str) -> Path:
    """The packaged recipe `name` (with or without `.yaml`); ConfigError naming the others when absent."""
    stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name
    p = HERE / (stem + SUFFIX)
    if "/" in stem or "\\" in stem or not p.is_file():
        raise ConfigError(f"no recipe named {name!r}; the packaged recipes: {', '.join(names())}")
    return p


def summary(name: str) -> str:
    """The recipe's one-line description: its first line, a comment."""
    first = path(name).read_text(encoding="utf-8").partition("\n")[0]
    return first.removeprefix("#").strip()


def resolve(config: str | Path) -> Path:
    """A config argument as a file: an existing path as given, else the packaged recipe of that name.

    A path wins, so a local file is never shadowed by a recipe. A missing path that is not a recipe's
    name fails, saying which recipes there are (and, for `configs/NAME.yaml` outside a checkout, that
    `--config NAME` finds the same recipe)."""
    p = Path(config)
    if p.is_file():
        return p
    if p.parent == Path(".") or p.parent == Path(""):
        try:
            return path(p.name)
        except ConfigError:
            pass
    hint = (
        f"; the recipe {p.stem!r} ships in the package: --config {p.stem}"
        if p.suffix == SUFFIX and p.stem in names()
        else f", and no packaged recipe is named {str(config)!r} (aiayn recipes lists them)"
    )
    raise ConfigError(f"config file not found: {p}{hint}")


__all__ = ["names", "path", "summary", "resolve"]
