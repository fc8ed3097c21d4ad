"""The noisy-corpus benchmark: does cleaning bring back the BLEU that crawl noise takes? (docs/data.md)

    python bench/noisy.py make    --out /tmp/noisy                 # the noisy corpus and its labels
    python bench/noisy.py filters --out /tmp/noisy                 # each filter's removals, by label
    python bench/noisy.py score   --out /tmp/noisy                 # + the model-based filter (trains 2 scorers)
    python bench/noisy.py score   --out /tmp/noisy --score-method dcce   # the paper's score, same scorers
    python bench/noisy.py train   --out /tmp/noisy --steps 3000    # clean, noisy, rules, cleaned-gain: BLEU

`make` builds from Multi30k train (de-en; French for the wrong-language pairs), seeded, the noise a web
crawl carries, at shares like a crawl's. In place of a clean pair: a misaligned target (another
caption's), an untranslated copy (the German as the English), a third language (the same picture's
French caption), a truncated target (40-60 % of its words). Added: boilerplate lines from web-page
templates (menus, cookie notices, pagers, prices; numbers, dates and names vary), glued pairs (two
source captions, one target), and 250 pairs repeated 30 times each. `noisy.labels` says what each line is.

`filters` runs `aiayn data clean` with the default rules (into OUT/rules) and counts what each filter
removed of each label: the share of the rule-visible noise removed (untranslated, wrong language,
boilerplate, every copy of a duplicate after the first) and of the clean pairs. `score` adds the
model-based filter (two quickstart-recipe scorers trained on the rule-cleaned pairs, the best
--keep-best kept by --score-method) and counts its removals the same way. `train` trains the quickstart
recipe for the same updates on each corpus named (the clean one, the noisy one, OUT/rules, OUT/cleaned-gain,
and `oracle`: the noisy corpus's clean pairs alone, what a perfect filter keeps) and scores each on
test2016 (`aiayn evaluate`).
Results go to OUT/results.jsonl, one JSON line each.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from aiayn.data import multi30k  # noqa: E402

SHARES = {"misaligned": 0.15, "untranslated": 0.03, "wrong_language": 0.03, "truncated": 0.03}
BOILERPLATE, GLUED, REPEATED, COPIES = 3000, 1000, 250, 30
RULE_VISIBLE = ("untranslated", "wrong_language", "boilerplate", "duplicate")
COMPANIES = ["Müller", "Schmidt", "Weber", "Bauhaus", "Technik", "Sonne", "Alpen", "Nordwind", "Blau", "Stern"]
TEMPLATES = [
    ("Startseite | Über uns | Kontakt", "Home | About us | Contact"),
    ("Alle Rechte vorbehalten. © {year} {company} GmbH", "All rights reserved. © {year} {company} Ltd."),
    ("Seite {n} von {m}", "Page {n} of {m}"),
    ("Veröffentlicht am {d}.{mo}.{year}", "Published on {mo}/{d}/{year}"),
    ("In den Warenkorb", "Add to cart"),
    ("Weiterlesen »", "Read more »"),
    (
        "Diese Website verwendet Cookies, um Ihnen das beste Erlebnis zu bieten.",
        "This website uses cookies to give you the best experience.",
    ),
    ("Newsletter abonnieren", "Subscribe to our newsletter"),
    ("Preis: {n},99 € inkl. MwSt.", "Price: €{n}.99 incl. VAT"),
    ("Zurück nach oben", "Back to top"),
    ("Kommentare ({n})", "Comments ({n})"),
    ("Teilen auf Facebook", "Share on Facebook"),
    ("Folgen Sie uns auf Twitter", "Follow us on Twitter"),
    ("Datenschutzerklärung", "Privacy policy"),
    ("Kontaktieren Sie uns unter info@{low}.de", "Contact us at info@{low}.de"),
    ("Besuchen Sie www.{low}.de für weitere Informationen", "Visit www.{low}.de for more information"),
    ("Artikelnummer: {n}{m}{d}", "Item number: {n}{m}{d}"),
    ("{n} Bewertungen", "{n} reviews"),
    ("Lieferzeit: {n}-{m} Werktage", "Delivery time: {n}-{m} working days"),
    ("Willkommen bei {company}!", "Welcome to {company}!"),
]


def read(d: Path, split: str, lang: str) -> list[str]:
    return gzip.open(d / f"{multi30k.split_name(split)}.{lang}.gz", "rt", encoding="utf-8").read().split("\n")[:-1]


def make(out: Path, seed: int) -> None:
    d = multi30k.locate_langs(["de", "en", "fr"])
    de, en, fr = (read(d, "train", lang) for lang in ("de", "en", "fr"))
    rng = random.Random(seed)
    n = len(de)
    rows: list[tuple[str, str, str]] = [(de[i], en[i], "clean") for i in range(n)]
    order = list(range(n))
    rng.shuffle(order)
    at = 0
    picked: dict[str, list[int]] = {}
    for label, share in SHARES.items():
        k = int(share * n)
        picked[label], at = order[at : at + k], at + k
    mis = picked["misaligned"]
    for i, j in zip(mis, mis[1:] + mis[:1]):  # each takes the next one's target: none keeps its own
        rows[i] = (de[i], en[j], "misaligned")
    for i in picked["untranslated"]:
        rows[i] = (de[i], de[i], "untranslated")
    for i in picked["wrong_language"]:
        rows[i] = (de[i], fr[i], "wrong_language")
    for i in picked["truncated"]:
        words = en[i].split()
        rows[i] = (de[i], " ".join(words[: max(1, int(len(words) * rng.uniform(0.4, 0.6)))]), "truncated")
    clean = [i for i in order[at:]]
    added: list[tuple[str, str, str]] = []
    for _ in range(BOILERPLATE):
        s, t = rng.choice(TEMPLATES)
        company = rng.choice(COMPANIES)
        v = dict(
            year=rng.randint(2005, 2024),
            n=rng.randint(1, 99),
            m=rng.randint(2, 99),
            d=rng.randint(1, 28),
            mo=rng.randint(1, 12),
            company=company,
            low=company.lower().replace("ü", "ue"),
        )
        added.append((s.format(**v), t.format(**v), "boilerplate"))
    for _ in range(GLUED):
        i, j = rng.sample(clean, 2)
        added.append((f"{de[i]} {de[j]}", en[i], "glued"))
    for i in rng.sample(clean[:5000], REPEATED):
        added += [(de[i], en[i], "duplicate")] * (COPIES - 1)  # the pair itself stays clean in place
    for row in added:
        rows.insert(rng.randint(0, len(rows)), row)
    first: set[tuple[str, str]] = set()  # a repeated pair's first place in the file is the clean one
    for k, (s, t, label) in enumerate(rows):
        if label in ("clean", "duplicate") and (s, t) in first:
            rows[k] = (s, t, "duplicate")
        elif label == "duplicate":
            rows[k] = (s, t, "clean")
        first.add((s, t))
    out.mkdir(parents=True, exist_ok=True)
    for k, name in enumerate(("noisy.de", "noisy.en", "noisy.labels")):
        (out / name).write_text("".join(r[k] + "\n" for r in rows), encoding="utf-8")
    counts = collections.Counter(r[2] for r in rows)
    noise = sum(v for k, v in counts.items() if k != "clean")
    record(out, {"stage": "make", "pairs": len(rows), "noise_share": round(noise / len(rows), 4), "labels": counts})


def labels(out: Path) -> list[str]:
    return (out / "noisy.labels").read_text().split("\n")[:-1]


def removals(path: Path) -> dict[int, str]:
    """line number (from 1) -> reason of a removed.tsv."""
    out = {}
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line:
            n, reason = line.split("\t")[:2]
            out[int(n)] = reason
    return out


def table(lab: list[str], removed: dict[int, str]) -> dict:
    """For each label: how many, how many removed, and by which filter."""
    by: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for i, label in enumerate(lab, 1):
        by[label][removed.get(i, "kept")] += 1
    rows = {}
    for label, c in sorted(by.items()):
        total = sum(c.values())
        rows[label] = {
            "pairs": total,
            "removed": total - c["kept"],
            "share": round(1 - c["kept"] / total, 4),
            "by": dict(c.most_common()),
        }
    visible = [rows[k] for k in RULE_VISIBLE if k in rows]
    rows["rule_visible"] = {
        "pairs": sum(r["pairs"] for r in visible),
        "removed": sum(r["removed"] for r in visible),
        "share": round(sum(r["removed"] for r in visible) / max(1, sum(r["pairs"] for r in visible)), 4),
    }
    return rows


def aiayn(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "aiayn", *args], check=True)


def clean(out: Path, dest: str, *extra: str) -> float:
    """`aiayn data clean` of the noisy corpus into OUT/dest with the default rules (and `extra`), unless
    done already; its seconds (0 when it was)."""
    if (out / dest / "report.json").is_file():
        return 0.0
    t = time.perf_counter()
    aiayn("data", "clean", str(out / "noisy.de"), str(out / "noisy.en"), "--src-lang", "de", "--tgt-lang", "en",
          "-o", str(out / dest), "--write-removed", "--no-progress", *extra)  # fmt: skip
    return round(time.perf_counter() - t, 1)


def filters(out: Path) -> None:
    seconds = clean(out, "rules")
    rows = table(labels(out), removals(out / "rules" / "noisy.removed.tsv"))
    record(out, {"stage": "filters", "seconds": seconds, "by_label": rows})


def score(out: Path, keep_best: float, steps: int, method: str) -> None:
    """The rules and the model-based filter into OUT/cleaned-METHOD. The two scorers are trained once
    (`--score-with auto`, into the first such directory, linked as OUT/scorers) and reused by every method."""
    dest, scorers = f"cleaned-{method}", out / "scorers"
    if all((scorers / d / "best.safetensors").is_file() for d in ("forward", "backward")):
        using: tuple[str, ...] = ("--score-with", str(scorers / "forward"), str(scorers / "backward"))
    else:
        using = ("--score-with", "auto", "--scorer-steps", str(steps))
    seconds = clean(out, dest, *using, "--keep-best", str(keep_best), "--score-method", method)
    if not scorers.exists():
        scorers.symlink_to(out / dest / "scorers")
    report = json.loads((out / dest / "report.json").read_text())
    threshold = report["model"]["sources"]["noisy"]["threshold"]
    rows = table(labels(out), removals(out / dest / "noisy.removed.tsv"))  # rules and model, input lines
    record(out, {"stage": "score", "method": method, "keep_best": keep_best, "scorer_steps": steps,
                 "scorers_trained": using[1] == "auto", "threshold": threshold, "seconds": seconds,
                 "by_label": rows})  # fmt: skip


def train(out: Path, steps: int, which: list[str], train_seed: int | None = None) -> None:
    d = multi30k.locate_langs(["de", "en"])
    corpora = {
        "clean": (d / "train.de.gz", d / "train.en.gz"),
        "noisy": (out / "noisy.de", out / "noisy.en"),
    }
    for name in which:  # clean, noisy, oracle, rules or cleaned-METHOD (the score stage's)
        if name == "oracle":
            oracle(out)
        src, tgt = corpora.get(name, (out / name / "noisy.de", out / name / "noisy.en"))
        run = out / "runs" / (name if train_seed is None else f"{name}-seed{train_seed}")
        seeded = [] if train_seed is None else ["--train.seed", str(train_seed)]
        t = time.perf_counter()
        aiayn(
            "train",
            "--config",
            "quickstart",
            "--run-dir",
            str(run),
            "--data.corpus",
            "files",
            "--data.train_src",
            str(src),
            "--data.train_tgt",
            str(tgt),
            "--data.valid_src",
            str(d / "val.de.gz"),
            "--data.valid_tgt",
            str(d / "val.en.gz"),
            "--data.test_src",
            str(d / "test_2016_flickr.de.gz"),
            "--data.test_tgt",
            str(d / "test_2016_flickr.en.gz"),
            "--train.max_steps",
            str(steps),
            "--train.max_minutes",
            "null",  # the same updates for every corpus, however busy the machine
            "--train.progress",
            "false",
            *seeded,
        )
        minutes = round((time.perf_counter() - t) / 60, 1)
        res = subprocess.run(
            [sys.executable, "-m", "aiayn", "evaluate", "-c", str(run), "--split", "test", "--json"],
            check=True,
            capture_output=True,
            text=True,
        )
        record(
            out,
            {
                "stage": "train",
                "corpus": name,
                "train_seed": train_seed,
                "steps": steps,
                "minutes": minutes,
                "test": json.loads(res.stdout.strip().splitlines()[-1]),
            },
        )


def oracle(out: Path) -> None:
    """OUT/oracle: the noisy corpus's clean pairs alone, what a perfect filter would keep (the clean
    corpus less the pairs the noise took the place of), in order."""
    keep = [label == "clean" for label in labels(out)]
    (out / "oracle").mkdir(exist_ok=True)
    for side in ("de", "en"):
        lines = (out / f"noisy.{side}").read_text(encoding="utf-8").split("\n")[:-1]
        kept = [line for line, k in zip(lines, keep, strict=True) if k]
        (out / "oracle" / f"noisy.{side}").write_text("".join(x + "\n" for x in kept), encoding="utf-8")


def record(out: Path, r: dict) -> None:
    print(json.dumps(r))
    with open(out / "results.jsonl", "a") as f:
        f.write(json.dumps(r) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("stage", choices=["make", "filters", "score", "train"])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep-best", type=float, default=0.85)
    p.add_argument("--score-method", choices=["gain", "dcce"], default="gain")
    p.add_argument("--scorer-steps", type=int, default=3000)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--corpora", default="clean,noisy,rules,cleaned-gain")
    p.add_argument("--train-seed", type=int, help="train.seed of the runs (OUT/runs/NAME-seedN); default: the recipe's")
    a = p.parse_args()
    if a.stage == "make":
        make(a.out, a.seed)
    elif a.stage == "filters":
        filters(a.out)
    elif a.stage == "score":
        score(a.out, a.keep_best, a.scorer_steps, a.score_method)
    else:
        train(a.out, a.steps, a.corpora.split(","), a.train_seed)


if __name__ == "__main__":
    main()
