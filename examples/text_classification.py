"""Encoder-only (BERT-like) experiment on Multi30k: masked-token pre-training on the training captions of
all four languages, then two fine-tuned classifiers, each against the same classifier trained from scratch
(the same tokenizer, architecture, schedule and step budget; only the initial weights differ), at 1,000
labelled examples and at the whole training set:

  langid  which language is a caption in (en / de / fr / cs)? train: Multi30k train (4 x 29,000), valid:
          val (4 x 1,014), test: test_2016_flickr (4 x 1,000)
  pairs   is an (English, German) pair a translation? One example per English caption: half aligned
          (yes), a quarter a random German caption, a quarter a German caption of similar length (the
          nearest ranks by length; hard negatives); seeded. train / valid / test from the same splits

The datasets are built through the project's data layer (multi30k.locate_langs, io.read_lines) into
TSVs under --data; the runs go under --runs; test scores (the run's best validation-accuracy weights)
and wall times into --out. Runs already finished are reused, so the script resumes where it stopped.

    AIAYN_DATA_DIR=/path/to/multi30k python examples/text_classification.py --data data/text_classification \
        --runs runs/text_classification
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aiayn.data import multi30k
from aiayn.data.io import read_lines
from aiayn.decode.classifier import Classifier
from aiayn.scoring import scores

ROOT = Path(__file__).resolve().parents[1]
LANGS = ("en", "de", "fr", "cs")
SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
SMALL = 1000  # labelled examples of the small setting


def _write(path: Path, rows: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r + "\n" for r in rows))


def _clean(s: str) -> str:
    return " ".join(s.replace("\t", " ").split())


def build_langid(out: Path, seed: int) -> dict[str, int]:
    d = multi30k.locate_langs(LANGS)
    sizes = {}
    for split, stem in SPLITS.items():
        rows = [f"{lang}\t{_clean(x)}" for lang in LANGS for x in read_lines(d / f"{stem}.{lang}.gz") if x.strip()]
        random.Random(f"{seed}-langid-{split}").shuffle(rows)
        _write(out / "langid" / f"{split}.tsv", rows)
        sizes[split] = len(rows)
    _write(out / "langid" / "train_1k.tsv", (out / "langid/train.tsv").read_text().splitlines()[:SMALL])
    return sizes


def pair_rows(en: list[str], de: list[str], rng: random.Random) -> tuple[list[str], list[str]]:
    """Half aligned (yes); a quarter a random other German caption, a quarter one of similar length (no).
    Also each row's kind: yes | random | hard."""
    n = len(en)
    by_length = sorted(range(n), key=lambda j: (len(de[j].split()), rng.random()))
    rank = {j: r for r, j in enumerate(by_length)}
    kinds = ["yes"] * (n - n // 2) + ["random"] * (n // 4) + ["hard"] * (n // 2 - n // 4)
    rng.shuffle(kinds)
    rows = []
    for i, kind in enumerate(kinds):
        j = i
        if kind == "random":
            while j == i:
                j = rng.randrange(n)
        elif kind == "hard":  # one of the 10 captions nearest in length rank (not itself)
            while j == i:
                r = min(n - 1, max(0, rank[i] + rng.choice([-5, -4, -3, -2, -1, 1, 2, 3, 4, 5])))
                j = by_length[r]
        rows.append(f"{'yes' if kind == 'yes' else 'no'}\t{_clean(en[i])}\t{_clean(de[j])}")
    return rows, kinds


def build_pairs(out: Path, seed: int) -> dict[str, int]:
    d = multi30k.locate_langs(("en", "de"))
    sizes = {}
    for split, stem in SPLITS.items():
        en, de = read_lines(d / f"{stem}.en.gz"), read_lines(d / f"{stem}.de.gz")
        rows, kinds = pair_rows(en, de, random.Random(f"{seed}-pairs-{split}"))
        _write(out / "pairs" / f"{split}.tsv", rows)
        _write(out / "pairs" / f"{split}.kinds", kinds)
        sizes[split] = len(rows)
    _write(out / "pairs" / "train_1k.tsv", (out / "pairs/train.tsv").read_text().splitlines()[:SMALL])
    return sizes


def metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def train(config: str, run: Path, overrides: list[str], init_from: Path | None = None) -> None:
    """Train (or resume) a run to its end through the CLI (a finished run returns at once)."""
    if (run / "config.yaml").is_file():
        args = ["train", "--resume", str(run), *overrides]
    else:
        args = ["train", "--config", config, "--run-dir", str(run), *overrides]
        if init_from is not None:
            args += ["--init-from", str(init_from)]
    print("$ aiayn " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "aiayn.cli", *args], check=True, cwd=ROOT)


