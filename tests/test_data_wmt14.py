"""`aiayn data get wmt14` end to end against a real HTTP server on 127.0.0.1 (with Range support), serving
small archives built here with the real archive names and member paths; their checksums replace the
published ones through `wmt14.get(checksums=...)` (and the `wmt14.CHECKSUMS` table for the CLI)."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import re
import tarfile
from pathlib import Path

import pytest

from aiayn import cli
from aiayn.config import DataConfig
from aiayn.data import DataError, prepare, wmt14
from aiayn.data.download import download
from local_http import LocalHTTPServer, free_port


class Server:
    """Serves `files` (url path -> bytes) with Range support. `break_once[path] = n` sends n bytes of the
    next response for path, then hangs up; `ignore_range` answers 200 with everything, as some servers do."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.break_once: dict[str, int] = {}
        self.ignore_range = False
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                rng = self.headers.get("Range")
                outer.requests.append((self.path, rng))
                body = outer.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                if rng and not outer.ignore_range:
                    start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1))
                    if start >= len(body):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                part = body[start:]
                self.send_header("Content-Length", str(len(part)))
                self.end_headers()
                cut = outer.break_once.pop(self.path, None)
                if cut is not None:  # a transfer that breaks: some bytes, then the connection closes
                    self.wfile.write(part[:cut])
                    self.close_connection = True
                    return
                self.wfile.write(part)

            def log_message(self, *args) -> None:
                pass

        self.http = LocalHTTPServer(Handler)
        self.url = self.http.url

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


pytestmark = pytest.mark.usefixtures("home")  # every test: an empty AIAYN_HOME (conftest)


# -- fixture archives in the real layout ------------------------------------------------------------

WORDS = {
    "en": "the house is small and the cat sleeps",
    "de": "das Haus ist klein und die Katze schläft",
    "fr": "la maison est petite et le chat dort",
    "cs": "dům je malý",
}


def text(corpus: str, lang: str, n: int, newline_at_end: bool = True) -> bytes:
    s = "\n".join(f"{corpus} {i} {WORDS[lang]}" for i in range(n))
    return (s + ("\n" if newline_at_end else "")).encode()


SIZES = {"europarl-v7": 40, "commoncrawl": 30, "news-commentary-v9": 20, "un": 7, "giga-fren": 6, "newstest2013": 5}


def sgm(lang: str, kind: str) -> bytes:
    """A WMT SGM file: three segments (one with an entity, extra spaces and a trailing tag on its line)."""
    segs = [f"Test one {lang}", f"  Test   two &amp; {lang} ", f"Test three {lang}"]
    return (
        (
            '<srcset setid="newstest2014" srclang="any">\n'
            if kind == "src"
            else f'<refset setid="newstest2014" srclang="any" trglang="{lang}">\n'
        ).encode()
        + b'<doc sysid="ref" docid="1" genre="news" origlang="en">\n<p>\n'
        + "".join(f'<seg id="{i}">{s}</seg>\n' for i, s in enumerate(segs, 1)).encode()
        + b"</p>\n</doc>\n</srcset>\n"
    )


def tar_bytes(members: dict[str, bytes], gz: bool = True) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_archives(short: str | None = None) -> dict[str, bytes]:
    """Every archive of both pairs, with decoy members of other pairs before the wanted ones.
    `short`: a corpus whose non-English side lacks its last line."""

    def pair_text(corpus: str, x: str, lang: str, **kw) -> bytes:
        n = SIZES[corpus] - (1 if corpus == short and lang != "en" else 0)
        return text(corpus, lang, n, **kw)

    out = {
        "training-parallel-europarl-v7.tgz": tar_bytes(
            {"training/europarl-v7.cs-en.en": b"decoy\n", "training/europarl-v7.cs-en.cs": b"decoy\n"}
            | {
                f"training/europarl-v7.{x}-en.{lang}": pair_text("europarl-v7", x, lang)
                for x in ("de", "fr")
                for lang in (x, "en")
            }
        ),
        # the last line of Common Crawl has no newline: the next corpus must still start on its own line
        "training-parallel-commoncrawl.tgz": tar_bytes(
            {
                f"commoncrawl.{x}-en.{lang}": pair_text("commoncrawl", x, lang, newline_at_end=False)
                for x in ("ru", "de", "fr")
                for lang in (x, "en")
                if x != "ru"
            }
            | {"commoncrawl.ru-en.ru": b"decoy\n"}
        ),
        "training-parallel-nc-v9.tgz": tar_bytes(
            {
                f"training/news-commentary-v9.{x}-en.{lang}": pair_text("news-commentary-v9", x, lang)
                for x in ("de", "fr")
                for lang in ("en", x)
            }
        ),
        "training-parallel-un.tgz": tar_bytes(
            {f"un/undoc.2000.fr-en.{lang}": pair_text("un", "fr", lang) for lang in ("fr", "en")}
        ),
        "training-giga-fren.tar": tar_bytes(
            {
                f"giga-fren.release2.fixed.{lang}.gz": gzip.compress(pair_text("giga-fren", "fr", lang), mtime=0)
                for lang in ("fr", "en")
            },
            gz=False,
        ),
        "dev.tgz": tar_bytes(
            {
                f"dev/newstest2013.{lang}": text("newstest2013", lang, SIZES["newstest2013"])
                for lang in ("en", "de", "fr", "cs")
            }
        ),
        "test-full.tgz": tar_bytes(
            {
                f"test-full/newstest2014-{x}en-{kind}.{lang}.sgm": sgm(lang, kind)
                for x in ("de", "fr")
                for kind, lang in (("src", "en"), ("ref", x), ("src", x), ("ref", "en"))
            }
        ),
    }
    return out


