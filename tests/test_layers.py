"""One import direction (issue #23): every `aiayn.*` import points down the layer map, never up. And no
module reaches for another module's private `_names` (issue #34): what modules share is public.

Read with `ast`, not by importing: imports at module level and inside functions both count (a lazy
import is still a dependency); only those under `if TYPE_CHECKING:` are exempt from the layer rule
(annotations only), not from the private-name rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Bottom to top; a module may import from its own layer or any layer below. Longest prefix wins.
LAYERS: list[tuple[str, ...]] = [
    # 0 foundation: torch-free, imported by everything
    ("aiayn", "aiayn._lazy", "aiayn.errors", "aiayn.fileio", "aiayn.config", "aiayn.recipes"),
    # 1 the network (and the process-group plumbing, which knows only errors and torch)
    ("aiayn.model", "aiayn.distributed", "aiayn.devices"),
    # 2 weights on disk: files, run-directory layout, averaging; a model on the Hub as a run directory
    ("aiayn.checkpoint", "aiayn.averaging", "aiayn.hub"),
    # 3 corpora, tokenizer, batches
    ("aiayn.data",),
    # 4 search over a model (with our search or CTranslate2 on the run's export); scoring of its output
    ("aiayn.decode", "aiayn.export", "aiayn.scoring", "aiayn.evalb"),
    # 5 training
    ("aiayn.train",),
    # 6 serving and tools; aiayn.documents (what users bring, translated whole) calls decode and is called
    #   by the server and the CLI
    (
        "aiayn.documents",
        "aiayn.serve",
        "aiayn.viz",
        "aiayn.tree_plot",
        "aiayn.ablation",
        "aiayn.quickstart",
        "aiayn.evaluate",
        "aiayn.publish",
        "aiayn.argos",
        "aiayn.dual_scores",
        "aiayn.synthetic",
        "aiayn.distill",
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


def _is_module(name: str) -> bool:
    where = SRC / Path(*name.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def _from_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute name of the module a `from ... import` reads from (relative ones resolved)."""
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    return base


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
            base = _from_module(node, package)
            if base.split(".")[0] == "aiayn":
                for a in node.names:  # `from aiayn import viz` imports the module aiayn.viz
                    sub = f"{base}.{a.name}"
                    found.append((node.lineno, sub if _is_module(sub) else base))
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
        for names in getattr(package, "_EXPORTS", {}).values():
            for name in names:
                assert getattr(package, name) is not None, f"{package.__name__}.{name}"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, name) for every private name of another aiayn module that `path` reaches: imported
    (`from aiayn.x import _name`, under `if TYPE_CHECKING:` too) or read as an attribute of an aiayn
    module (`aiayn.x._name`, or `x._name` where `x` names the module by an import). A private module
    (`aiayn._lazy`) is the package's own and may be imported; its public names are what others use."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    modules: dict[str, str] = {"aiayn": "aiayn"}  # local name -> the aiayn module it is bound to
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "aiayn" and a.asname:
                    modules[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            base = _from_module(node, package)
            if base.split(".")[0] != "aiayn":
                continue
            for a in node.names:
                if _is_module(f"{base}.{a.name}"):
                    modules[a.asname or a.name] = f"{base}.{a.name}"
                elif _is_private(a.name) and base != module:
                    found.append((node.lineno, f"{base}.{a.name}"))
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
            continue
        parts, value = [], node.value
        while isinstance(value, ast.Attribute):
            parts.insert(0, value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in modules:
            owner = ".".join([modules[value.id], *parts])
            if owner != module and _is_module(owner):
                found.append((node.lineno, f"{owner}.{node.attr}"))
    return sorted(found)


def test_no_module_reaches_for_another_modules_private_names():
    """A name with a leading underscore is its module's own (issue #34): what two modules share is public
    in its proper home, so that the module that owns it can change it without breaking another."""
    bad = [
        f"{path.relative_to(SRC)}:{line}: {name}"
        for path in sorted((SRC / "aiayn").rglob("*.py"))
        for line, name in private_imports(path, module_name(path))
    ]
    assert not bad, "private names used across modules:\n" + "\n".join(bad)


def test_the_private_name_checker_sees_imports_and_attributes(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        "import aiayn.data.batching\nimport aiayn.data.pairs as p\nfrom aiayn.data import io, multi30k as m\n"
        "from aiayn.data.tokenizer import Tokenizer, _hidden\nfrom aiayn._lazy import lazy_exports\n"
        "from ..data.cache import _x\nfrom aiayn.model.m import _own\n"
        "aiayn.data.batching._gather, p._sources, io._GZIP_MAGIC, m._sha256_gz, m.__name__, io.x._y, self._z\n"
    )
    assert private_imports(f, "aiayn.model.m") == [
        (4, "aiayn.data.tokenizer._hidden"),
        (6, "aiayn.data.cache._x"),
        (8, "aiayn.data.batching._gather"),
        (8, "aiayn.data.io._GZIP_MAGIC"),
        (8, "aiayn.data.multi30k._sha256_gz"),
        (8, "aiayn.data.pairs._sources"),
    ]


# The modules that turn corpora into prepared caches. Decoding reads a run's tokenizer and weights, never
# a corpus: the constants it shares with preparation (piece names) live in aiayn.data.tokenizer.
DATA_PREPARATION = ("aiayn.data.pairs", "aiayn.data.text", "aiayn.data.cache", "aiayn.data.pipeline")


def test_decoding_does_not_import_data_preparation():
    bad = []
    for path in sorted((SRC / "aiayn" / "decode").rglob("*.py")):
        for line, target in aiayn_imports(path, module_name(path)):
            if target in DATA_PREPARATION:
                bad.append(f"{path.relative_to(SRC)}:{line}: imports {target}")
    assert not bad, "\n".join(bad)


# -- no circles, no long functions (issue #49) --------------------------------------------------------

# Circles and long functions in files another branch is editing right now (issue #49 item 1 and 2: the
# task registry and the preparation pipeline); the lead empties these after merging both.
ALLOWED_CIRCLES: set[frozenset[str]] = set()
ALLOWED_LONG: set[str] = set()
MAX_FUNCTION_LINES = 80


def _lazy_exports_of(package: str) -> dict[str, str]:
    """A package's `_EXPORTS` literal (submodule -> names), read with `ast` as everything here, as
    name -> the module that defines it."""
    path = SRC / Path(*package.split(".")) / "__init__.py"
    if not path.is_file():
        return {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            exports = ast.literal_eval(node.value)
            return {name: f"{package}.{module}" for module, names in exports.items() for name in names}
    return {}


def import_graph() -> dict[str, set[str]]:
    """module -> the aiayn modules it imports (at module level or in a function, not under TYPE_CHECKING).
    A name a package exports lazily counts as an import of the module that defines it: `from aiayn.decode
    import Translator` depends on aiayn.decode.translator, though the package's __init__ only names it."""
    graph: dict[str, set[str]] = {}
    for path in sorted((SRC / "aiayn").rglob("*.py")):
        module = module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges = graph.setdefault(module, set())
        edges.update(target for _, target in aiayn_imports(path, module))
        for node in ast.walk(tree):  # names a package exports lazily, resolved to their modules
            if isinstance(node, ast.ImportFrom) and (base := _from_module(node, package)).startswith("aiayn"):
                lazy = _lazy_exports_of(base)
                edges.update(lazy[a.name] for a in node.names if a.name in lazy and _line_counts(tree, node))
        edges.discard(module)
    return graph


def _line_counts(tree: ast.Module, node: ast.ImportFrom) -> bool:
    """Whether the import is outside every `if TYPE_CHECKING:` block."""
    for block in ast.walk(tree):
        if isinstance(block, ast.If) and _is_type_checking(block.test):
            if any(node is n for stmt in block.body for n in ast.walk(stmt)):
                return False
    return True


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same graph between aiayn's top-level parts (aiayn.decode, aiayn.export, ...): two modules
    need not import each other for their packages to (decode.translator -> export -> decode.engines)."""

    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])

    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        out.setdefault(part(module), set()).update(part(t) for t in targets if part(t) != part(module))
    return out


def test_the_import_graph_has_no_circles():
    """Not even inside one layer: a circle is two modules that cannot be read, tested or moved apart."""
    graph = import_graph()
    bad = [c for c in circles(graph) + circles(package_graph(graph)) if frozenset(c) not in ALLOWED_CIRCLES]
    assert not bad, "import circles:\n" + "\n".join(" <-> ".join(c) for c in bad)


def test_the_circle_checker_finds_a_circle_through_a_lazy_export():
    graph = {"a.x": {"a"}, "a": set(), "a.y": {"a.x"}, "a.z": {"a.y"}}
    assert circles(graph) == []
    graph["a.x"].add("a.z")
    assert circles(graph) == [["a.x", "a.y", "a.z"]]
    assert circles(package_graph({"p.a.x": {"p.b.y"}, "p.b.y": {"p.b"}, "p.b": {"p.a.z"}})) == [["p.a", "p.b"]]
    assert "aiayn.decode.translator" in import_graph()["aiayn.cli.translate"]  # `from aiayn.decode import ...`


def long_functions() -> list[str]:
    bad = []
    for path in sorted((SRC / "aiayn").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                where = f"{path.relative_to(SRC)}:{node.name}"
                if lines > MAX_FUNCTION_LINES and where not in ALLOWED_LONG:
                    bad.append(f"{where} (line {node.lineno}): {lines} lines")
    return bad


def test_no_function_is_over_80_lines():
    """A function a reader can hold at once (issue #49); nested functions count in their parent."""
    bad = long_functions()
    assert not bad, "functions over 80 lines, split them into their steps:\n" + "\n".join(bad)
