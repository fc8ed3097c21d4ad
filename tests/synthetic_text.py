"""Made-up text for tests that must run on every machine: caption-like German/English pairs, and a
Multi30k-shaped directory of them whose checksums a test puts into aiayn.data.multi30k's tables."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np
import pytest

# Caption-like sentence pairs: a subject, a verb and a place, each with its German translation.
_SUBJECTS = [
    ("a man", "ein Mann"), ("a woman", "eine Frau"), ("a dog", "ein Hund"), ("a child", "ein Kind"),
    ("two men", "zwei Männer"), ("a girl", "ein Mädchen"), ("a boy", "ein Junge"), ("an old woman", "eine alte Frau"),
    ("a group of people", "eine Gruppe von Menschen"), ("a black dog", "ein schwarzer Hund"),
]  # fmt: skip
_VERBS = [
    ("is running", "rennt"), ("is sitting", "sitzt"), ("is standing", "steht"), ("is playing", "spielt"),
    ("is walking", "geht"), ("is jumping", "springt"), ("is sleeping", "schläft"), ("is eating", "isst"),
]  # fmt: skip
_PLACES = [
    ("in the park", "im Park"), ("on the street", "auf der Straße"), ("in the water", "im Wasser"),
    ("on the beach", "am Strand"), ("in the snow", "im Schnee"), ("on a bench", "auf einer Bank"),
    ("in front of a building", "vor einem Gebäude"), ("in the grass", "im Gras"),
]  # fmt: skip


_DE_PLURAL = {"rennt": "rennen", "sitzt": "sitzen", "steht": "stehen", "spielt": "spielen", "geht": "gehen",
              "springt": "springen", "schläft": "schlafen", "isst": "essen"}  # fmt: skip


def captions(n: int, seed: int) -> tuple[list[str], list[str]]:
    """n English captions and their German translations, drawn from the lists above."""
    rng = np.random.default_rng(seed)
    en, de = [], []
    for _ in range(n):
        (se, sd), (ve, vd), (pe, pd) = (x[rng.integers(len(x))] for x in (_SUBJECTS, _VERBS, _PLACES))
        if se.startswith("two "):
            ve, vd = ve.replace("is ", "are "), _DE_PLURAL[vd]
        en.append(f"{se[0].upper()}{se[1:]} {ve} {pe}.")
        de.append(f"{sd[0].upper()}{sd[1:]} {vd} {pd}.")
    return en, de


def synthetic_multi30k(d: Path, monkeypatch: pytest.MonkeyPatch, sizes: dict[str, int] | None = None) -> Path:
    """A mirror laid out like the real one (raw/<stem>.<lang>.gz and tok/<stem>.lc.norm.tok.<lang>.gz for
    every language) of made-up captions (de/en aligned; cs and fr: the English, marked), with
    multi30k's checksum tables swapped for these files' own, as the published ones are for the real
    files. `sizes`: lines per split (train, valid, test)."""
    from aiayn.data import multi30k

    sizes = sizes or {"train": 300, "valid": 40, "test": 40}
    stems = {v: k for k, v in multi30k.SPLITS.items()}  # file stem -> split
    sha, tok_sha = {}, {}
    d.mkdir(parents=True, exist_ok=True)
    (d / "tok").mkdir(exist_ok=True)
    text: dict[tuple[str, str], list[str]] = {}
    for seed, (stem, split) in enumerate(stems.items()):
        en, de = captions(sizes[split], seed)
        text[stem, "en"], text[stem, "de"] = en, de
        text[stem, "cs"], text[stem, "fr"] = [f"cs: {x}" for x in en], [f"fr: {x}" for x in en]
    for name in multi30k.raw_files(multi30k.LANGS):
        stem, lang = name[: -len(".xx.gz")], name[-5:-3]
        (d / name).write_bytes(gzip.compress("".join(x + "\n" for x in text[stem, lang]).encode(), mtime=0))
        sha[name] = hashlib.sha256((d / name).read_bytes()).hexdigest()
    for name in multi30k.tok_files(multi30k.LANGS):
        stem, lang = name.split(".lc.norm.tok.")
        body = "".join(x.lower().replace(".", " .") + "\n" for x in text[stem, lang]).encode()
        (d / "tok" / f"{name}.gz").write_bytes(gzip.compress(body, mtime=0))
        tok_sha[name] = hashlib.sha256(body).hexdigest()
    assert sha.keys() == multi30k.SHA256.keys() and tok_sha.keys() == multi30k.TOK_SHA256.keys()
    monkeypatch.setattr(multi30k, "SHA256", sha)
    monkeypatch.setattr(multi30k, "TOK_SHA256", tok_sha)
    return d
