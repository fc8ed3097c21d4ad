"""What `pip install aiayn` gets: the sdist and the wheel built from it (as `python -m build` builds them)
carry every file of the package (modules, recipes, the web page's static files), the license and the
README, so an installed wheel runs with no checkout. A file left out of package data fails here."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = "import sys; from setuptools import build_meta as b; print(getattr(b, sys.argv[1])(sys.argv[2]))"


def package_files() -> set[str]:
    """Every file under src/aiayn a build should ship, as `aiayn/...` (caches left out)."""
    src = ROOT / "src"
    return {
        p.relative_to(src).as_posix()
        for p in (src / "aiayn").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def build(hook: str, source: Path, out: Path) -> Path:
    """setuptools' own PEP 517 hook, offline, in a fresh process (what pip and `python -m build` call)."""
    p = subprocess.run(
        [sys.executable, "-c", BUILD, hook, str(out)], cwd=source, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return out / p.stdout.strip().splitlines()[-1]


def test_the_sdist_and_the_wheel_carry_the_whole_package(tmp_path):
    tree = tmp_path / "checkout"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    expected = package_files()
    assert {"aiayn/recipes/quickstart.yaml", "aiayn/serve/static/index.html"} <= expected

    sdist = build("build_sdist", tree, tmp_path)
    with tarfile.open(sdist) as tf:
        tf.extractall(tmp_path / "unpacked", filter="data")
        top = sdist.name.removesuffix(".tar.gz")
        names = {n.removeprefix(f"{top}/") for n in tf.getnames()}
    assert {"LICENSE", "README.md", "pyproject.toml"} <= names
    missing = expected - {n.removeprefix("src/") for n in names}
    assert not missing, f"missing from the sdist: {sorted(missing)}"

    (tmp_path / "wheel").mkdir()
    wheel = build("build_wheel", tmp_path / "unpacked" / top, tmp_path / "wheel")  # from the sdist, as pip does
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read(f"{top}.dist-info/METADATA").decode()
    assert not expected - names, f"missing from the wheel: {sorted(expected - names)}"
    assert f"{top}.dist-info/licenses/LICENSE" in names and "License-Expression: MIT" in meta
    assert (ROOT / "README.md").read_text().splitlines()[0] in meta.splitlines()  # the README is its description
