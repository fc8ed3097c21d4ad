"""Corpus-scale data preparation: wall time, pairs/s, peak RSS of the whole process tree, disk size,
cached start and batch-plan time, on a synthetic WMT-like corpus.

    python bench/data_scale.py --pairs 500000 4500000 --corpus-dir /tmp/synth --json bench/results/data_scale.json
    python bench/data_scale.py --pairs 500000 --src /tmp/old/src     # the same on another checkout's code
    python bench/data_scale.py --pairs 4500000 --clean --corpus-dir /tmp/synth    # `aiayn data clean`, rules

The corpus joins Multi30k training captions two by two (about 24 words and 270 bytes a pair, like
WMT14 news sentences); Multi30k comes through the data layer ($AIAYN_DATA_DIR, else the cache, else a
download). `--sentences embedded` joins the embedded numbers corpus instead (no data needed; shorter
pairs, for a quick check of the script). Each measurement runs in a fresh
subprocess with its own empty $AIAYN_HOME; RSS is sampled from /proc every 50 ms over the process
and all its descendants (the encoding workers), summed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CHILD = r"""
import inspect, json, sys, time
t0 = time.perf_counter()
from aiayn.config import DataConfig
from aiayn.data import prepare
from aiayn.data.batching import BatchIterator
fields = json.loads(sys.argv[1])
cfg = DataConfig(**{k: v for k, v in fields.items() if k in DataConfig.__dataclass_fields__})
params = inspect.signature(prepare).parameters
if "options" in params:
    from aiayn.data.pipeline import Options
    kw = {"options": Options(workers=int(sys.argv[2]) or None)}
else:
    kw = {"workers": int(sys.argv[2]) or None} if "workers" in params else {}
prep = prepare(cfg, **kw)
t1 = time.perf_counter()
out = {"prepare_s": round(t1 - t0, 3), "report": prep.report}
if sys.argv[3] == "plan":
    it = BatchIterator(prep.splits["train"], cfg.max_tokens, seed=1)
    t = time.perf_counter()
    n = len(it)
    out["plan_s"], out["batches"] = round(time.perf_counter() - t, 3), n
print(json.dumps(out))
"""


def sentences(source: str) -> dict[str, tuple[list[str], list[str]]]:
    """split -> (English lines, German lines) to build the corpus from."""
    if source == "embedded":
        from aiayn.data import embedded

        return embedded.corpus("en", "de", 20_000)
    from aiayn.data import multi30k

    d = multi30k.locate("en", "de")
    return {
        split: tuple(
            gzip.decompress((d / f"{stem}.{lang}.gz").read_bytes()).decode().splitlines() for lang in ("en", "de")
        )
        for split, stem in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr"))
    }


def make_corpus(n: int, out: Path, text: dict[str, tuple[list[str], list[str]]], seed: int = 0) -> dict[str, str]:
    """train.{en,de} of n joined training pairs, plus the source's own valid and test."""
    out.mkdir(parents=True, exist_ok=True)
    files = {
        f"{s}_{side}": str(out / f"{s}.{lang}")
        for s in ("train", "valid", "test")
        for side, lang in (("src", "en"), ("tgt", "de"))
    }
    if Path(files["train_src"]).is_file() and sum(1 for _ in open(files["train_src"], "rb")) == n:
        return files
    en, de = text["train"]
    rng = random.Random(seed)
    with open(files["train_src"], "w") as fs, open(files["train_tgt"], "w") as ft:
        for _ in range(0, n, 100_000):
            idx = [(rng.randrange(len(de)), rng.randrange(len(de))) for _ in range(min(100_000, n))]
            fs.write("".join(f"{en[i]} {en[j]}\n" for i, j in idx))
            ft.write("".join(f"{de[i]} {de[j]}\n" for i, j in idx))
            n -= len(idx)
    for split in ("valid", "test"):
        for side, lines in zip(("src", "tgt"), text[split]):
            Path(files[f"{split}_{side}"]).write_text("".join(x + "\n" for x in lines))
    return files


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and all its descendants."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(d))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) * 1024
        except (OSError, StopIteration):
            pass
    return total


def run_child(cfg: dict, home: str, workers: int, plan: bool, src: str | None) -> dict:
    out, wall, peak = run_sampled(
        [sys.executable, "-c", CHILD, json.dumps(cfg), str(workers), "plan" if plan else "-"], home, src
    )
    res = json.loads(out.strip().splitlines()[-1])
    res.update(wall_s=round(wall, 2), peak_rss_mb=round(peak / 2**20))
    return res


