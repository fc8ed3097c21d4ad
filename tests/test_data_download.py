"""The downloader (aiayn.data.download) against a real HTTP server on 127.0.0.1: checksum ok, mismatch,
interrupted; the Multi30k fetch and `aiayn data get multi30k` on made-up files whose checksums the test
puts in multi30k's tables (every machine), and on the real files where the mirror is (needs_mirror)."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiayn.data import DataError, multi30k
from aiayn.data.download import download
from conftest import multi30k_mirror
from local_http import LocalHTTPServer
from synthetic_text import synthetic_multi30k

needs_mirror = pytest.mark.needs_mirror  # the mirror rule: tests/conftest.py


class Server:
    """Serves `files` (url path -> bytes); paths in `truncate` send half the body, then hang up."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.truncate: set[str] = set()
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.requests.append(self.path)
                body = outer.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if self.path in outer.truncate else body)

            def log_message(self, *args) -> None:
                pass

        self.http = LocalHTTPServer(Handler)
        self.url = self.http.url + "/"

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


@pytest.fixture(autouse=True)
def home(home, monkeypatch):
    """conftest's empty AIAYN_HOME, and no mirror or download URL from the environment."""
    monkeypatch.delenv("AIAYN_DATA_DIR", raising=False)
    monkeypatch.delenv("AIAYN_MULTI30K_URL", raising=False)
    return home


PAYLOAD = b"Ein Mann.\n" * 5000


def test_download_checksum_ok(server, tmp_path):
    server.files["/f.gz"] = PAYLOAD
    dest = download(server.url + "f.gz", tmp_path / "d" / "f.gz", hashlib.sha256(PAYLOAD).hexdigest())
    assert dest.read_bytes() == PAYLOAD
    assert os.listdir(tmp_path / "d") == ["f.gz"]  # no temp file left behind


def test_download_checksum_mismatch_removes_partial(server, tmp_path):
    server.files["/f.gz"] = PAYLOAD
    with pytest.raises(
        DataError, match=r"checksum mismatch for http://127\.0\.0\.1:\d+/f\.gz: sha256 \w+, expected 0+ "
    ):
        download(server.url + "f.gz", tmp_path / "d" / "f.gz", "0" * 64)
    assert os.listdir(tmp_path / "d") == []


def test_download_interrupted_removes_partial(server, tmp_path):
    server.files["/f.gz"] = PAYLOAD
    server.truncate.add("/f.gz")
    with pytest.raises(DataError, match="interrupted"):
        download(server.url + "f.gz", tmp_path / "d" / "f.gz", hashlib.sha256(PAYLOAD).hexdigest())
    assert os.listdir(tmp_path / "d") == []
    with pytest.raises(DataError, match="failed: HTTP Error 404"):
        download(server.url + "missing.gz", tmp_path / "d" / "m.gz", "0" * 64)
    assert os.listdir(tmp_path / "d") == []


@pytest.fixture(params=["synthetic", pytest.param("real", marks=needs_mirror)])
def mirror(request, tmp_path, monkeypatch) -> Path:
    """made-up files with their own checksums (every machine), or the real mirror (needs_mirror)."""
    if request.param == "real":
        return multi30k_mirror()
    return synthetic_multi30k(tmp_path / "mirror", monkeypatch)


def serve_mirror(server: Server, langs: tuple[str, ...], mirror: Path) -> None:
    """Lay the mirror out like the dataset repository: raw/*.gz as is, tok/* uncompressed."""
    for name in multi30k.raw_files(langs):
        server.files[f"/raw/{name}"] = Path(mirror, name).read_bytes()
    for name in multi30k.tok_files(langs):
        server.files[f"/tok/{name}"] = gzip.decompress(Path(mirror, "tok", name + ".gz").read_bytes())


def test_fetch_fills_the_cache_and_skips_verified_files(server, home, mirror):
    serve_mirror(server, ("de", "en"), mirror)
    d = multi30k.fetch(("de", "en"), base_url=server.url)
    assert d == home / "multi30k"
    multi30k.verify(d, ("de", "en"))
    assert multi30k.locate("de", "en") == d  # no mirror set: the cache is used
    ref = multi30k.tokenized_reference_path("valid", "en")
    assert gzip.decompress(ref.read_bytes()) == server.files["/tok/val.lc.norm.tok.en"]
    n = len(server.requests)
    assert n == 6 + 4
    multi30k.fetch(("de", "en"), base_url=server.url)
    assert len(server.requests) == n  # everything verified in place, nothing fetched again
    assert (d / "val.de.gz").read_bytes() == (mirror / "val.de.gz").read_bytes()
    (d / "val.de.gz").write_bytes(b"damaged")  # a damaged cached file is fetched again, and only it
    multi30k.fetch(("de", "en"), base_url=server.url)
    assert server.requests[n:] == ["/raw/val.de.gz"]
    assert (d / "val.de.gz").read_bytes() == (mirror / "val.de.gz").read_bytes()


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aiayn", *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def in_process(*args: str, capsys: pytest.CaptureFixture) -> subprocess.CompletedProcess:
    """`aiayn ARGS` in this process (the synthetic mirror's checksums live in this process's tables)."""
    from aiayn.cli import main

    code = main(list(args))
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


def test_cli_data_get(server, home, mirror, capsys):
    # the real mirror: a real process, as a user runs it; made-up files: in this process, where their
    # checksums were put into multi30k's tables
    real = mirror != home.parent / "mirror"
    run = (lambda *a: cli(*a, env={"AIAYN_HOME": str(home)})) if real else (lambda *a: in_process(*a, capsys=capsys))
    serve_mirror(server, ("de", "en"), mirror)
    server.files["/raw/train.en.gz"] = b"not the real file"
    r = run("data", "get", "multi30k", "--langs", "de,en", "--base-url", server.url)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: checksum mismatch for {server.url}raw/train.en.gz")
    assert not (home / "multi30k" / "train.en.gz").exists()
    assert [p.name for p in (home / "multi30k").iterdir() if p.name.startswith(".")] == []

    serve_mirror(server, ("de", "en"), mirror)
    r = run("data", "get", "multi30k", "--langs", "de,en", "--base-url", server.url)
    assert r.returncode == 0, r.stderr
    assert f"multi30k in {home / 'multi30k'}: 6 files, checksums ok" in r.stdout

    r = run("data", "get", "multi30k", "--data-dir", str(mirror))
    assert r.returncode == 0 and "12 files, checksums ok" in r.stdout
    r = run("data", "get", "multi30k", "--data-dir", str(home / "multi30k"))  # lacks cs/fr
    assert r.returncode == 2 and "multi30k file missing" in r.stderr and "train.cs.gz" in r.stderr
