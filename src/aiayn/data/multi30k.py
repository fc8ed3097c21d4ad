"""Multi30k (Elliott et al., 2016), task 1: 29,000 train / 1,014 val / 1,000 test_2016_flickr pairs.

Resolution order for the files: an offline mirror (`data_dir` argument, then `$AIAYN_DATA_DIR`) laid
out like the dataset's `data/task1/raw/` (train.de.gz, val.en.gz, ... plus tok/ references), else the
cache `$AIAYN_HOME/multi30k` (default ~/.cache/aiayn), filled by downloading from the dataset's
canonical repository with sha256 verification and atomic writes.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from aiayn.data.download import aiayn_home, download
from aiayn.data.errors import DataError

BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/"
LANGS = ("cs", "de", "en", "fr")
# contract split name -> Multi30k file stem
SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
SIZES = {"train": 29000, "valid": 1014, "test": 1000}

# sha256 of raw/<stem>.<lang>.gz (the gzipped files exactly as published)
SHA256 = {
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
}
# sha256 of the *uncompressed* tok/<stem>.lc.norm.tok.<lang> references (published uncompressed upstream;
# stored gzipped in the mirror and the cache). Used for the published tokenized-BLEU protocol.
TOK_SHA256 = {
    "val.lc.norm.tok.cs": "b87ee4917f4a0f9ca6cca03e402026c9f4437dc1bd6a7dadfd2544ecfb6c5501",
    "val.lc.norm.tok.de": "97232bd273eceb7207f689527386a97e4be2616b18ada47576bdaf96c8ae1f00",
    "val.lc.norm.tok.en": "46573ce391ae227f1c72f873392436a20ef18e0a6d518098cfbd70b77c8572ec",
    "val.lc.norm.tok.fr": "b303e301aa21fe7822a846b2b3fb2d5a1121ec807cd5b1d006fb7b2b5507168a",
    "test_2016_flickr.lc.norm.tok.cs": "748c8816de928732365176e5c5d2f9bbabcec9b8d4448fba2d230feb057898a7",
    "test_2016_flickr.lc.norm.tok.de": "c6a33d39d48f9f510de147651316cd9d918e09ad0219df734a2f16b6baccacc4",
    "test_2016_flickr.lc.norm.tok.en": "5b7f32627cf99eced828311b955dae9800bb52bc8b91cf8b6526829e605b29d2",
    "test_2016_flickr.lc.norm.tok.fr": "1463bd5960f9bfe098ec3cd752d3df0c49c84dc646fb518964a29232658cd836",
}


def cache_dir() -> Path:
    return aiayn_home() / "multi30k"


def mirror_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The offline mirror to use: `data_dir`, else $AIAYN_DATA_DIR, else None."""
    d = data_dir or os.environ.get("AIAYN_DATA_DIR")
    return Path(d) if d else None


def check_langs(src_lang: str, tgt_lang: str) -> None:
    for lang in (src_lang, tgt_lang):
        if lang not in LANGS:
            raise DataError(f"multi30k has no {lang!r} text; languages: {', '.join(LANGS)}")
    if src_lang == tgt_lang:
        raise DataError(f"source and target language are both {src_lang!r}")


def split_name(split: str) -> str:
    """'valid'/'val' -> 'val', 'test'/'test_2016_flickr' -> 'test_2016_flickr', 'train' -> 'train'."""
    if split in SPLITS:
        return SPLITS[split]
    if split in SPLITS.values():
        return split
    raise DataError(f"unknown multi30k split {split!r}; choose one of {', '.join(SPLITS)}")


def raw_files(langs: Iterable[str]) -> list[str]:
    return [f"{stem}.{lang}.gz" for stem in SPLITS.values() for lang in langs]