def train_seconds(run: Path) -> float:
    """The run's wall-clock training time over all its invocations (validations included)."""
    return max((r.get("elapsed", 0.0) for r in metrics(run) if r["kind"] == "train"), default=0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data/text_classification", type=Path)
    ap.add_argument("--runs", default="runs/text_classification", type=Path)
    ap.add_argument("--out", default=ROOT / "bench/results/text_classification.json", type=Path)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", choices=["data", "mlm", "scratch", "pretrained", "all"], default="all")
    ap.add_argument("--tasks", nargs="+", default=["langid", "pairs"])
    ap.add_argument("--mlm-minutes", type=float, default=18.0)
    ap.add_argument("--sizes", nargs="+", default=["1k", "full"])
    ap.add_argument("--steps", type=int, help="another step budget than the configs' (runs and keys get a suffix)")
    args = ap.parse_args()
    data, runs = args.data.resolve(), args.runs.resolve()
    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}
    results["hardware"] = f"{os.cpu_count()}-core CPU, torch threads 1 (train.threads)"

    if not (data / "pairs/test.kinds").is_file():
        build_langid(data, args.seed)
        build_pairs(data, args.seed)
    results["datasets"] = {
        t: {s: sum(1 for _ in open(data / t / f"{s}.tsv")) for s in (*SPLITS, "train_1k")} for t in ("langid", "pairs")
    }
    mlm = runs / "mlm"
    if args.only in ("mlm", "all") or (args.only == "pretrained" and not (mlm / "best.safetensors").is_file()):
        train("multi30k_mlm", mlm, ["--train.max_minutes", str(args.mlm_minutes)])
        last = [r for r in metrics(mlm) if r["kind"] == "valid"][-1]
        results["mlm"] = {
            "run": str(mlm),
            "steps": last["step"],
            "train_seconds": round(train_seconds(mlm), 1),
            "valid": {k: last[k] for k in ("nll", "ppl", "accuracy")},
        }
    if args.only in ("data", "mlm"):
        _save(results, args.out)
        return 0
    inits = ["scratch", "pretrained"] if args.only == "all" else [args.only]
    spm = mlm / "spm.model"
    if not spm.is_file():
        raise SystemExit(f"{spm} missing: run --only mlm first (the scratch runs share its tokenizer)")
    for task in args.tasks:
        for size in args.sizes:
            train_file = data / task / ("train_1k.tsv" if size == "1k" else "train.tsv")
            for kind in inits:
                suffix = f"_{args.steps}steps" if args.steps else ""
                run = runs / f"{task}_{size}_{kind}{suffix}"
                over = [f"--train.max_steps={args.steps}", "--train.max_minutes=15"] if args.steps else []
                over += [
                    f"--data.text_train={train_file}",
                    f"--data.text_valid={data / task / 'valid.tsv'}",
                    f"--data.text_test={data / task / 'test.tsv'}",
                ]
                if kind == "scratch":
                    over.append(f"--data.spm_model={spm}")
                train(f"multi30k_{task}", run, over, mlm if kind == "pretrained" else None)
                clf = Classifier.load(run)
                test = clf.read(data / task / "test.tsv")
                assert test.gold is not None
                t = time.perf_counter()
                predicted = [clf.labels[i] for i in clf.predict(test.a, test.b)]
                s = scores(test.gold, predicted, clf.labels)
                best = [r for r in metrics(run) if r["kind"] == "valid"]
                top = max(best, key=lambda r: r["accuracy"])
                entry = {
                    "run": str(run),
                    "train_examples": sum(1 for _ in open(train_file)),
                    "steps": best[-1]["step"],
                    "best_valid_step": top["step"],
                    "valid_accuracy": top["accuracy"],
                    "valid_macro_f1": top["macro_f1"],
                    "test": {
                        k: s[k]
                        for k in ("accuracy", "macro_f1", "precision", "recall", "f1", "support", "labels", "confusion")
                    },
                    "train_seconds": round(train_seconds(run), 1),
                    "test_seconds": round(time.perf_counter() - t, 1),
                }
                kinds_file = data / task / "test.kinds"
                if kinds_file.is_file():  # pairs: how often each kind of test pair is classified right
                    pair_kinds = kinds_file.read_text().split()
                    entry["test_accuracy_by_kind"] = {
                        k: sum(g == p for g, p, x in zip(test.gold, predicted, pair_kinds) if x == k)
                        / pair_kinds.count(k)
                        for k in sorted(set(pair_kinds))
                    }
                results.setdefault(task, {})[f"{size}_{kind}{suffix}"] = entry
                print(
                    f"{task} {size} {kind}{suffix}: test accuracy {s['accuracy']:.4f}, macro F1 {s['macro_f1']:.4f}",
                    flush=True,
                )
                _save(results, args.out)
    _save(results, args.out)
    return 0


def _save(results: dict[str, Any], out: Path) -> None:
    """Merged into what is on disk (runs of another invocation, e.g. --only scratch beside --only pretrained)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    merged: dict[str, Any] = json.loads(out.read_text()) if out.is_file() else {}
    for key, value in results.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key].update(value)
        else:
            merged[key] = value
    out.write_text(json.dumps(merged, indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
