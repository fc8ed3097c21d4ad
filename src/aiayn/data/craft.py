"""The CRAFT treebank (v5; Verspoor et al., 2012; Cohen et al., 2017): constituency trees of 97
biomedical articles in Penn Treebank style, 30,830 trees, under CC BY 3.0, with the corpus' own
document split (60 train / 7 dev / 30 test articles).

Resolution order: a mirror (`data_dir`, then $AIAYN_CRAFT_DIR) holding `craft-penn-trees.tgz` (or a
`penn/` directory of `<PMID>.tree` files) and `craft-ids-{train,dev,test}.txt`; else the cache
`$AIAYN_HOME/craft`, filled by downloading the 100 files from the corpus repository at a fixed
commit, checked together against one digest, and published only when all of them match.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from aiayn.data.download import aiayn_home, download
from aiayn.data.errors import DataError

COMMIT = "2abe82b8bb8089448b84937d5f61d8c218011322"
BASE_URL = f"https://raw.githubusercontent.com/UCDenver-ccp/CRAFT/{COMMIT}/"
SPLITS = {"train": "train", "valid": "dev", "test": "test"}
# sha256 over the sorted lines "<name>\0<sha256 of the file>\n" of the 97 penn/<PMID>.tree files and the
# three craft-ids-<split>.txt files at COMMIT
DIGEST = "3922f2e7f4e6cef61e193c42bde518c42f45f24a655377d92b238947553fb884"
ATTRIBUTION = "CRAFT corpus, University of Colorado Anschutz Medical Campus (Verspoor et al., 2012; Cohen et al., 2017)"


def ids(directory: Path, split: str) -> list[str]:
    """The article ids (PMIDs) of a split: train, valid (the corpus' dev) or test."""
    path = directory / f"craft-ids-{SPLITS[split]}.txt"
    if not path.is_file():
        raise DataError(f"CRAFT split file missing: {path}")
    return path.read_text().split()


def _files(directory: Path) -> dict[str, bytes]:
    """name -> bytes of the 100 files that make the corpus, from a tgz or a penn/ directory."""
    files: dict[str, bytes] = {}
    for split in SPLITS.values():
        p = directory / f"craft-ids-{split}.txt"
        if p.is_file():
            files[p.name] = p.read_bytes()
    tgz = directory / "craft-penn-trees.tgz"
    if tgz.is_file():
        with tarfile.open(tgz) as tf:
            for m in tf.getmembers():
                f = tf.extractfile(m) if m.isfile() and m.name.endswith(".tree") else None
                if f is not None:
                    files[f"penn/{Path(m.name).name}"] = f.read()
    else:
        for p in sorted((directory / "penn").glob("*.tree")):
            files[f"penn/{p.name}"] = p.read_bytes()
    return files


def digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(f"{name}\0{hashlib.sha256(files[name]).hexdigest()}\n".encode())
    return h.hexdigest()


def verify(directory: Path) -> None:
    """The directory holds exactly CRAFT v5's trees and splits (one digest over all 100 files)."""
    files = _files(directory)
    got = digest(files)
    if got != DIGEST:
        raise DataError(
            f"{directory} does not hold CRAFT v5's trees and splits ({len(files)} files, digest {got}, "
            f"expected {DIGEST}): give the directory with craft-penn-trees.tgz and craft-ids-*.txt"
        )


def fetch(base_url: str | None = None, dest: Path | None = None) -> Path:
    """Download the corpus into `dest` (default: the cache): the split files, then every article's
    trees, into a temporary directory published by one rename once the digest matches."""
    base = (base_url or os.environ.get("AIAYN_CRAFT_URL") or BASE_URL).rstrip("/") + "/"
    dest = dest or aiayn_home() / "craft"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".craft-", dir=dest.parent))
    try:
        hint = "; offline: set AIAYN_CRAFT_DIR (or data.data_dir) to a copy with craft-penn-trees.tgz, craft-ids-*.txt"
        for split in SPLITS.values():
            download(f"{base}articles/ids/craft-ids-{split}.txt", tmp / f"craft-ids-{split}.txt", None, hint=hint)
        articles = [i for s in SPLITS for i in ids(tmp, s)]
        print(f"downloading CRAFT: {len(articles)} articles from {base}", file=sys.stderr)
        for pmid in articles:
            url = f"{base}structural-annotation/treebank/penn/{pmid}.tree"
            download(url, tmp / "penn" / f"{pmid}.tree", None, hint=hint)
        verify(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def locate(data_dir: str | os.PathLike | None = None, download_ok: bool = True) -> Path:
    """The directory holding the corpus: the mirror, the cache, or a fresh download."""
    mirror = data_dir or os.environ.get("AIAYN_CRAFT_DIR")
    if mirror:
        d = Path(mirror)
        if not d.is_dir():
            raise DataError(f"CRAFT directory not found: {d}")
        return d
    cache = aiayn_home() / "craft"
    if (cache / "penn").is_dir():
        return cache
    if not download_ok:
        raise DataError(f"CRAFT not found in {cache}; set AIAYN_CRAFT_DIR or data.data_dir")
    return fetch()


def articles(directory: Path) -> dict[str, list[tuple[str, str]]]:
    """Each split's articles (train / valid / test) as (file name, bracket text), in the split file's
    order; aiayn.data.treebank reads and cleans their trees."""
    files = _files(directory)
    out: dict[str, list[tuple[str, str]]] = {}
    for split in SPLITS:
        texts: list[tuple[str, str]] = []
        for pmid in ids(directory, split):
            name = f"penn/{pmid}.tree"
            if name not in files:
                raise DataError(f"CRAFT article {pmid} of the {SPLITS[split]} split has no trees in {directory}")
            texts.append((name, files[name].decode("utf-8")))
        out[split] = texts
    return out
