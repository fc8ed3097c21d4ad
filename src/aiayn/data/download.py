"""Fetching the corpora: where they are cached and how a file is downloaded.

`aiayn_home()` is the root of everything aiayn keeps between runs ($AIAYN_HOME, default ~/.cache/aiayn):
the downloaded corpora (a directory each, named by its corpus module: multi30k/, wmt14/, ...), the
prepared-data cache (prepared/, stamps/, locks/: aiayn.data.cache) and exports. `download()` fetches one
URL into a file atomically, verified against its sha256 (or md5) and size, resumable for large archives;
every corpus module uses it. `file_digest()` hashes a file in chunks.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from aiayn.data.errors import DataError


def aiayn_home() -> Path:
    """The cache root: $AIAYN_HOME, default ~/.cache/aiayn."""
    return Path(os.environ.get("AIAYN_HOME") or Path.home() / ".cache" / "aiayn")


def download(
    url: str,
    dest: str | os.PathLike,
    sha256: str | None,
    timeout: float = 60.0,
    transform: Callable[[bytes], bytes] | None = None,
    *,
    md5: str | None = None,
    size: int | None = None,
    resume: bool = False,
    progress: bool = False,
    hint: str = "",
) -> Path:
    """Fetch `url` into `dest` atomically: stream to a temp file beside it, verify the received bytes
    (sha256, else md5, and `size` when given), then rename. A mismatch removes the partial file and raises
    DataError. `transform` (e.g. gzip.compress) is applied after verification.

    Without `resume` an interrupted transfer removes the partial file too. With it the bytes received so
    far stay in `<dest>.part` (a broken connection, a timeout, Ctrl-C), and the next call continues from
    there with an HTTP Range request, starting over when the server answers 200 instead of 206: the WMT
    archives are gigabytes. `progress` shows a tqdm bar on stderr; `hint` ends the message of a failed
    connection (what to do offline)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = _part_file(dest, resume)
    keep = resume  # a partial file stays for the next run unless its bytes are known to be wrong
    try:
        have = tmp.stat().st_size if resume and tmp.is_file() else 0
        resp, have, h = _start(url, tmp, have, sha256, md5, timeout, hint)
        with resp:
            if have and resp.status != 206:  # the server ignored Range and sends everything
                have, h = 0, _new_hash(sha256, md5)
            elif have and not (resp.headers.get("Content-Range") or "").startswith(f"bytes {have}-"):
                keep = False
                raise DataError(
                    f"download of {url}: the server resumed at the wrong offset "
                    f"({resp.headers.get('Content-Range')!r} for bytes {have}-); partial file removed"
                )
            received = _receive(url, resp, tmp, have, h, size, resume, dest.name if progress else None)
        why = _mismatch(url, have + received, size, h, sha256 or md5)
        if why is not None:
            keep = False
            raise DataError(why)
        if transform is not None:
            tmp.write_bytes(transform(tmp.read_bytes()))
        os.replace(tmp, dest)
    except BaseException:
        if not keep:
            tmp.unlink(missing_ok=True)
        raise
    return dest


def _part_file(dest: Path, resume: bool) -> Path:
    """Where the bytes arrive: `<dest>.part` when resuming (a fixed name, so that the next run finds it),
    else a fresh temporary file beside `dest`."""
    if resume:
        return dest.with_name(dest.name + ".part")
    fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    os.close(fd)
    return Path(name)


def _start(
    url: str, tmp: Path, have: int, sha256: str | None, md5: str | None, timeout: float, hint: str
) -> tuple[http.client.HTTPResponse, int, Any]:
    """The response for the bytes after the `have` already in `tmp`, with the hash of those bytes; from
    the start when the server refuses that range (416: the part is not a prefix of the file, which changed
    on the server)."""
    h = _new_hash(sha256, md5)
    if have:
        _hash_into(h, tmp)
    resp = _open(url, have, timeout, hint)
    if resp is None:
        have, h = 0, _new_hash(sha256, md5)
        resp = _open(url, 0, timeout, hint)
        assert resp is not None  # 416 answers a Range request only; this one has none
    return resp, have, h


def _receive(
    url: str, resp: Any, tmp: Path, have: int, h: Any, size: int | None, resume: bool, bar_name: str | None
) -> int:
    """Append the response's bytes to `tmp` (after the `have` there), hashing them into `h`; a progress bar
    on stderr named `bar_name` when one is given. Returns how many arrived; a broken or short transfer is a
    DataError that names the bytes kept when resuming."""
    expected = resp.headers.get("Content-Length")
    total = size if size is not None else (have + int(expected) if expected is not None else None)
    received = 0
    with (
        open(tmp, "ab" if have else "wb") as out,
        tqdm(
            total=total,
            initial=have,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=bar_name,
            file=sys.stderr,
            disable=bar_name is None,
            mininterval=1.0,
        ) as bar,
    ):
        try:
            for chunk in iter(lambda: resp.read(1 << 16), b""):
                if h is not None:
                    h.update(chunk)
                out.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
        except (http.client.HTTPException, OSError) as e:  # IncompleteRead, reset, timeout, ...
            raise DataError(
                f"download of {url} interrupted after {have + received} bytes: {e!r}"
                f"{_resume_note(tmp, resume, have + received)}"
            ) from None
    if expected is not None and received != int(expected):
        raise DataError(
            f"download of {url} interrupted: got {received} of {expected} bytes"
            f"{_resume_note(tmp, resume, have + received)}"
        )
    return received


def _mismatch(url: str, got: int, size: int | None, h: Any, digest: str | None) -> str | None:
    """Why the `got` bytes received are not the file asked for (size, then hash), or None."""
    if size is not None and got != size:
        return f"size mismatch for {url}: {got} bytes, expected {size} (partial file removed)"
    if h is not None and h.hexdigest() != digest:
        return f"checksum mismatch for {url}: {h.name} {h.hexdigest()}, expected {digest} (partial file removed)"
    return None


def _open(url: str, start: int, timeout: float, hint: str) -> http.client.HTTPResponse | None:
    """The response for bytes `start`- of `url`; None when the server answers 416 to that range."""
    req = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
    try:
        return urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and start:
            return None
        raise DataError(f"download of {url} failed: {e}{hint}") from None
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:  # DNS, refused, timeout
        raise DataError(f"download of {url} failed: {getattr(e, 'reason', None) or e}{hint}") from None


def _resume_note(tmp: Path, resume: bool, kept: int) -> str:
    return f"; {kept} bytes kept in {tmp}, run again to resume" if resume else ""


def _new_hash(sha256: str | None, md5: str | None) -> Any:
    if sha256:
        return hashlib.sha256()
    if md5:  # only where no sha256 is published (sacreBLEU lists md5): integrity, not security
        return hashlib.md5(usedforsecurity=False)
    return None  # size only


def _hash_into(h: Any, path: Path) -> None:
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)


def file_digest(path: str | os.PathLike, algorithm: str) -> str:
    """Hex digest of a file ("sha256" or "md5"), read in 1 MiB chunks."""
    h = hashlib.new(algorithm, usedforsecurity=False) if algorithm == "md5" else hashlib.new(algorithm)
    _hash_into(h, Path(path))
    return h.hexdigest()