def table(archives: dict[str, bytes]) -> dict[str, wmt14.Checksum]:
    """Checksums of the fixtures in the shape of wmt14.CHECKSUMS: sha256 with size, and md5 without a
    size for test-full.tgz (as for the real one)."""
    return {
        name: wmt14.Checksum(None, md5=hashlib.md5(data).hexdigest())
        if name == "test-full.tgz"
        else wmt14.Checksum(len(data), sha256=hashlib.sha256(data).hexdigest())
        for name, data in archives.items()
    }


def serve(server: Server, archives: dict[str, bytes]) -> None:
    server.files.update({f"/mirror/{name}": data for name, data in archives.items()})


def get(server: Server, archives: dict[str, bytes], pair: str = "en-de", **kw) -> Path:
    kw.setdefault("checksums", table(archives))
    return wmt14.get(pair, base_url=server.url + "/mirror/", progress=False, **kw)


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def expected_train(x: str, lang: str) -> list[str]:
    names = ["europarl-v7", "commoncrawl", "news-commentary-v9"] + (["un", "giga-fren"] if x == "fr" else [])
    return [f"{c} {i} {WORDS[lang]}" for c in names for i in range(SIZES[c])]


# -- tests ------------------------------------------------------------------------------------------


def test_get_writes_aligned_files_and_a_rerun_only_verifies(server, home):
    archives = build_archives()
    serve(server, archives)
    d = get(server, archives)
    assert d == home / "wmt14" / "en-de"
    assert sorted(p.name for p in d.iterdir()) == [
        "manifest.json",
        "test.de",
        "test.en",
        "train.de",
        "train.en",
        "valid.de",
        "valid.en",
    ]
    for lang in ("en", "de"):
        assert lines(d / f"train.{lang}") == expected_train("de", lang)  # 90 = 40 + 30 + 20, in this order
        assert lines(d / f"valid.{lang}") == [f"newstest2013 {i} {WORDS[lang]}" for i in range(5)]
    # sacreBLEU's reading of the SGM: whitespace collapsed, entities as they are
    assert lines(d / "test.en") == ["Test one en", "Test two &amp; en", "Test three en"]
    assert lines(d / "test.de") == ["Test one de", "Test two &amp; de", "Test three de"]
    assert sorted(p.name for p in (home / "wmt14" / "archives").iterdir()) == sorted(wmt14.archives("en-de"))
    assert sorted(p for p, _ in server.requests) == sorted(f"/mirror/{n}" for n in wmt14.archives("en-de"))
    assert wmt14.summary("en-de") == f"wmt14 en-de in {d}: train 90, valid 5, test 3 pairs, verified"

    n, before = len(server.requests), {p.name: p.stat().st_mtime_ns for p in d.iterdir()}
    assert get(server, archives) == d
    assert len(server.requests) == n  # nothing downloaded ...
    assert {p.name: p.stat().st_mtime_ns for p in d.iterdir()} == before  # ... nor rewritten

    # both directions map to the pair directory
    en_de, de_en = wmt14.locate("en", "de"), wmt14.locate("de", "en")
    assert en_de["train"] == (d / "train.en", d / "train.de") and de_en["test"] == (d / "test.de", d / "test.en")
    with pytest.raises(DataError, match=r"wmt14 en-fr is not prepared in .*; run `aiayn data get wmt14 --pair en-fr`"):
        wmt14.locate("fr", "en")
    with pytest.raises(DataError, match="wmt14 has no en-cs data"):
        wmt14.locate("en", "cs")

    # a damaged output file is noticed by the quick check, and the files are rebuilt from the archives
    (d / "train.de").write_text("truncated\n")
    with pytest.raises(DataError, match="not prepared"):
        wmt14.locate("en", "de")
    get(server, archives)
    assert len(server.requests) == n and lines(d / "train.de") == expected_train("de", "de")


