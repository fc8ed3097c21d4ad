"""Suite-wide rules that depend on where the tests run.

The Multi30k mirror rule (one rule, enforced here rather than by a list):
- a test that reads the mirror is marked `needs_mirror`; only such a test sees `$AIAYN_DATA_DIR`
  (in its own process and in every process it starts) and may call `multi30k_mirror()`;
- every other test runs as on a new user's machine: no `$AIAYN_DATA_DIR`, and the Multi30k, Tiny
  Shakespeare and CRAFT download addresses point at a closed port on 127.0.0.1, so a test that reads
  either corpus without the mark fails at once, with or without a network, instead of passing here
  and failing on a machine without the mirror;
- without the mirror a marked test skips with a one-line reason; under CI it fails instead, so a CI
  run that was meant to cover the real-data tests cannot report green for less.

The shared reference data rule (the same shape): a test that reads the project's shared reference data
(EVALB's C source and sample, the CRAFT treebank: `$AIAYN_SHARED_DATA`, else `<repo>/../shared/data`) is
marked `needs_shared` and gets its files from `shared_data(name)`; unmarked, shared_data() fails the test;
without the data a marked test skips with a one-line reason, and fails under CI.

Also:
- a test marked `needs_browser` (Selenium + headless Chromium) skips without Chromium and
  chromedriver, and fails under CI (.ci/run installs Debian's chromium and chromium-driver);
- a test marked `needs_argos` (an installed Argos Translate package) skips without argostranslate
  (pyproject's `argos` extra), and fails under CI;
- `$AIAYN_HOME` (caches, downloads, locks) is a temporary directory for the whole run, so no test
  writes to the user's ~/.cache/aiayn; the `home` fixture gives a test an empty one of its own;
- under pytest-xdist each worker process gets an equal share of the cores for torch's threads;
- under CI (`CI` set to anything but "", 0, false or no) Hypothesis runs derandomized (the same
  examples every run), so a red CI run is a real regression that reproduces; it keeps no example
  database anywhere (a failure prints the blob that reproduces it), and its cache of source constants
  lives in a temporary directory;
- no test writes outside its temporary directories: a session that leaves a new file in the directory
  it ran from (the checkout, caches aside) or in ~/.cache/aiayn fails, naming the files;
- modules are collected longest first, by their times in tests/durations.json (`--store-durations`
  rewrites it from a run), so that pytest-xdist, handing modules out in that order, ends the run with a
  short module on each worker rather than one worker busy with a long one while the other idles.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

# Nothing listens on the discard port of the loopback address: a download from it fails at once.
CLOSED_URL = "http://127.0.0.1:9/"
_MIRROR_VAR = "AIAYN_DATA_DIR"
# The mirror is taken out of the environment as soon as the suite starts and handed back only to
# marked tests. The value is kept under another name so that pytest-xdist's worker processes, which
# inherit the environment of the process that starts them, find it too.
_MIRROR = os.environ.pop(_MIRROR_VAR, None) or os.environ.get("AIAYN_TEST_MIRROR")
if _MIRROR:
    os.environ["AIAYN_TEST_MIRROR"] = _MIRROR
_running: pytest.Item | None = None  # the test being set up or run in this process
_SHARED_VAR = "AIAYN_SHARED_DATA"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _mirror_path() -> Path | None:
    if _MIRROR and Path(_MIRROR, "train.de.gz").is_file() and Path(_MIRROR, "tok").is_dir():
        return Path(_MIRROR)
    return None


def multi30k_mirror() -> Path:
    """The Multi30k mirror (raw files and the tokenized references), for a test marked needs_mirror;
    called from any other test (or a fixture it uses) it fails that test."""
    if _running is None or _running.get_closest_marker("needs_mirror") is None:
        name = _running.nodeid if _running is not None else "a test"
        pytest.fail(f"{name} reads the Multi30k mirror but is not marked needs_mirror", pytrace=False)
    path = _mirror_path()
    assert path is not None  # pytest_runtest_setup skipped (or failed) the test otherwise
    return path


def _shared_root() -> Path:
    return Path(os.environ.get(_SHARED_VAR) or Path(__file__).resolve().parents[2] / "shared" / "data")


def shared_data(name: str) -> Path:
    """`name` (a file or directory, e.g. "evalb" or "craft-treebank/craft-penn-trees.tgz") in the shared
    reference data, for a test marked needs_shared; called from any other test it fails that test, and a
    marked test whose `name` is missing skips (fails under CI)."""
    if _running is None or _running.get_closest_marker("needs_shared") is None:
        who = _running.nodeid if _running is not None else "a test"
        pytest.fail(f"{who} reads the shared reference data but is not marked needs_shared", pytrace=False)
    path = _shared_root() / name
    if not path.exists():
        why = f"shared reference data {name} not found under {_shared_root()} (set {_SHARED_VAR})"
        if in_ci():
            pytest.fail(f"{why}; under CI the real-data tests must run, not skip", pytrace=False)
        pytest.skip(why)
    return path


# Hypothesis >= 6.1xx loads a built-in profile like this one by itself when CI is in the environment;
# registering it here keeps the rule for every hypothesis>=6 that pyproject allows, and in one place.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
settings.register_profile("local", database=None, print_blob=True)
settings.load_profile("ci" if in_ci() else "local")
# Hypothesis also caches what it reads from source files in its home directory, ./.hypothesis by default:
# a temporary one instead, unless the user chose one.
if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
    _hypothesis_home = tempfile.mkdtemp(prefix="aiayn-hypothesis-")
    atexit.register(shutil.rmtree, _hypothesis_home, True)
    set_hypothesis_home_dir(_hypothesis_home)

_BEFORE = pytest.StashKey[dict[Path, set[str]]]()

# What a test run itself may leave behind in the directory it runs from: caches of tools, not of tests.
_TOOL_CACHES = {".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def _files_below(root: Path) -> set[str]:
    if not root.is_dir():
        return set()
    found: set[str] = set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in _TOOL_CACHES and not x.endswith(".egg-info")]
        found.update(os.path.relpath(os.path.join(d, f), root) for f in files)
    return found


def _watched() -> dict[Path, set[str]]:
    return {root: _files_below(root) for root in (Path.cwd(), Path.home() / ".cache" / "aiayn")}


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller (or a run without xdist) watches
        session.config.stash[_BEFORE] = _watched()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, None)
    if before is not None:
        stray = [str(root / f) for root, files in _watched().items() for f in sorted(files - before.get(root, set()))]
        if stray:
            shown = ", ".join(stray[:10]) + (f" and {len(stray) - 10} more" if len(stray) > 10 else "")
            print(f"\nERROR: the tests wrote outside their temporary directories: {shown}", file=sys.stderr)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if _module_times:  # after the check above: the file is the option's output, not a test's
        _store_durations(session.config.rootpath, _module_times)


_DURATIONS = Path(__file__).with_name("durations.json")
_module_times: dict[str, float] | None = None  # each module's time in this run, with --store-durations


def _module(nodeid: str) -> str:
    return nodeid.split("::")[0]


def _known_durations() -> dict[str, float]:
    return json.loads(_DURATIONS.read_text()) if _DURATIONS.exists() else {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-durations",
        action="store_true",
        help="write each module's time in this run (setup and teardown included) into tests/durations.json, "
        "the order the modules are handed out in",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest module first (LPT scheduling): with `--dist loadscope --no-loadscope-reorder` each idle
    worker takes the next module in this order, so the last ones handed out are the shortest."""
    known = _known_durations()
    untimed = max(known.values(), default=0.0)  # a module not timed yet goes first: it may be long
    items.sort(key=lambda item: -known.get(_module(item.nodeid), untimed))  # stable: a module keeps its order


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _module_times is not None:  # setup, call and teardown: a module fixture's time is its module's
        key = _module(report.nodeid)
        _module_times[key] = _module_times.get(key, 0.0) + report.duration


