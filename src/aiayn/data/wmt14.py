"""WMT 2014 English-German and English-French, the paper's data (§5.1): `aiayn data get wmt14 --pair en-de`.

Training data, concatenated in this order into `train.{en,de}` (or `train.{en,fr}`):
  EN-DE (about 4.5M pairs, "about 4.5 million sentence pairs" in §5.1): Europarl v7, Common Crawl,
        News Commentary v9;
  EN-FR (about 41M raw pairs; §5.1 reports 36M): the same three plus the UN corpus (undoc.2000) and the
        10^9 French-English corpus (Gigafren).
News Commentary is v9, the version released for WMT 2014 (www.statmt.org/wmt14), which is what the
shared task and the paper trained on and what TFDS' wmt14_translate uses; fairseq's
prepare-wmt14en2de.sh takes v12 from WMT 2017 by default (v9 only with --icml17), a later and larger
release that is not WMT 2014 data.

valid = newstest2013 (dev/newstest2013.* of WMT19's dev.tgz, the archive TFDS takes it from);
test = newstest2014 as sacreBLEU's `wmt14/full` provides it (test-full.tgz, all 3,003 sentences), since
that is what BLEU is reported against. Its SGM is read as sacreBLEU reads it: the text between `<seg ...>`
and `</seg>` with whitespace runs collapsed and entities left as they are: sacreBLEU does not unescape
them (its author: WMT test sets have not used such escapes since 2009), and matching its references
byte for byte matters more here than tidy text. The test files follow the paper's direction, en->X:
newstest2014-deen-src.en.sgm and newstest2014-deen-ref.de.sgm (fren for French).

Files, in `$AIAYN_HOME/wmt14/<pair>/`: train.*, valid.*, test.* (one sentence per line, line-aligned) and
manifest.json (written last: line counts and sizes; a re-run that finds them intact only verifies).
The archives stay in `$AIAYN_HOME/wmt14/archives/` (about 1.7 GB for EN-DE, 6.7 GB with EN-FR; delete
them once both pairs are prepared) unless `data_dir` already holds them.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from aiayn.data.download import aiayn_home, download, file_digest
from aiayn.data.errors import DataError
from aiayn.data.io import check_counts

PAIRS = ("en-de", "en-fr")
_FORMAT = 1  # bump when the output files change for the same archives


@dataclass(frozen=True)
class Checksum:
    """What an archive must match: sha256 where one is published, else md5; size where known."""

    size: int | None
    sha256: str | None = None
    md5: str | None = None


# Published checksums, never computed here. Tests substitute their fixtures' own table (the
# `checksums` argument of `get`). Sizes and sha256: TFDS url_checksums (wmt13/14/15_translate.txt,
# wmt17_translate.txt). test-full.tgz: md5 from sacreBLEU's DATASETS["wmt14/full"]; no sha256 or size
# is published for it, so its size is not checked.
CHECKSUMS: dict[str, Checksum] = {
    "training-parallel-europarl-v7.tgz": Checksum(
        657632379, sha256="0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7"
    ),
    "training-parallel-commoncrawl.tgz": Checksum(
        918311367, sha256="c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5"
    ),
    "training-parallel-nc-v9.tgz": Checksum(
        80418416, sha256="cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485"
    ),
    "training-parallel-un.tgz": Checksum(
        2365634246, sha256="29141b5c1eba149a94f7a59d3b1a834b2e47fe0f8758d68dcd77a3d3f497ee47"
    ),
    "training-giga-fren.tar": Checksum(
        2595102720, sha256="3ff8319f6919393520559bfbc7ad6a747ec81b3abc7be9993b338d4b017b4d9a"
    ),
    "dev.tgz": Checksum(38654961, sha256="7a7deccf82ebb05ba508dba5eb21356492224e8f630ec4f992132b029b4b25e7"),
    "test-full.tgz": Checksum(None, md5="a8cd784e006feb32ac6f3d9ec7eb389a"),
}

URLS = {
    "training-parallel-europarl-v7.tgz": "https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
    "training-parallel-commoncrawl.tgz": "https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
    "training-parallel-nc-v9.tgz": "https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
    "training-parallel-un.tgz": "https://www.statmt.org/wmt13/training-parallel-un.tgz",
    "training-giga-fren.tar": "https://www.statmt.org/wmt10/training-giga-fren.tar",
    "dev.tgz": "https://data.statmt.org/wmt19/translation-task/dev.tgz",
    "test-full.tgz": "https://www.statmt.org/wmt14/test-full.tgz",
}


@dataclass(frozen=True)
class Corpus:
    """One line-aligned corpus: its archive and the member holding each language's side."""

    name: str
    archive: str
    members: dict[str, str]  # language -> member path in the archive
    sgm: bool = False  # members are WMT SGM files (the test set)