def test_en_fr_adds_un_and_gigafren(server, home):
    archives = build_archives()
    serve(server, archives)
    d = get(server, archives, pair="en-fr")
    for lang in ("en", "fr"):
        assert lines(d / f"train.{lang}") == expected_train("fr", lang)  # giga-fren: gzipped inside the tar
    assert lines(d / "test.fr")[1] == "Test two &amp; fr"
    assert wmt14.locate("fr", "en")["valid"] == (d / "valid.fr", d / "valid.en")


def test_broken_transfer_resumes_with_range(server, home):
    archives = build_archives()
    serve(server, archives)
    name = "training-parallel-europarl-v7.tgz"
    size = len(archives[name])
    server.break_once[f"/mirror/{name}"] = size // 2
    with pytest.raises(DataError, match=rf"interrupted.* {size // 2} bytes kept in .*{name}\.part, run again"):
        get(server, archives)
    part = home / "wmt14" / "archives" / f"{name}.part"
    assert part.read_bytes() == archives[name][: size // 2]
    assert not (home / "wmt14" / "en-de" / "train.en").exists()

    get(server, archives)
    assert (f"/mirror/{name}", f"bytes={size // 2}-") in server.requests
    assert (home / "wmt14" / "archives" / name).read_bytes() == archives[name] and not part.exists()
    assert lines(home / "wmt14" / "en-de" / "train.en") == expected_train("de", "en")


def test_resume_falls_back_to_a_full_download_when_range_is_ignored(server, tmp_path):
    body = bytes(range(256)) * 400
    server.files["/f.bin"] = body
    server.ignore_range = True
    dest = tmp_path / "f.bin"
    Path(f"{dest}.part").write_bytes(b"\xff" * 1000)  # would corrupt the file if appended to
    download(server.url + "/f.bin", dest, hashlib.sha256(body).hexdigest(), size=len(body), resume=True)
    assert server.requests == [("/f.bin", "bytes=1000-")]
    assert dest.read_bytes() == body and not Path(f"{dest}.part").exists()


def test_checksum_mismatch_is_refused_and_leaves_no_file(server, home, tmp_path):
    archives = build_archives()
    serve(server, archives)
    bad = table(archives)
    name = "training-parallel-nc-v9.tgz"
    bad[name] = wmt14.Checksum(len(archives[name]), sha256="0" * 64)
    with pytest.raises(DataError, match=rf"checksum mismatch for .*/{name}: sha256 [0-9a-f]{{64}}, expected 0{{64}}"):
        get(server, archives, checksums=bad)
    assert not (home / "wmt14" / "archives" / name).exists()
    assert not (home / "wmt14" / "archives" / f"{name}.part").exists()
    assert not (home / "wmt14" / "en-de").exists()

    # an archive offered in --data-dir is verified too, and refused when it is not the expected one
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "test-full.tgz").write_bytes(archives["dev.tgz"])
    with pytest.raises(
        DataError,
        match=r"checksum mismatch: .*mirror/test-full\.tgz is not the expected archive "
        r"\(md5 [0-9a-f]{32}\)",
    ):
        get(server, archives, data_dir=mirror)


def test_archives_in_data_dir_are_used_in_place(server, home, tmp_path):
    archives = build_archives()
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name, data in archives.items():
        (mirror / name).write_bytes(data)
    d = wmt14.get(
        "en-de", data_dir=mirror, base_url=server.url + "/nothing-here/", checksums=table(archives), progress=False
    )
    assert server.requests == [] and lines(d / "train.de") == expected_train("de", "de")
    assert not (home / "wmt14" / "archives").exists()


def test_unreachable_server_is_one_line(home):
    port = free_port()  # nobody listens on it
    archives = build_archives()
    with pytest.raises(DataError) as e:
        wmt14.get("en-de", base_url=f"http://127.0.0.1:{port}", checksums=table(archives), progress=False)
    msg = str(e.value)
    assert "\n" not in msg
    assert re.fullmatch(
        rf"download of http://127\.0\.0\.1:{port}/training-parallel-europarl-v7\.tgz failed: .*refused"
        rf"; copy the archives into {re.escape(str(home / 'wmt14' / 'archives'))} or pass --base-url",
        msg,
    ), msg


