"""One import direction (issue #23): every `aiayn.*` import points down the layer map, never up.

Read with `ast`, not by importing: imports at module level and inside functions both count (a lazy
import is still a dependency); only those under `if TYPE_CHECKING:` are exempt (annotations only).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Bottom to top; a module may import from its own layer or any layer below. Longest prefix wins.
LAYERS: list[tuple[str, ...]] = [
    # 0 foundation: torch-free, imported by everything
    ("aiayn", "aiayn._lazy", "aiayn.errors", "aiayn.fileio", "aiayn.config"),
    # 1 the network (and the process-group plumbing, which knows only errors and torch)
    ("aiayn.model", "aiayn.distributed"),
    # 2 weights on disk: files, run-directory layout, averaging
    ("aiayn.checkpoint", "aiayn.averaging"),
    # 3 corpora, tokenizer, batches
    ("aiayn.data",),
    # 4 search over a model (with our search or CTranslate2 on the run's export); scoring of its output
    ("aiayn.decode", "aiayn.export", "aiayn.scoring", "aiayn.evalb"),
    # 5 training
    ("aiayn.train",),
    # 6 serving and tools
    (
        "aiayn.serve",
        "aiayn.viz",
        "aiayn.ablation",
        "aiayn.quickstart",
        "aiayn.evaluate",
    ),
    # 7 the command line: every parser (aiayn.cli.*), which reaches across packages, e.g.
    #   `aiayn evaluate` -> aiayn.evaluate
    ("aiayn.cli", "aiayn.__main__"),
]

# Known upward imports in files another branch is editing right now; fix after both merge.
ALLOWED: set[tuple[str, str]] = set()


def layer_of(module: str) -> int:
    best, best_len = None, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = i, len(p)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def aiayn_imports(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, imported module) for every aiayn import outside `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "aiayn")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] == "aiayn":
                for a in node.names:  # `from aiayn import viz` imports the module aiayn.viz
                    sub = f"{base}.{a.name}"
                    is_module = (SRC / Path(*sub.split("."))).with_suffix(".py").is_file() or (
                        SRC / Path(*sub.split(".")) / "__init__.py"
                    ).is_file()
                    found.append((node.lineno, sub if is_module else base))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def upward_imports() -> list[str]:
    bad = []
    for path in sorted((SRC / "aiayn").rglob("*.py")):
        module = module_name(path)
        for line, target in aiayn_imports(path, module):
            if layer_of(target) > layer_of(module) and (module, target) not in ALLOWED:
                bad.append(
                    f"{path.relative_to(SRC)}:{line}: {module} (layer {layer_of(module)}) imports "
                    f"{target} (layer {layer_of(target)})"
                )
    return bad


def test_every_module_has_a_layer():
    for path in (SRC / "aiayn").rglob("*.py"):
        layer_of(module_name(path))


def test_imports_point_down_the_layers():
    bad = upward_imports()
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aiayn.cli import main\n"
        "def g():\n    from aiayn.train import train\n    from . import x\n"
    )
    assert aiayn_imports(f, "aiayn.model.m") == [(5, "aiayn.train"), (6, "aiayn.model")]


def test_argument_parsing_lives_in_the_cli_package_only():
    """One CLI convention (issue #23): library modules never import argparse; every parser is in aiayn.cli."""
    bad = []
    for path in sorted((SRC / "aiayn").rglob("*.py")):
        module = module_name(path)
        if module == "aiayn.cli" or module.startswith("aiayn.cli."):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            bad += [f"{path.relative_to(SRC)}:{node.lineno}" for n in names if n.split(".")[0] == "argparse"]
    assert not bad, "argparse outside aiayn.cli: " + ", ".join(bad)


def test_every_lazy_export_resolves():
    """A package's lazy names load from the module they point to (a moved module breaks them otherwise)."""
    import importlib

    for path in sorted((SRC / "aiayn").rglob("__init__.py")):
        package = importlib.import_module(module_name(path))
        for name in getattr(package, "_EXPORTS", {}):
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"
