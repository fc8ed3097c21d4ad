"""OPUS corpora by name (`opus:NAME` or `opus:NAME@VERSION` in a run's sources): the Moses-format archive of
one language pair, downloaded once into $AIAYN_HOME/opus and unpacked into two line-aligned files.

Which archive a name means comes from opustools' own index of OPUS (its `OpusGet` with the copy of the
OPUS database it ships: nothing is asked of the network to resolve a name; `latest` is the newest
version that index knows). The archive itself comes from OPUS's object store, or from a mirror laid out
like it: $AIAYN_OPUS_URL replaces https://object.pouta.csc.fi/ (the tests' local stand-in).
"""

from __future__ import annotations

import os
import shutil
import zipfile
from functools import partial
from pathlib import Path
from typing import Any

from aiayn.data.download import aiayn_home, download
from aiayn.data.errors import DataError
from aiayn.fileio import atomic_write

OBJECT_STORE = "https://object.pouta.csc.fi/"


def locate(name: str, src_lang: str, tgt_lang: str, progress: bool = False) -> tuple[Path, Path]:
    """(source file, target file) of OPUS corpus `name` ("Tatoeba", "Tatoeba@v2"), downloaded and
    unpacked on first use."""
    corpus, _, version = name.partition("@")
    a, b = sorted((src_lang, tgt_lang))  # OPUS names a pair in alphabetical order
    directory = aiayn_home() / "opus" / corpus / (version or "latest") / f"{a}-{b}"
    files = {lang: directory / f"{corpus}.{a}-{b}.{lang}" for lang in (a, b)}
    if not all(p.is_file() for p in files.values()):
        url = archive_url(corpus, version or "latest", a, b)
        archive = download(rebase(url), directory / "moses.zip", None, progress=progress, hint=f"(OPUS corpus {name})")
        _unpack(archive, files)
        archive.unlink()
    return files[src_lang], files[tgt_lang]


def rebase(url: str) -> str:
    """`url` on the mirror $AIAYN_OPUS_URL names, when it names one."""
    mirror = os.environ.get("AIAYN_OPUS_URL")
    if mirror and url.startswith(OBJECT_STORE):
        return mirror.rstrip("/") + "/" + url[len(OBJECT_STORE) :]
    return url


def archive_url(corpus: str, version: str, a: str, b: str) -> str:
    """The Moses archive's address of `corpus` in languages a-b, from opustools' index of OPUS."""
    try:
        from opustools import OpusGet
    except ImportError:
        raise DataError("OPUS sources need opustools: pip install 'aiayn[opus]'") from None
    index = aiayn_home() / "opus" / "opusdata.db"  # opustools unpacks its index here on first use
    get: Any = OpusGet(
        source=a,
        target=b,
        directory=corpus,
        release=version,
        preprocess="moses",
        local_db=True,
        database=str(index),
        suppress_prompts=True,
        download_dir=str(index.parent),
    )
    found = get.dbo.get_corpora(get.parameters)
    if not found:
        raise DataError(
            f"OPUS has no corpus {corpus!r}{'' if version == 'latest' else ' version ' + version} in {a}-{b} "
            f"as Moses text (names are case-sensitive, e.g. Tatoeba, Europarl, OpenSubtitles)"
        )
    return str(found[0]["url"])


def _copy(z: zipfile.ZipFile, member: str, dest: str) -> None:
    with z.open(member) as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 22)  # streamed: a corpus may be gigabytes


def _unpack(archive: Path, files: dict[str, Path]) -> None:
    """The archive's two text files (<corpus>.<a>-<b>.<lang>) into `files`, each written atomically."""
    try:
        with zipfile.ZipFile(archive) as z:
            names = z.namelist()
            for lang, dest in files.items():
                member = next((n for n in names if n.endswith(f".{lang}") and "/" not in n.strip("/")), None)
                if member is None:
                    raise DataError(f"{archive}: no .{lang} text file in the archive (it holds {names[:6]})")
                atomic_write(dest, partial(_copy, z, member))
    except zipfile.BadZipFile as e:
        archive.unlink()
        raise DataError(f"{archive}: not a zip archive ({e}); removed, the next run downloads it again") from None
