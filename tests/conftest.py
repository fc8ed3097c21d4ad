"""Suite-wide rules that depend on where the tests run.

Under CI (`CI` set to anything but "", 0, false or no, as CI services do and .ci/run does):
- a test marked `needs_mirror` fails when the Multi30k mirror ($AIAYN_DATA_DIR) is missing, instead
  of skipping: a CI run that silently skipped the real-data tests would report green for less;
- a test marked `needs_browser` (Selenium + headless Chromium) fails when Chromium or chromedriver
  is missing, for the same reason (.ci/run installs Debian's chromium and chromium-driver);
- Hypothesis runs derandomized (the same examples every run, no example database), so a red CI run
  is a real regression that reproduces, not a newly drawn example.
Outside CI a missing mirror or browser skips with the reason, and Hypothesis draws fresh examples.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import settings


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def multi30k_mirror() -> Path | None:
    """$AIAYN_DATA_DIR when it holds a Multi30k mirror (raw files and the tokenized references)."""
    d = os.environ.get("AIAYN_DATA_DIR")
    if d and Path(d, "train.de.gz").is_file() and Path(d, "tok").is_dir():
        return Path(d)
    return None


# Hypothesis >= 6.1xx loads a built-in profile like this one by itself when CI is in the environment;
# registering it here keeps the rule for every hypothesis>=6 that pyproject allows, and in one place.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
if in_ci():
    settings.load_profile("ci")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_mirror: uses the Multi30k mirror in $AIAYN_DATA_DIR (skipped without it; an error under CI)"
    )
    config.addinivalue_line(
        "markers",
        "needs_browser: drives headless Chromium through chromedriver (skipped without them; an error under CI)",
    )


def browser_paths() -> tuple[str, str] | None:
    """(chromium, chromedriver) when both are installed ($CHROMIUM / $CHROMEDRIVER, else on PATH)."""
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    driver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("needs_mirror") is not None and multi30k_mirror() is None:
        why = "Multi30k mirror not available (set AIAYN_DATA_DIR to a directory with train.de.gz and tok/)"
        if in_ci():
            pytest.fail(f"{why}; under CI the real-data tests must run, not skip", pytrace=False)
        pytest.skip(why)
    if item.get_closest_marker("needs_browser") is not None and browser_paths() is None:
        why = "Chromium and chromedriver not found (Debian: apt-get install chromium chromium-driver)"
        if in_ci():
            pytest.fail(f"{why}; under CI the browser test must run, not skip", pytrace=False)
        pytest.skip(why)


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty AIAYN_HOME (data cache, downloads) for one test, so no test sees another's caches."""
    monkeypatch.setenv("AIAYN_HOME", str(tmp_path / "home"))
    return tmp_path / "home"
