"""Corpus-scale preparation: worker processes, the seeded BPE sample, the word cache, the cheap cache
key, the build lock, killed builders, and ranks that prepare outside any collective (issue: WMT-sized
corpora in bounded memory)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.config import Config, DataConfig
from aiayn.data import Tokenizer, prepare
from aiayn.data.pipeline import Options
from aiayn.data.tokenizer import NEWLINE, WordCacheEncoder
from local_http import free_port

WORDS_DE = "der die das ein eine hund katze mann frau kind läuft springt spielt über unter neben grün rot".split()
WORDS_EN = "the a dog cat man woman child runs jumps plays over under beside green red big small".split()
ARRAYS = ("src", "src_offsets", "tgt", "tgt_offsets", "index", "src_lengths", "tgt_lengths")


def corpus(tmp: Path, n: int, seed: int = 0, **kw) -> DataConfig:
    """n random sentence pairs (with a few empty and over-long ones) as plain files."""
    rng = random.Random(seed)
    src, tgt = [], []
    for i in range(n):
        k = rng.randint(1, 12)
        src.append(" ".join(rng.choice(WORDS_DE) for _ in range(k)) + f" {i % 97}")
        tgt.append(" ".join(rng.choice(WORDS_EN) for _ in range(k)) + f" {i % 97}")
    for i in range(0, n, 401):
        src[i] = ""  # dropped as empty
    for i in range(7, n, 503):
        tgt[i] = "x " * 300  # dropped as too long
    tmp.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, lo, hi in (("train", 0, n - 200), ("valid", n - 200, n - 100), ("test", n - 100, n)):
        for side, lines, lang in (("src", src, "de"), ("tgt", tgt, "en")):
            path = tmp / f"{split}.{lang}"
            path.write_text("".join(x + "\n" for x in lines[lo:hi]))
            files[f"{split}_{side}"] = str(path)
    return DataConfig(corpus="files", src_lang="de", tgt_lang="en", vocab_size=400, max_len=100, **files, **kw)


def same_arrays(a, b) -> bool:
    return all(
        (a.cache_dir / f"{s}.{k}.npy").read_bytes() == (b.cache_dir / f"{s}.{k}.npy").read_bytes()
        for s in ("train", "valid", "test")
        for k in ARRAYS
    )


def test_worker_processes_write_exactly_what_one_process_writes(tmp_path, monkeypatch):
    cfg = corpus(tmp_path / "c", 6000)
    monkeypatch.setenv("AIAYN_HOME", str(tmp_path / "h1"))
    one = prepare(cfg, options=Options(workers=1, chunk_lines=700))
    monkeypatch.setenv("AIAYN_HOME", str(tmp_path / "h2"))
    two = prepare(cfg, options=Options(workers=2, chunk_lines=700))
    assert one.report["workers"] == 1 and two.report["workers"] == 2
    assert one.report["dropped"] == two.report["dropped"] and one.report["dropped"]["empty"] == 15
    assert one.report["dropped"]["too_long"] == 12
    assert same_arrays(one, two)
    assert (one.cache_dir / "spm.model").read_bytes() == (two.cache_dir / "spm.model").read_bytes()
    # the kept training pairs are the corpus's own lines, in order, encoded as the tokenizer does alone
    src, tgt = one.raw("train")
    enc = one.splits["train"]
    assert len(src) == len(enc) == 5800 - 15 - 12
    for i in (0, 1, 700, 701, len(enc) - 1):
        s, t = enc.pair(i)
        assert s.tolist() == one.tokenizer.encode(src[i]) + [3] and t.tolist() == one.tokenizer.encode(tgt[i])


def test_the_line_kind_writes_in_worker_processes_exactly_what_one_process_writes(tmp_path, monkeypatch):
    """The same pipeline for one-sided text: labelled lines (pairs of texts, blank lines, truncation) and
    running text over two files, in chunks of 100 lines, one process against two."""
    from aiayn.data.text import prepare_text

    rng = random.Random(1)
    rows = [
        f"{rng.choice(['yes', 'no'])}\t{' '.join(rng.choices(WORDS_EN, k=rng.randint(1, 30)))}\t{i}" for i in range(900)
    ]
    rows[5] = ""
    (tmp_path / "train.tsv").write_text("\n".join(rows[:800]) + "\n")
    (tmp_path / "valid.tsv").write_text("\n".join(rows[800:]) + "\n")
    (tmp_path / "a.txt").write_text("\n".join(r.replace("\t", " ") for r in rows[:500]) + "\n")
    (tmp_path / "b.txt").write_text("\n".join(r.replace("\t", " ") for r in rows[500:800]))
    labelled = DataConfig(corpus="text", text_train=str(tmp_path / "train.tsv"), text_valid=str(tmp_path / "valid.tsv"))
    document = DataConfig(
        corpus="text", text_unit="document", text_train=[str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    )
    document.text_valid = str(tmp_path / "valid.tsv")
    arrays = ARRAYS + ("labels",)
    for cfg, kw in ((labelled, {"labelled": True}), (document, {})):
        cfg.vocab_size, cfg.max_len = 300, 12
        monkeypatch.setenv("AIAYN_HOME", str(tmp_path / f"h1{cfg.text_unit}"))
        one = prepare_text(cfg, options=Options(workers=1, chunk_lines=100), **kw)
        monkeypatch.setenv("AIAYN_HOME", str(tmp_path / f"h2{cfg.text_unit}"))
        two = prepare_text(cfg, options=Options(workers=2, chunk_lines=100), **kw)
        assert one.report["workers"] == 1 and two.report["workers"] == 2
        assert one.report["splits"] == two.report["splits"]
        assert all(
            (one.cache_dir / f"{s}.{k}.npy").read_bytes() == (two.cache_dir / f"{s}.{k}.npy").read_bytes()
            for s in ("train", "valid", "test")
            for k in arrays
        )
    tok, split = one.tokenizer, one.splits["train"]  # running text: one example, every line then a newline
    assert len(split) == 1 and split.pair(0)[0].tolist()[-1] == 3
    ids = split.pair(0)[0].tolist()
    text = (tmp_path / "a.txt").read_text() + (tmp_path / "b.txt").read_text()
    assert ids.count(tok.piece_id(NEWLINE)) == 799  # between the 800 lines of the two files
    assert tok.decode(ids).split() == text.split()
    lab = prepare_text(
        labelled, labelled=True, options=Options(workers=1, chunk_lines=100)
    )  # cached: what the workers wrote
    assert lab.report["splits"]["train"]["empty"] == 1 and lab.report["splits"]["train"]["truncated"] > 0
    for k in (0, 5, 6, 799):  # blank line 5 is no example: line 6 is the sixth
        label, a, b = rows[k].split("\t") if rows[k] else ("", "", "")
        if not rows[k]:
            continue
        i = int(lab.splits["train"].index.tolist().index(k))
        src, tgt = lab.splits["train"].pair(i)
        assert (
            lab.label_names[int(lab.labels["train"][i])] == label
            and tgt.tolist() == lab.tokenizer.encode(b)[: len(tgt)]
        )
        assert src.tolist()[-1] == 3 and src.tolist()[:-1] == lab.tokenizer.encode(a)[: len(src) - 1]
        assert len(src) + len(tgt) <= 12


def test_bpe_sample_is_seeded_bounded_and_whole_below_its_size(tmp_path, monkeypatch):
    cfg = corpus(tmp_path / "c", 3000, bpe_sample_pairs=500)
    models = []
    for home in ("h1", "h2"):  # two machines with node-local caches
        monkeypatch.setenv("AIAYN_HOME", str(tmp_path / home))
        prep = prepare(cfg, options=Options(workers=1))
        assert prep.report["bpe_sample_pairs"] == 500
        models.append((prep.cache_dir / "spm.model").read_bytes())
    assert models[0] == models[1]
    # a sample as large as the corpus is the whole training text: the model trained on it directly
    cfg.bpe_sample_pairs = 10_000
    prep = prepare(cfg, options=Options(workers=1))
    src, tgt = (open(p).read().splitlines() for p in (cfg.train_src, cfg.train_tgt))
    keep = [i for i in range(len(src)) if src[i].split() and tgt[i].split()]
    direct = Tokenizer.train(
        [" ".join(src[i].split()) for i in keep] + [" ".join(tgt[i].split()) for i in keep],
        tmp_path / "direct.model",
        vocab_size=400,
    )
    assert (prep.cache_dir / "spm.model").read_bytes() == direct.path.read_bytes()


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory):
    text = [
        "Ein Mann läuft über die Straße.",
        "A man runs across the street.",
        "日本語のテキスト",
        "naïve café ¨ ´",
        "Zwei Hunde spielen im Schnee",
        "x\u200by z\u00a0w",
    ] * 30
    return Tokenizer.train(text, tmp_path_factory.mktemp("spm") / "m.model", vocab_size=400).sp


ALPHABET = st.sampled_from(
    list("abcdeäöüßxyz.,!?-'")
    + [" ", "  ", "\t", "\u00a0", "\u3000", "\u200b", "¨", "´", "\u0308", "ﬁ", "Ⅳ", "日", "本", "😀", "\r", "\x1c"]
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(ALPHABET, max_size=30).map("".join), min_size=1, max_size=8))
def test_word_cache_encodes_exactly_like_sentencepiece(sp_model, lines):
    enc = WordCacheEncoder(sp_model, max_words=12)  # a small cache: refills are exercised too
    for _ in range(2):  # cold, then from the cache
        flat, lengths = enc.encode(lines)
        expect = sp_model.encode([" ".join(x.split()) for x in lines])
        assert lengths.tolist() == [len(e) for e in expect]
        assert flat.tolist() == [t for e in expect for t in e]


def test_cache_key_comes_from_file_metadata_and_content_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("AIAYN_HOME", str(tmp_path / "home"))
    cfg = corpus(tmp_path / "c", 1500)
    first = prepare(cfg, options=Options(workers=1))
    train = Path(cfg.train_tgt)
    st0 = train.stat()
    original = train.read_bytes()
    # same size and modification time, other bytes: the cache is taken without reading the corpus
    train.write_bytes(original.replace(b"the", b"THE"))
    os.utime(train, ns=(st0.st_atime_ns, st0.st_mtime_ns))
    again = prepare(cfg, options=Options(workers=1))
    assert again.report["cached"] is True and again.cache_dir == first.cache_dir
    # the original bytes, touched: read and hashed once more, found by content, nothing rebuilt
    train.write_bytes(original)
    os.utime(train, ns=(st0.st_atime_ns, st0.st_mtime_ns + 10**9))
    touched = prepare(cfg, options=Options(workers=1))
    assert touched.report["cached"] is True and touched.cache_dir == first.cache_dir
    assert len(list((tmp_path / "home" / "prepared").iterdir())) == 1
    assert len(list((tmp_path / "home" / "stamps").iterdir())) == 2
    # new content: a new cache
    train.write_bytes(original.replace(b"the", b"THE"))
    changed = prepare(cfg, options=Options(workers=1))
    assert changed.report["cached"] is False and changed.cache_dir != first.cache_dir


def _prepare_in_subprocess(cfg: DataConfig, home: Path, workers: int = 1) -> subprocess.Popen:
    code = (
        "import json, sys; from aiayn.config import DataConfig; from aiayn.data import prepare; "
        "from aiayn.data.pipeline import Options; "
        "p = prepare(DataConfig(**json.loads(sys.argv[1])), options=Options(workers=int(sys.argv[2]))); "
        "print(json.dumps({'cached': p.report['cached'], 'dir': str(p.cache_dir)}))"
    )
    env = {**os.environ, "AIAYN_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(cfg.__dict__), str(workers)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_concurrent_preparations_build_once_under_the_lock(tmp_path):
    cfg = corpus(tmp_path / "c", 4000)
    procs = [_prepare_in_subprocess(cfg, tmp_path / "home") for _ in range(3)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert sorted(r["cached"] for r in results) == [False, True, True]  # one built, two waited and loaded
    assert len({r["dir"] for r in results}) == 1
    assert [d.name for d in (tmp_path / "home" / "prepared").iterdir()] == [Path(results[0]["dir"]).name]


def test_a_killed_builder_leaves_nothing_that_is_taken_for_a_cache(tmp_path):
    cfg = corpus(tmp_path / "c", 60_000)
    home = tmp_path / "home"
    p = _prepare_in_subprocess(cfg, home, workers=2)
    t0 = time.time()
    while not list(home.glob("prepared/.*")):  # the temporary build directory exists: encoding started
        assert p.poll() is None and time.time() - t0 < 120, p.communicate()
        time.sleep(0.01)
    os.kill(p.pid, signal.SIGKILL)
    p.communicate()
    assert list(home.glob("prepared/.*")) and not list(home.glob("prepared/[!.]*"))  # half-built, hidden
    q = _prepare_in_subprocess(cfg, home, workers=1)
    out, err = q.communicate(timeout=120)
    assert q.returncode == 0, err
    assert json.loads(out)["cached"] is False
    assert not list(home.glob("prepared/.*"))  # the dead builder's directory was removed


def _start_ranks(
    cfg_file: Path, run_dir: Path, homes: tuple[Path, Path], logs: list[Path] | None = None
) -> tuple[int, list[subprocess.Popen]]:
    """Two training ranks started by hand (as two nodes would be), each with its own AIAYN_HOME;
    stderr to `logs` (files) when given, else pipes."""
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "AIAYN_HOME": str(homes[rank]),
            "OMP_NUM_THREADS": "1",
        }
        err = open(logs[rank], "w") if logs else subprocess.PIPE
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "aiayn", "train", "--config", str(cfg_file), "--run-dir", str(run_dir)],
                env=env,
                stdout=subprocess.DEVNULL if logs else subprocess.PIPE,
                stderr=err,
                text=True,
            )
        )
    return port, procs


def _two_ranks(cfg_file: Path, run_dir: Path, homes: tuple[Path, Path]) -> list[subprocess.CompletedProcess]:
    _, procs = _start_ranks(cfg_file, run_dir, homes)
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=240), *p.communicate()) for p in procs]


def _train_config(tmp: Path, data: DataConfig, **train) -> Path:
    d = {
        "model": {"preset": "tiny"},
        "data": {**data.__dict__, "max_tokens": 2048},
        "train": {
            "max_steps": 1,
            "eval_every": 0,
            "save_every": 1,
            "eval_bleu": False,
            "threads": 1,
            "progress": False,
            "device": "cpu",
            **train,
        },
    }
    path = tmp / "cfg.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


def test_ranks_wait_for_a_build_outside_collectives_longer_than_their_timeout(tmp_path):
    """Another process holds the build lock (as a cold WMT build would) for twice the process group's
    timeout: both ranks wait on the lock, not in a collective, so neither times out; then they train."""
    import fcntl

    from aiayn.data.cache import lock_path
    from aiayn.data.pairs import sentence_pairs
    from aiayn.data.pipeline import stamp_key

    cfg = corpus(tmp_path / "c", 2000)
    home = tmp_path / "home"
    os.environ["AIAYN_HOME"], old = str(home), os.environ.get("AIAYN_HOME")
    try:
        lock = lock_path(stamp_key(sentence_pairs(cfg)))  # what the builder of cfg's cache holds
    finally:
        os.environ.pop("AIAYN_HOME") if old is None else os.environ.__setitem__("AIAYN_HOME", old)
    lock.parent.mkdir(parents=True)
    logs = [tmp_path / f"rank{r}.err" for r in (0, 1)]
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        _, procs = _start_ranks(_train_config(tmp_path, cfg, dist_timeout_s=3), tmp_path / "run", (home, home), logs)
        t0 = time.time()
        while not all("another process is preparing this corpus; waiting" in log.read_text() for log in logs):
            assert all(p.poll() is None for p in procs) and time.time() - t0 < 120, [x.read_text() for x in logs]
            time.sleep(0.05)
        # Hold the lock for twice the timeout after both ranks said they wait on it. This is not an
        # ordering assumption: a rank that waited in a collective instead would fail with the process
        # group's timeout whenever that fires (at once, or late on a loaded machine), and its exit code
        # below says so; while held, an early failure is reported at once.
        waiting = time.monotonic()
        while time.monotonic() - waiting < 2 * 3:
            assert all(p.poll() is None for p in procs), [x.read_text()[-2000:] for x in logs]  # waiting, not failed
            time.sleep(0.05)
        fcntl.flock(held, fcntl.LOCK_UN)
    assert all(p.wait(timeout=240) == 0 for p in procs), [x.read_text()[-2000:] for x in logs]
    assert not any("timed out" in x.read_text().lower() for x in logs)
    assert (tmp_path / "run" / "checkpoints").is_dir() and len(list((home / "prepared").iterdir())) == 1


def test_ranks_with_different_caches_fail_together_in_one_line(tmp_path):
    cfg = corpus(tmp_path / "c", 1500)
    homes = (tmp_path / "node0", tmp_path / "node1")
    _prepare_in_subprocess(cfg, homes[1]).communicate(timeout=120)
    # node 1's cache holds another tokenizer (a stale or differently built cache)
    other = Tokenizer.train(
        ["ganz andere Wörter hier"] * 50 + ["quite other words"] * 50, tmp_path / "o.model", vocab_size=400
    )
    (cache,) = (homes[1] / "prepared").iterdir()
    (cache / "spm.model").write_bytes(other.path.read_bytes())
    done = _two_ranks(_train_config(tmp_path, cfg), tmp_path / "run", homes)
    for p in done:
        assert p.returncode == 2, p.stderr[-2000:]
        last = p.stderr.strip().splitlines()[-1]
        assert last.startswith("error: ranks prepared different data (rank 0: cache ") and "rank 1: cache" in last


def test_data_prepare_command_prepares_once_then_finds_the_cache(tmp_path, monkeypatch, capsys):
    from aiayn.cli import main

    monkeypatch.setenv("AIAYN_HOME", str(tmp_path / "home"))
    cfg = corpus(tmp_path / "c", 1500)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({"model": {"preset": "tiny"}, "data": {**cfg.__dict__, "vocab_size": 999}}))
    args = ["data", "prepare", "--config", str(path), "--data.vocab_size", "400", "--workers", "1"]
    assert main(args) == 0
    first = capsys.readouterr()
    assert first.out.startswith("prepared ") and "train 1,293, valid 100, test 100 pairs" in first.out
    assert "vocabulary 400" in first.out and '"empty": 4, "too_long": 3' in first.out
    assert "aiayn data: encode" in first.err  # the progress bar
    assert main(args + ["--no-progress"]) == 0
    again = capsys.readouterr()
    assert again.out.startswith("cached ") and again.err == ""
    assert main(["data", "prepare", "--config", str(path), "--data.nonsense", "1"]) == 2
    assert "nonsense" in capsys.readouterr().err


def test_data_prepare_command_prepares_as_the_task_does(tmp_path, monkeypatch, capsys):
    """A classify config's data are labelled lines with the encoder's special pieces: the command
    prepares exactly the cache the task's training reads (not the config's corpus as sentence pairs)."""
    from aiayn.cli import main
    from aiayn.train import tasks

    monkeypatch.setenv("AIAYN_HOME", str(tmp_path / "home"))
    rng = random.Random(2)
    for split, n in (("train", 300), ("valid", 40)):
        rows = [f"{lab}\t{' '.join(rng.choices(WORDS_EN, k=5))}" for lab in rng.choices(["a", "b", "c"], k=n)]
        (tmp_path / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    data = {"corpus": "text", "text_train": str(tmp_path / "train.tsv"), "text_valid": str(tmp_path / "valid.tsv")}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({"task": {"name": "classify"}, "model": {"preset": "tiny"}, "data": data}))
    assert main(["data", "prepare", "--config", str(path), "--data.vocab_size", "300", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("prepared ") and "(task classify): train 300, valid 40, test 0 examples" in out
    cfg = Config.load(str(path), ["--data.vocab_size", "300"])
    run = tasks.prepare_data(tasks.get_spec("classify"), cfg, cfg.data, None)
    assert run.report["cached"] and str(run.cache_dir) in out and run.label_names == ["a", "b", "c"]
    assert run.tokenizer.piece_id("[MASK]") is not None