def _train(x: str) -> list[Corpus]:
    pair = f"{x}-en"  # the archives name the pairs X-en
    corpora = [
        Corpus(
            "europarl-v7",
            "training-parallel-europarl-v7.tgz",
            {lang: f"training/europarl-v7.{pair}.{lang}" for lang in ("en", x)},
        ),
        Corpus(
            "commoncrawl",
            "training-parallel-commoncrawl.tgz",
            {lang: f"commoncrawl.{pair}.{lang}" for lang in ("en", x)},
        ),
        Corpus(
            "news-commentary-v9",
            "training-parallel-nc-v9.tgz",
            {lang: f"training/news-commentary-v9.{pair}.{lang}" for lang in ("en", x)},
        ),
    ]
    if x == "fr":
        corpora += [
            Corpus("un", "training-parallel-un.tgz", {lang: f"un/undoc.2000.{pair}.{lang}" for lang in ("en", x)}),
            Corpus(
                "giga-fren",
                "training-giga-fren.tar",  # gzipped text inside a plain tar
                {lang: f"giga-fren.release2.fixed.{lang}.gz" for lang in ("en", x)},
            ),
        ]
    return corpora


def splits(pair: str) -> dict[str, list[Corpus]]:
    """The corpora of each split of `pair` ("en-de" or "en-fr"), in concatenation order."""
    x = _check_pair(pair).split("-")[1]
    return {
        "train": _train(x),
        "valid": [Corpus("newstest2013", "dev.tgz", {lang: f"dev/newstest2013.{lang}" for lang in ("en", x)})],
        "test": [
            Corpus(
                "newstest2014",
                "test-full.tgz",
                {"en": f"test-full/newstest2014-{x}en-src.en.sgm", x: f"test-full/newstest2014-{x}en-ref.{x}.sgm"},
                sgm=True,
            )
        ],
    }


def archives(pair: str) -> list[str]:
    """Archive file names `pair` needs, each once."""
    return list(dict.fromkeys(c.archive for cs in splits(pair).values() for c in cs))


def root() -> Path:
    """Where prepared pairs and the downloaded archives live: $AIAYN_HOME/wmt14."""
    return aiayn_home() / "wmt14"


def pair_of(src_lang: str, tgt_lang: str) -> str:
    """ "en-de" for en->de and de->en: the files are per language, so one preparation serves both."""
    langs = {src_lang, tgt_lang}
    for pair in PAIRS:
        if langs == set(pair.split("-")):
            return pair
    raise DataError(f"wmt14 has no {src_lang}-{tgt_lang} data; pairs: {', '.join(PAIRS)} (either direction)")


def locate(src_lang: str, tgt_lang: str, data_dir: str | os.PathLike | None = None) -> dict[str, tuple[Path, Path]]:
    """(source, target) files of "train", "valid", "test" for the prepared pair, in either direction, from
    $AIAYN_HOME/wmt14/<pair>/. Raises DataError with the command to run when it is absent or incomplete;
    `data_dir` (where the user keeps the archives, as for `get`) goes into that command."""
    pair = pair_of(src_lang, tgt_lang)
    d = root() / pair
    if _intact(d) is None:
        flag = f" --data-dir {data_dir}" if data_dir is not None else ""
        raise DataError(f"wmt14 {pair} is not prepared in {d}; run `aiayn data get wmt14 --pair {pair}{flag}`")
    return {s: (d / f"{s}.{src_lang}", d / f"{s}.{tgt_lang}") for s in ("train", "valid", "test")}