def test_line_count_mismatch_names_the_files(server, home):
    archives = build_archives(short="commoncrawl")
    serve(server, archives)
    with pytest.raises(
        DataError,
        match=r"line counts differ: training-parallel-commoncrawl\.tgz:"
        r"commoncrawl\.de-en\.en has 30 lines, training-parallel-commoncrawl\.tgz:"
        r"commoncrawl\.de-en\.de has 29",
    ):
        get(server, archives)
    d = home / "wmt14" / "en-de"
    assert sorted(p.name for p in d.iterdir()) == []  # no train.* and no temp files
    with pytest.raises(DataError, match="not prepared"):
        wmt14.locate("en", "de")


def test_unsafe_member_paths_are_refused(server, home):
    archives = build_archives()
    archives["dev.tgz"] = tar_bytes({"../dev/newstest2013.en": b"x\n", "dev/newstest2013.de": b"y\n"})
    serve(server, archives)
    with pytest.raises(DataError, match=r"dev\.tgz: unsafe member path '\.\./dev/newstest2013\.en'"):
        get(server, archives)


def test_read_sgm_matches_sacrebleu(tmp_path):
    from sacrebleu.dataset.fake_sgml import FakeSGMLDataset

    data = sgm("de", "ref") + '<seg id="9">Ä  ö\tß &lt;x&gt; & </seg> trailing\r\n'.encode()
    (tmp_path / "in.sgm").write_bytes(data)
    FakeSGMLDataset("wmt14/full")._convert_format(str(tmp_path / "in.sgm"), str(tmp_path / "out.txt"))
    assert wmt14.read_sgm(data) == lines(tmp_path / "out.txt")
    assert wmt14.read_sgm(data)[-1] == "Ä ö ß &lt;x&gt; & trailing"  # sacreBLEU keeps text after </seg>


def test_prepare_reads_the_prepared_pair(server, home):
    archives = build_archives()
    serve(server, archives)
    with pytest.raises(DataError, match=r"run `aiayn data get wmt14 --pair en-de --data-dir /archives`$"):
        prepare(DataConfig(corpus="wmt14", src_lang="de", tgt_lang="en", data_dir="/archives", vocab_size=400))
    get(server, archives)
    prep = prepare(DataConfig(corpus="wmt14", src_lang="en", tgt_lang="de", vocab_size=400))
    assert {s: len(e) for s, e in prep.splits.items()} == {"train": 90, "valid": 5, "test": 3}
    src, ref = prep.raw("test")
    assert src[1] == "Test two &amp; en" and ref[1] == "Test two &amp; de"
    src_ids, tgt_ids = prep.splits["valid"].pair(0)
    assert prep.tokenizer.decode(tgt_ids.tolist()) == f"newstest2013 0 {WORDS['de']}"


def test_cli_data_get_wmt14(server, home, monkeypatch, capsys):
    archives = build_archives()
    serve(server, archives)
    monkeypatch.setattr(wmt14, "CHECKSUMS", table(archives))  # the documented table, as the CLI uses it
    assert cli.main(["data", "get", "wmt14", "--pair", "en-de", "--base-url", server.url + "/mirror"]) == 0
    out, err = capsys.readouterr()
    assert out == f"wmt14 en-de in {home / 'wmt14' / 'en-de'}: train 90, valid 5, test 3 pairs, verified\n"
    assert f"downloading {server.url}/mirror/training-parallel-europarl-v7.tgz" in err
    n = len(server.requests)
    assert cli.main(["data", "get", "wmt14", "--pair", "en-de", "--base-url", server.url + "/mirror"]) == 0
    assert len(server.requests) == n

    assert cli.main(["data", "get", "wmt14", "--pair", "en-fr", "--base-url", server.url + "/gone"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"downloading {server.url}/gone/training-parallel-un.tgz (0 MiB)"
    assert err[1].startswith(f"error: download of {server.url}/gone/training-parallel-un.tgz failed: HTTP Error 404")
    assert len(err) == 2


def test_wmt14_configs_read_the_prepared_corpus():
    from aiayn.config import Config

    for name in ("base", "big"):
        cfg = Config.load(f"wmt14_en_de_{name}")
        d = cfg.data
        assert (d.corpus, d.src_lang, d.tgt_lang, d.vocab_size) == ("wmt14", "en", "de", 37000)
        assert d.train_src is d.valid_src is d.test_src is d.data_dir is None