def tok_files(langs: Iterable[str]) -> list[str]:
    return [f"{stem}.lc.norm.tok.{lang}" for stem in ("val", "test_2016_flickr") for lang in langs]


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(
    langs: Iterable[str] = LANGS,
    base_url: str | None = None,
    dest: str | os.PathLike | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Download the raw files (and tok references) for `langs` into the cache; files already present
    with the right checksum are kept. Returns the directory. Base URL: argument, $AIAYN_MULTI30K_URL, BASE_URL."""
    langs = list(langs)
    for lang in langs:
        if lang not in LANGS:
            raise DataError(f"multi30k has no {lang!r} text; languages: {', '.join(LANGS)}")
    base = (base_url or os.environ.get("AIAYN_MULTI30K_URL") or BASE_URL).rstrip("/") + "/"
    dest = Path(dest) if dest is not None else cache_dir()
    for name in raw_files(langs):
        path = dest / name
        if path.is_file() and sha256_file(path) == SHA256[name]:
            continue
        if log:
            log(f"downloading {base}raw/{name}")
        download(f"{base}raw/{name}", path, SHA256[name])
    for name in tok_files(langs):
        path = dest / "tok" / f"{name}.gz"
        if path.is_file() and _sha256_gz(path) == TOK_SHA256[name]:
            continue
        if log:
            log(f"downloading {base}tok/{name}")
        download(f"{base}tok/{name}", path, TOK_SHA256[name], transform=lambda b: gzip.compress(b, mtime=0))
    return dest


def verify(directory: str | os.PathLike, langs: Iterable[str] = LANGS) -> None:
    """Check that a mirror or cache holds the files for `langs` with the published checksums."""
    d = Path(directory)
    for name in raw_files(langs):
        path = d / name
        if not path.is_file():
            raise DataError(f"multi30k file missing: {path}")
        if sha256_file(path) != SHA256[name]:
            raise DataError(f"checksum mismatch: {path} (sha256 {sha256_file(path)}, expected {SHA256[name]})")


def locate(
    src_lang: str,
    tgt_lang: str,
    data_dir: str | os.PathLike | None = None,
    download_ok: bool = True,
    base_url: str | None = None,
) -> Path:
    """The directory holding train/val/test_2016_flickr files for the pair: mirror, cache, or download."""
    check_langs(src_lang, tgt_lang)
    return locate_langs((src_lang, tgt_lang), data_dir, download_ok, base_url)


def locate_langs(
    langs: Sequence[str],
    data_dir: str | os.PathLike | None = None,
    download_ok: bool = True,
    base_url: str | None = None,
) -> Path:
    """The directory holding the train/val/test_2016_flickr files of `langs`: mirror, cache, or download."""
    for lang in langs:
        if lang not in LANGS:
            raise DataError(f"multi30k has no {lang!r} text; languages: {', '.join(LANGS)}")
    mirror = mirror_dir(data_dir)
    if mirror is not None:
        if not mirror.is_dir():
            raise DataError(f"multi30k data directory not found: {mirror}")
        for name in raw_files(langs):
            if not (mirror / name).is_file():
                raise DataError(f"multi30k file missing: {mirror / name}")
        return mirror
    cache = cache_dir()
    if all((cache / n).is_file() for n in raw_files(langs)):
        return cache
    if not download_ok:
        raise DataError(f"multi30k not found in {cache}; run `aiayn data get multi30k` or set AIAYN_DATA_DIR")
    return fetch(langs, base_url=base_url)


def paths(split: str, lang: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Path of the raw gz file of (split, lang) in the mirror or cache (no download)."""
    mirror = mirror_dir(data_dir)
    return (mirror if mirror is not None else cache_dir()) / f"{split_name(split)}.{lang}.gz"


def tokenized_reference_path(split: str, lang: str, data_dir: str | os.PathLike | None = None) -> Path:
    """The lowercased, normalised, tokenized reference of val/test (tok/<stem>.lc.norm.tok.<lang>.gz)
    used by the published Multi30k BLEU protocol. Looks in the mirror, else the cache."""
    stem = split_name(split)
    if stem == "train":
        raise DataError("tokenized references exist for valid and test only")
    if lang not in LANGS:
        raise DataError(f"multi30k has no {lang!r} text; languages: {', '.join(LANGS)}")
    mirror = mirror_dir(data_dir)
    base = mirror if mirror is not None else cache_dir()
    path = base / "tok" / f"{stem}.lc.norm.tok.{lang}.gz"
    if not path.is_file():
        raise DataError(f"tokenized reference not found: {path}; run `aiayn data get multi30k`")
    return path


def _sha256_gz(path: Path) -> str:
    return hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()