def get(
    pair: str,
    data_dir: str | os.PathLike | None = None,
    base_url: str | None = None,
    checksums: dict[str, Checksum] | None = None,
    log: Callable[[str], None] | None = None,
    progress: bool = True,
) -> Path:
    """Download (or take from `data_dir`) the archives of `pair`, verify them and write the train, valid
    and test files into $AIAYN_HOME/wmt14/<pair>/. Returns that directory.

    `base_url`: fetch the same file names from this mirror instead of statmt.org. `checksums` replaces
    CHECKSUMS (tests serve fixture archives). An intact earlier result is only verified (sizes against
    its manifest); nothing is downloaded or read again."""
    _check_pair(pair)
    table = CHECKSUMS if checksums is None else checksums
    out = root() / pair
    manifest = _intact(out)
    if manifest is not None and manifest.get("archives") == _fingerprint(pair, table):
        return out

    archive_dir = root() / "archives"
    paths = {
        name: _archive(name, table[name], data_dir, archive_dir, base_url, log, progress) for name in archives(pair)
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").unlink(missing_ok=True)  # the files below change: no longer intact
    files: dict[str, dict[str, int]] = {}
    corpora: dict[str, int] = {}
    for split, cs in splits(pair).items():
        a, b = langs = list(cs[0].members)
        tmps = {lang: _temp(out / f"{split}.{lang}") for lang in langs}
        lines = 0
        try:
            with open(tmps[a], "wb") as fa, open(tmps[b], "wb") as fb:
                for c in cs:
                    if log:
                        log(f"extracting {c.name} from {c.archive}")
                    counts = _extract(c, paths[c.archive], {a: fa, b: fb})
                    check_counts(f"{c.archive}:{c.members[a]}", counts[a], f"{c.archive}:{c.members[b]}", counts[b])
                    corpora[f"{split}/{c.name}"] = counts[a]
                    lines += counts[a]
            for lang in langs:
                os.replace(tmps[lang], out / f"{split}.{lang}")
                files[f"{split}.{lang}"] = {"lines": lines, "bytes": (out / f"{split}.{lang}").stat().st_size}
        finally:
            for t in tmps.values():
                t.unlink(missing_ok=True)
    _write_json(
        out / "manifest.json",
        {"format": _FORMAT, "pair": pair, "archives": _fingerprint(pair, table), "corpora": corpora, "files": files},
    )
    return out


def summary(pair: str) -> str:
    """One line about a prepared pair: its directory and the sentence pairs of each split."""
    d = root() / pair
    m = _intact(d)
    if m is None:
        raise DataError(f"wmt14 {pair} is not prepared in {d}")
    x = pair.split("-")[1]
    return (
        f"wmt14 {pair} in {d}: "
        + ", ".join(f"{s} {m['files'][f'{s}.{x}']['lines']:,}" for s in ("train", "valid", "test"))
        + " pairs, verified"
    )


def read_sgm(data: bytes) -> list[str]:
    """Segments of a WMT SGM file exactly as sacreBLEU's FakeSGMLDataset extracts them: lines starting
    with `<seg `, the text between the tag and `</seg>`, whitespace runs collapsed to one space."""
    out = []
    for line in io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"):  # universal newlines, as sacreBLEU reads
        if line.startswith("<seg "):
            out.append(re.sub(r"\s+", " ", re.sub(r"<seg.*?>(.*)</seg>.*?", "\\1", line).strip()))
    return out


# -- internals --------------------------------------------------------------------------------------


def _check_pair(pair: str) -> str:
    if pair not in PAIRS:
        raise DataError(f"unknown wmt14 pair {pair!r}; choose {' or '.join(PAIRS)}")
    return pair


def _fingerprint(pair: str, table: dict[str, Checksum]) -> dict[str, str]:
    """The archives a result was built from, by checksum (a changed table means a rebuild)."""
    return {n: table[n].sha256 or table[n].md5 or f"size:{table[n].size}" for n in archives(pair)}


def _intact(d: Path) -> dict | None:
    """The manifest of `d` when every file it lists is present with its recorded size, else None."""
    try:
        m = json.loads((d / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if m.get("format") != _FORMAT:
        return None
    for name, info in m.get("files", {}).items():
        p = d / name
        if not p.is_file() or p.stat().st_size != info["bytes"]:
            return None
    return m if m.get("files") else None


def _archive(
    name: str,
    ck: Checksum,
    data_dir: str | os.PathLike | None,
    archive_dir: Path,
    base_url: str | None,
    log: Callable[[str], None] | None,
    progress: bool,
) -> Path:
    """A verified local copy of archive `name`: from `data_dir`, the cache, or downloaded into the cache."""
    if data_dir is not None and (Path(data_dir) / name).is_file():
        return _verified(Path(data_dir) / name, ck)
    path = archive_dir / name
    if path.is_file():
        if _matches(path, ck):
            return path
        path.unlink()  # e.g. a different release under the same name: fetch it again
    url = f"{base_url.rstrip('/')}/{name}" if base_url else URLS[name]
    if log:
        log(f"downloading {url}" + (f" ({ck.size / 2**20:,.0f} MiB)" if ck.size else ""))
    where = f"{data_dir} (--data-dir)" if data_dir is not None else str(archive_dir)
    return download(
        url,
        path,
        ck.sha256,
        md5=ck.md5,
        size=ck.size,
        resume=True,
        progress=progress,
        timeout=120.0,
        hint=f"; copy the archives into {where} or pass --base-url",
    )


def _verified(path: Path, ck: Checksum) -> Path:
    if not _matches(path, ck):
        want = f"sha256 {ck.sha256}" if ck.sha256 else f"md5 {ck.md5}" if ck.md5 else f"{ck.size} bytes"
        raise DataError(f"checksum mismatch: {path} is not the expected archive ({want})")
    return path


def _matches(path: Path, ck: Checksum) -> bool:
    if ck.size is not None and path.stat().st_size != ck.size:
        return False  # cheap, and spares hashing gigabytes
    if ck.sha256:
        return file_digest(path, "sha256") == ck.sha256
    if ck.md5:
        return file_digest(path, "md5") == ck.md5
    return True


def _extract(c: Corpus, archive: Path, out: dict[str, IO[bytes]]) -> dict[str, int]:
    """Append the members of `c` to the per-language outputs, streaming the archive once; lines per language."""
    wanted = {member: lang for lang, member in c.members.items()}
    counts: dict[str, int] = {}
    try:
        with tarfile.open(archive, "r|*") as tar:  # a stream: members in archive order, nothing on disk
            for m in tar:
                p = PurePosixPath(m.name)
                if p.is_absolute() or ".." in p.parts:
                    raise DataError(f"{archive}: unsafe member path {m.name!r}; refusing the archive")
                lang = wanted.get(str(p))
                if lang is None:
                    continue
                if not m.isfile():
                    raise DataError(f"{archive}: member {m.name} is not a regular file")
                f = tar.extractfile(m)
                assert f is not None  # m.isfile()
                if c.sgm:
                    lines = read_sgm(f.read())
                    out[lang].write("".join(x + "\n" for x in lines).encode("utf-8"))
                    counts[lang] = len(lines)
                else:
                    counts[lang] = _copy_lines(gzip.GzipFile(fileobj=f) if m.name.endswith(".gz") else f, out[lang])
                if len(counts) == len(wanted):
                    break  # the rest of a multi-gigabyte archive holds other language pairs
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise DataError(f"{archive}: extraction failed ({e})") from None
    missing = [m for m, lang in wanted.items() if lang not in counts]
    if missing:
        raise DataError(f"{archive} has no member {missing[0]}; is it the right archive?")
    return counts


def _copy_lines(src: IO[bytes] | gzip.GzipFile, out: IO[bytes]) -> int:
    """Copy `src` to `out`, returning its line count; a last line without "\\n" gets one, so that the next
    corpus starts on a line of its own."""
    n, last = 0, b"\n"
    for chunk in iter(lambda: src.read(1 << 20), b""):
        out.write(chunk)
        n += chunk.count(b"\n")
        last = chunk[-1:]
    if last != b"\n":
        out.write(b"\n")
        n += 1
    return n


def _temp(dest: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    return Path(name)


def _write_json(path: Path, obj: dict) -> None:
    tmp = _temp(path)
    try:
        tmp.write_text(json.dumps(obj, indent=1) + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
