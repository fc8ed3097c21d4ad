"""Back-translation and distillation on Multi30k, every system trained to convergence (docs/synthetic.md).

    python bench/synthetic.py bt --out /tmp/synthetic          # the low-resource back-translation table
    python bench/synthetic.py distill --out /tmp/synthetic     # teacher, students, speed

`bt`: the first 5,000 pairs of Multi30k train are the parallel data; of the other 24,000 only the English
is kept, as monolingual text. A reverse (en -> de) run trained on the 5,000 back-translates it
(`aiayn backtranslate`: beam; tagged; sampled), and de -> en is trained on the 5,000 alone and on the
5,000 plus each back-translated 24,000 (data.corpus sources). `distill`: the teacher, an ensemble of
two quickstart runs on all of Multi30k (3,000 updates each, seeds 2 and 3), translates its training
source (`aiayn distill`), and the deep-shallow student is trained to convergence on those translations
and, for comparison, on the original pairs; their BLEU and their decoding speed (sentences/s, beam 4,
the 1,000 test2016 sentences in one process each, less what one sentence takes: start and load; the
fastest of 3 timings): the torch engine for all three (CTranslate2 decodes one model, not an ensemble),
and the default engine (CTranslate2), float32 and int8, for the students and one of the teacher's runs.

Every training run but the teacher's is the quickstart recipe without its time budget, validated every
500 updates on greedy BLEU and stopped after 4 validations without a better one (train.patience); the
test BLEU is sacreBLEU on test2016 of its best weights (`aiayn evaluate`). A run already finished is
kept. Results go to OUT/results.jsonl, one JSON line each.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from aiayn.config import PRESETS  # noqa: E402
from aiayn.data import multi30k  # noqa: E402

PARALLEL = 5000
TEACHER_SEEDS = (2, 3)
TEACHER_UPDATES = 3000  # the noisy benchmark's clean runs: 32.46 and 32.58 BLEU alone
ROUNDS = 3  # timings per speed, the fastest kept
CONVERGE = [
    "--train.max_steps", "60000", "--train.max_minutes", "null", "--train.eval_every", "500",
    "--train.save_every", "500", "--train.patience", "4", "--train.progress", "false",
]  # fmt: skip


def aiayn(*args: str, capture: bool = False) -> str:
    r = subprocess.run([sys.executable, "-m", "aiayn", *args], check=True, capture_output=capture, text=True)
    return r.stdout if capture else ""


def lines(d: Path, split: str, lang: str) -> list[str]:
    with gzip.open(d / f"{multi30k.split_name(split)}.{lang}.gz", "rt", encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def write(path: Path, text: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(x + "\n" for x in text), encoding="utf-8")
    return path


def train(run: Path, config: list[str]) -> dict:
    """A run trained to convergence (kept when done), then scored on test2016."""
    t0 = time.perf_counter()
    if not (run / "best.safetensors").is_file() or not _stopped(run):
        resume = ["--resume", str(run)] if (run / "checkpoints").is_dir() else []
        aiayn("train", "--config", "quickstart", "--run-dir", str(run), *config, *CONVERGE, *resume)
    minutes = round((time.perf_counter() - t0) / 60, 1)
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["kind"] == "valid"]
    best = max(valid, key=lambda r: r.get("bleu") or 0.0)
    out = aiayn("evaluate", "-c", str(run), "--split", "test", "--json", capture=True)
    scores = json.loads(out.strip().splitlines()[-1])
    return {
        "run": run.name,
        "updates": valid[-1]["step"],
        "best_step": best["step"],
        "valid_bleu": best.get("bleu"),
        "test_bleu": round(scores["bleu"], 2),
        "minutes_this_call": minutes,
    }


def _stopped(run: Path) -> bool:
    """Whether the run ended: stopped early, or at its last update."""
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return any(r["kind"] == "stop" for r in records) or any(r.get("step", 0) >= 60000 for r in records)


def files_config(d: Path, src: str, tgt: str, train: tuple[Path, Path]) -> list[str]:
    return [
        "--data.corpus", "files", "--data.src_lang", src, "--data.tgt_lang", tgt,
        "--data.train_src", str(train[0]), "--data.train_tgt", str(train[1]),
        "--data.valid_src", str(d / f"val.{src}.gz"), "--data.valid_tgt", str(d / f"val.{tgt}.gz"),
        "--data.test_src", str(d / f"test_2016_flickr.{src}.gz"),
        "--data.test_tgt", str(d / f"test_2016_flickr.{tgt}.gz"),
    ]  # fmt: skip


def bt(out: Path) -> None:
    d = multi30k.locate_langs(["de", "en"])
    de, en = lines(d, "train", "de"), lines(d, "train", "en")
    par = (write(out / "data" / "parallel.de", de[:PARALLEL]), write(out / "data" / "parallel.en", en[:PARALLEL]))
    mono = write(out / "data" / "mono.en", en[PARALLEL:])
    reverse = out / "runs" / "reverse_en_de"
    record(out, {"system": "reverse en->de, 5,000 pairs", **train(reverse, files_config(d, "en", "de", par[::-1]))})
    record(out, {"system": "de->en, 5,000 pairs", **train(out / "runs" / "base", files_config(d, "de", "en", par))})
    variants = {
        "beam": ["--beam", "4"],
        "tagged": ["--beam", "4", "--tag", "<BT>"],
        "sampled": ["--sampling-topk", "0", "--seed", "1"],
    }
    for name, flags in variants.items():
        bt_dir = out / "bt" / name
        t0 = time.perf_counter()
        aiayn("backtranslate", "-c", str(reverse), "--input", str(mono), "-o", str(bt_dir), "--no-progress", *flags)
        seconds = round(time.perf_counter() - t0, 1)
        sources = json.dumps(
            [
                {"src": str(par[0]), "tgt": str(par[1])},
                {"src": str(bt_dir / "mono.de"), "tgt": str(bt_dir / "mono.en"), "name": "bt"},
            ]
        )
        config = files_config(d, "de", "en", par) + ["--data.corpus", "sources", "--data.sources", sources]
        result = train(out / "runs" / f"bt_{name}", config)
        record(out, {"system": f"de->en, 5,000 + 24,000 back-translated ({name})", "bt_seconds": seconds, **result})


def distill(out: Path) -> None:
    d = multi30k.locate_langs(["de", "en"])
    config = files_config(d, "de", "en", (d / "train.de.gz", d / "train.en.gz"))
    teachers = [teacher(out / "runs" / f"teacher_seed{seed}", config, seed) for seed in TEACHER_SEEDS]
    scores = json.loads(aiayn("evaluate", "-c", *map(str, teachers), "--split", "test", "--json", capture=True)
                        .strip().splitlines()[-1])  # fmt: skip
    record(out, {"system": "teacher: ensemble of two quickstart runs", "runs": [t.name for t in teachers],
                 "updates": TEACHER_UPDATES, "test_bleu": round(scores["bleu"], 2)})  # fmt: skip
    t0 = time.perf_counter()
    aiayn("distill", "-c", *map(str, teachers), "-o", str(out / "distill"), "--steps", "60000", "--no-progress",
          "--train.seed", "1", *(x for x in CONVERGE if x != "--train.max_steps" and x != "60000"))  # fmt: skip
    student = out / "distill" / "student"
    minutes = round((time.perf_counter() - t0) / 60, 1)
    record(out, {"system": "student deep-shallow, distilled", "pipeline_minutes": minutes, **train(student, [])})
    original = out / "runs" / "student_original"
    # the preset's every field, spelled out: the quickstart recipe's model overrides would win over the name
    same = [x for k, v in PRESETS["deep-shallow"].items() for x in (f"--model.{k}", str(v))]
    record(out, {"system": "student deep-shallow, original pairs",
                 **train(original, config + ["--model.preset", "deep-shallow", *same])})  # fmt: skip
    speed(out, teachers, ["--engine", "torch"], d)  # CTranslate2 decodes one model, so the ensemble is torch's
    for run in (student, original):
        speed(out, [run], ["--engine", "torch"], d)
    for run in (teachers[0], student, original):
        for int8 in ([], ["--int8"]):
            speed(out, [run], int8, d)


def teacher(run: Path, config: list[str], seed: int) -> Path:
    """A quickstart run of TEACHER_UPDATES updates (kept when done)."""
    done = (run / "metrics.jsonl").is_file() and any(
        json.loads(x).get("step", 0) >= TEACHER_UPDATES for x in (run / "metrics.jsonl").read_text().splitlines()
    )
    if not done:
        resume = ["--resume", str(run)] if any((run / "checkpoints").glob("*.safetensors")) else []
        aiayn("train", "--config", "quickstart", "--run-dir", str(run), *config,
              "--train.max_steps", str(TEACHER_UPDATES), "--train.max_minutes", "null", "--train.progress", "false",
              "--train.seed", str(seed), *resume)  # fmt: skip
    return run


def speed(out: Path, runs: list[Path], flags: list[str], d: Path) -> None:
    """Sentences/s over test2016's 1,000 sources, less what one sentence costs (start, load)."""
    test = lines(d, "test", "de")
    plain, one = out / "data" / "test.de", out / "data" / "test1.de"
    if not one.is_file():
        write(plain, test)
        write(one, test[:1])
    engine = "torch" if "torch" in flags else "default"
    label = "+".join(r.name for r in runs) + f".{engine}{'.int8' if '--int8' in flags else ''}"
    seconds = {}
    for name, src in (("one", one), ("all", plain)):
        hyp = out / "hyp" / f"{label}.{name}"
        hyp.parent.mkdir(parents=True, exist_ok=True)
        command = ["translate", "-c", *map(str, runs), "--input", str(src), "--output", str(hyp), "--beam", "4"]
        aiayn(*command, *flags)  # untimed: the first call converts the model for CTranslate2 (cached in the run)
        seconds[name] = min(_timed(command + flags) for _ in range(ROUNDS))
    rate = (len(test) - 1) / (seconds["all"] - seconds["one"])
    record(out, {"speed": "+".join(r.name for r in runs), "engine": engine, "int8": "--int8" in flags,
                 "sentences_per_s": round(rate, 1), "seconds": round(seconds["all"], 2),
                 "seconds_one_sentence": round(seconds["one"], 2), "rounds": ROUNDS})  # fmt: skip


def _timed(command: list[str]) -> float:
    t0 = time.perf_counter()
    aiayn(*command)
    return time.perf_counter() - t0


def record(out: Path, r: dict) -> None:
    print(json.dumps(r), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "results.jsonl", "a") as f:
        f.write(json.dumps(r) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("stage", choices=["bt", "distill"])
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    (bt if a.stage == "bt" else distill)(a.out)


if __name__ == "__main__":
    main()