def run_sampled(cmd: list[str], home: str, src: str | None) -> tuple[str, float, int]:
    """(stdout, wall seconds, peak RSS of the process tree in bytes) of a command."""
    env = {**os.environ, "AIAYN_HOME": home}
    if src:
        env["PYTHONPATH"] = src
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, tree_rss(p.pid))
            time.sleep(0.05)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, _ = p.communicate()
    wall = time.perf_counter() - t0
    stop.set()
    th.join()
    if p.returncode:
        raise SystemExit(f"child failed ({p.returncode})")
    return out, wall, peak


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, nargs="+", default=[500_000])
    ap.add_argument("--corpus-dir", default=None, help="keep the synthetic corpora here (default: a temp dir)")
    ap.add_argument("--workers", type=int, default=0, help="encoding processes (0: all cores)")
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--max-tokens", type=int, default=25000)
    ap.add_argument("--json", default=None)
    ap.add_argument("--sentences", choices=["multi30k", "embedded"], default="multi30k", help="what to join")
    ap.add_argument("--src", default=None, help="import aiayn from this directory (e.g. an older checkout's src)")
    ap.add_argument("--clean", action="store_true", help="measure `aiayn data clean` (default rules) instead")
    a = ap.parse_args()
    text = sentences(a.sentences)
    with tempfile.TemporaryDirectory(prefix="aiayn-scale-") as scratch:  # removed at the end, corpora kept only
        rows = measure(a, text, Path(a.corpus_dir or Path(scratch) / "corpora"), Path(scratch))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")


def measure(a: argparse.Namespace, text: dict, base: Path, scratch: Path) -> list[dict]:
    """One row per corpus size: a cold preparation and a cached start, each in a fresh process with an
    $AIAYN_HOME of its own under `scratch`."""
    rows = []
    for n in a.pairs:
        files = make_corpus(n, base / f"pairs{n}", text)
        if a.clean:
            rows.append(measure_clean(a, n, files, scratch))
            continue
        cfg = {
            "corpus": "files",
            "src_lang": "en",
            "tgt_lang": "de",
            "vocab_size": a.vocab_size,
            "max_tokens": a.max_tokens,
            **files,
        }
        home = str(scratch / f"home{n}")
        cold = run_child(cfg, home, a.workers, plan=False, src=a.src)
        warm = run_child(cfg, home, a.workers, plan=True, src=a.src)
        disk = sum(f.stat().st_size for f in Path(home, "prepared").rglob("*") if f.is_file())
        row = {
            "pairs": n,
            "code": a.src or "this checkout",
            "cold_wall_s": cold["wall_s"],
            "pairs_per_s": round(n / cold["wall_s"]),
            "peak_rss_mb": cold["peak_rss_mb"],
            "seconds": cold["report"].get("seconds"),
            "workers": cold["report"].get("workers"),
            "disk_mb": round(disk / 2**20, 1),
            "cached": warm["report"].get("cached"),
            "cached_start_s": warm["report"]["seconds_total"],
            "cached_wall_s": warm["wall_s"],
            "cached_peak_rss_mb": warm["peak_rss_mb"],
            "plan_s": warm["plan_s"],
            "batches": warm["batches"],
            "bytes_per_pair_rss": round(cold["peak_rss_mb"] * 2**20 / n),
            "cpu_count": os.cpu_count(),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def measure_clean(a: argparse.Namespace, n: int, files: dict[str, str], scratch: Path) -> dict:
    """`aiayn data clean` of the training pairs with the default rules, in a fresh process."""
    out_dir = scratch / f"clean{n}"
    cmd = [sys.executable, "-m", "aiayn", "data", "clean", files["train_src"], files["train_tgt"], "--src-lang",
           "en", "--tgt-lang", "de", "-o", str(out_dir), "--no-progress"]  # fmt: skip
    if a.workers:
        cmd += ["--workers", str(a.workers)]
    _, wall, peak = run_sampled(cmd, str(scratch / f"home-clean{n}"), a.src)
    report = json.loads((out_dir / "report.json").read_text())["sources"][0]
    row = {
        "pairs": n,
        "clean_wall_s": round(wall, 1),
        "pairs_per_s": round(n / wall),
        "peak_rss_mb": round(peak / 2**20),
        "kept": report["kept"],
        "removed": {k: v for k, v in report["removed"].items() if v},
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    main()