def _store_durations(root: Path, measured: dict[str, float]) -> None:
    times = {**_known_durations(), **{k: round(v, 1) for k, v in measured.items()}}
    times = {k: v for k, v in sorted(times.items()) if (root / k).exists()}  # modules since removed go
    _DURATIONS.write_text(json.dumps(times, indent=0) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    global _module_times
    if config.getoption("store_durations") and not hasattr(config, "workerinput"):  # the controller adds up
        _module_times = {}
    config.addinivalue_line(
        "markers",
        "needs_mirror: reads the Multi30k mirror in $AIAYN_DATA_DIR (skipped without it; an error under CI); "
        "no other test sees the mirror",
    )
    config.addinivalue_line(
        "markers",
        "needs_shared: reads the shared reference data through shared_data() ($AIAYN_SHARED_DATA, else "
        "<repo>/../shared/data; skipped without it, an error under CI)",
    )
    config.addinivalue_line(
        "markers",
        "needs_browser: drives headless Chromium through chromedriver (skipped without them; an error under CI)",
    )
    config.addinivalue_line(
        "markers",
        "needs_argos: installs and runs an Argos Translate package (skipped without argostranslate; an error under CI)",
    )
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        # Two workers with torch's default of one thread per core would each wait on the other's threads;
        # the environment variable gives the same share to every process a test starts (CLI runs, DDP ranks,
        # data-preparation pools), which otherwise take a thread per core each.
        import torch

        share = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(share)
        os.environ["OMP_NUM_THREADS"] = str(share)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown without the plugin
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker per core, at most 8 (each test trains its own small models)."""
    return max(1, min(os.cpu_count() or 1, 8))


def browser_paths() -> tuple[str, str] | None:
    """(chromium, chromedriver) when both are installed ($CHROMIUM / $CHROMEDRIVER, else on PATH)."""
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    driver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


def pytest_runtest_setup(item: pytest.Item) -> None:
    global _running
    _running = item
    if item.get_closest_marker("needs_mirror") is not None and _mirror_path() is None:
        why = "Multi30k mirror not available: set AIAYN_DATA_DIR to a directory with train.de.gz and tok/ to run it"
        if in_ci():
            pytest.fail(f"{why}; under CI the real-data tests must run, not skip", pytrace=False)
        pytest.skip(why)
    if item.get_closest_marker("needs_shared") is not None and not _shared_root().is_dir():
        why = f"shared reference data not found: set {_SHARED_VAR} to the directory holding evalb/, craft-treebank/"
        if in_ci():
            pytest.fail(f"{why}; under CI the real-data tests must run, not skip", pytrace=False)
        pytest.skip(why)
    if item.get_closest_marker("needs_browser") is not None and browser_paths() is None:
        why = "Chromium and chromedriver not found (Debian: apt-get install chromium chromium-driver)"
        if in_ci():
            pytest.fail(f"{why}; under CI the browser test must run, not skip", pytrace=False)
        pytest.skip(why)
    if item.get_closest_marker("needs_argos") is not None and importlib.util.find_spec("argostranslate") is None:
        why = "argostranslate not installed (pip install 'aiayn[argos]')"
        if in_ci():
            pytest.fail(f"{why}; under CI the Argos Translate test must run, not skip", pytrace=False)
        pytest.skip(why)


@pytest.fixture(scope="session", autouse=True)
def _suite_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One AIAYN_HOME for the whole run, and the corpus downloads pointed at a closed port."""
    urls = {
        "AIAYN_MULTI30K_URL": CLOSED_URL + "multi30k/",
        "AIAYN_TINYSHAKESPEARE_URL": CLOSED_URL + "tinyshakespeare/input.txt",
        "AIAYN_CRAFT_URL": CLOSED_URL + "craft/",
    }
    saved = {k: os.environ.get(k) for k in ("AIAYN_HOME", *urls)}
    os.environ["AIAYN_HOME"] = str(tmp_path_factory.mktemp("aiayn-home"))
    os.environ.update(urls)
    for local_copy in ("AIAYN_TINYSHAKESPEARE", "AIAYN_CRAFT_DIR"):  # no test may depend on one
        os.environ.pop(local_copy, None)
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(autouse=True)
def _mirror_for_marked_tests(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """$AIAYN_DATA_DIR for a test marked needs_mirror (and the processes it starts), for no other."""
    path = _mirror_path()
    if path is not None and request.node.get_closest_marker("needs_mirror") is not None:
        monkeypatch.setenv(_MIRROR_VAR, str(path))


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A directory that `build` fills once per pytest run and every xdist worker reads: the first worker
    to ask builds it under a lock in the run's shared temporary directory, the others wait for it."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # popen-gwN's parent: the run's
    root = shared / name
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".built").exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            build(root)
            (root / ".built").touch()
    return root


@pytest.fixture(scope="session")
def reverser(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, object, object]:
    """tests/test_export.py's model trained to reverse word sequences: (directory holding its spm.model,
    model, tokenizer, symbols), for test_export and test_argos. Trained once per run (9 s of CPU), saved,
    and loaded by each worker that asks."""
    import torch

    from aiayn.checkpoint import load_model, save_weights
    from aiayn.data.tokenizer import Tokenizer
    from test_export import N_SYMBOLS, train_reverser

    def build(root: Path) -> None:
        model, _, _ = train_reverser(root)
        save_weights(model, root / "reverser.safetensors", step=0)

    root = built_once(tmp_path_factory, "reverser", build)
    tok = Tokenizer(root / "spm.model")
    symbols = torch.arange(tok.vocab_size - N_SYMBOLS, tok.vocab_size)
    return root, load_model(root / "reverser.safetensors"), tok, symbols


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty AIAYN_HOME (data cache, downloads) for one test, so no test sees another's caches."""
    monkeypatch.setenv("AIAYN_HOME", str(tmp_path / "home"))
    return tmp_path / "home"
