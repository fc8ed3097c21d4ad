"""The docs describe the code as it is: docs/architecture.md lists every module under src/aiayn, each in
the layer tests/test_layers.py gives it, and nothing else. A module added, removed, renamed or moved to
another layer fails here until the list says so."""

from __future__ import annotations

import re
from pathlib import Path

from test_layers import layer_of, module_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "aiayn"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
ROW = re.compile(r"^\| (\d) \| `([^`]+)` \| .+ \|$")


def documented_modules(text: str) -> dict[str, int]:
    """The rows of the "## Modules" table: module as written (`data/batching.py`, `data/`) -> layer."""
    section = text.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, int] = {}
    for line in section.splitlines():
        if m := ROW.match(line):
            assert m[2] not in rows, f"{m[2]} is listed twice in docs/architecture.md"
            rows[m[2]] = int(m[1])
    return rows


def doc_name(path: Path) -> str:
    """How the table writes a module file: its path under src/aiayn, a package as `name/`."""
    rel = path.relative_to(PACKAGE)
    if rel.name == "__init__.py" and rel.parent != Path("."):
        return f"{rel.parent.as_posix()}/"
    return rel.as_posix()


def test_the_module_list_of_architecture_md_matches_the_tree_and_the_layer_map():
    listed = documented_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    files = {doc_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    assert len(files) > 50 and len(listed) > 50  # the table was found and the tree was read

    assert not sorted(set(files) - set(listed)), (
        f"modules missing from docs/architecture.md's module list: {sorted(set(files) - set(listed))}"
    )
    assert not sorted(set(listed) - set(files)), (
        f"docs/architecture.md lists modules that do not exist: {sorted(set(listed) - set(files))}"
    )
    wrong = {
        name: (listed[name], layer_of(module_name(path)))
        for name, path in files.items()
        if listed[name] != layer_of(module_name(path))
    }
    assert not wrong, f"docs/architecture.md puts these modules in another layer (doc, tests/test_layers.py): {wrong}"
