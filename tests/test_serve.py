"""`aiayn serve` end to end: a real uvicorn server on 127.0.0.1 serving a small run trained here.

The run: a tiny model trained for a few seconds on 16 German->English pairs, so different inputs
get different translations that end with EOS (an untrained model repeats one piece up to the
length limit, and a swapped answer would go unnoticed). Every answer is checked against
`Translator.translate` of that sentence alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from libretranslatepy import LibreTranslateAPI  # the real client from PyPI ([test] extra)
from prometheus_client.parser import text_string_to_metric_families

from aiayn.checkpoint import save_weights
from aiayn.config import BOS_ID, EOS_ID, ModelConfig
from aiayn.data.tokenizer import Tokenizer
from aiayn.devices import cpu_cores
from aiayn.errors import AiaynError
from aiayn.model import Transformer
from aiayn.serve.batcher import Engine, Hypothesis

PAIRS = [
    ("Ein Hund rennt.", "A dog runs."),
    ("Eine Frau fährt Fahrrad.", "A woman rides a bike."),
    ("Zwei Männer spielen Fußball.", "Two men play football."),
    ("Ein Kind schläft.", "A child sleeps."),
    ("Eine Katze sitzt auf dem Tisch.", "A cat sits on the table."),
    ("Der Mann liest ein Buch.", "The man reads a book."),
    ("Die Frau singt.", "The woman sings."),
    ("Ein Junge springt ins Wasser.", "A boy jumps into the water."),
    ("Zwei Hunde spielen im Park.", "Two dogs play in the park."),
    ("Ein Mädchen lacht.", "A girl laughs."),
    ("Der Hund schläft auf dem Sofa.", "The dog sleeps on the sofa."),
    ("Eine Gruppe tanzt.", "A group dances."),
    ("Ein Mann kocht.", "A man cooks."),
    ("Die Kinder rennen.", "The children run."),
    ("Eine alte Frau geht spazieren.", "An old woman goes for a walk."),
    ("Ein Vogel fliegt.", "A bird flies."),
]
SOURCES = [de for de, _ in PAIRS]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("serve_run")
    tok = Tokenizer.train([x for p in PAIRS for x in p] * 20, run / "spm.model", vocab_size=330, threads=1)
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=tok.vocab_size, max_positions=48, dropout=0.0))
    src_ids = [tok.encode(de) + [EOS_ID] for de, _ in PAIRS]
    tgt_ids = [tok.encode(en) for _, en in PAIRS]
    S, T = max(map(len, src_ids)), max(map(len, tgt_ids)) + 1
    src, tin, tout = (
        torch.zeros(len(PAIRS), S, dtype=torch.long),
        *(torch.zeros(len(PAIRS), T, dtype=torch.long) for _ in range(2)),
    )
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids)):
        src[i, : len(s)] = torch.tensor(s)
        tin[i, : len(t) + 1] = torch.tensor([BOS_ID] + t)
        tout[i, : len(t) + 1] = torch.tensor(t + [EOS_ID])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is as fast and immune to a busy machine
    try:
        for _ in range(150):
            loss = torch.nn.functional.cross_entropy(model(src, tin).flatten(0, 1), tout.flatten(), ignore_index=0)
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    assert loss.item() < 0.3, f"the toy pairs did not train (loss {loss.item():.3f})"
    save_weights(model.eval(), run / "best.safetensors", step=150)
    return run


@pytest.fixture(scope="module")
def translator(run_dir: Path):
    from aiayn import Translator

    return Translator.load(run_dir, device="cpu", engine="torch")  # what the torch engine serves


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


class ThreadServer:
    """uvicorn in a thread on a socket bound here (no port race); `stop()` is its graceful exit."""

    def __init__(self, app) -> None:
        import uvicorn

        self.app = app
        self.sock = _free_socket()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


def _serve(engine, **settings) -> ThreadServer:
    from aiayn.serve import ServeSettings, create_app

    return ThreadServer(create_app(engine, ServeSettings(**settings)))


@pytest.fixture(scope="module")
def torch_engine(run_dir: Path):
    from aiayn.serve import TorchServeEngine

    return TorchServeEngine(run_dir, device="cpu")


def test_torch_engine_loads_on_one_thread_and_leaves_the_pool_to_the_worker(run_dir, monkeypatch):
    # A thread that has run a parallel op keeps an OpenMP pool, and a second pool (the batcher's worker)
    # on the same cores slows every small op of both (docs/serving.md): the load must not run parallel ops.
    import torch

    from aiayn.decode.translator import Translator
    from aiayn.serve import TorchServeEngine

    seen = []
    load = Translator.load.__func__  # type: ignore[attr-defined]

    def recording(cls, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return load(cls, *args, **kwargs)

    monkeypatch.setattr(Translator, "load", classmethod(recording))
    before = torch.get_num_threads()
    try:
        TorchServeEngine(run_dir, device="cpu", threads=2)
        assert seen == [1] and torch.get_num_threads() == 2  # loaded on one thread; the worker's size after
        TorchServeEngine(run_dir, device="cpu")
        assert seen == [1, 1] and torch.get_num_threads() == 2  # threads=0 keeps the size it found
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def server(torch_engine) -> Iterator[ThreadServer]:
    # A wide window, so concurrent requests surely meet in one batch even on a loaded machine.
    srv = _serve(
        torch_engine, max_wait_ms=150, max_batch_tokens=4096, char_limit=1000, batch_limit=8, body_limit=60_000
    )
    yield srv
    srv.stop()


def _metric(url: str, name: str) -> dict[tuple, float]:
    """Samples of one metric family: {(sample name, sorted labels): value}."""
    text = httpx.get(url + "/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        if fam.name == name
        for s in fam.samples
    }


class _FakeEngine(Engine):
    """Records every batch; 'translates' by upper-casing after a short sleep (a busy model). It declares
    none of an engine's optional abilities: the Protocol's defaults stand."""

    name = "fake"

    def __init__(self) -> None:
        self.batches: list[tuple[float, list[str], int]] = []

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(t.split()) + 1 for t in texts]

    def translate(self, texts: list[str], opts) -> list:
        self.batches.append((time.monotonic(), list(texts), opts.beam))
        time.sleep(0.05)
        return [[Hypothesis(t.upper(), float("nan"), 1)] for t in texts]


def test_batcher_budget_window_settings_and_cancelled_requests() -> None:
    from aiayn.serve import Batcher, SearchOptions

    fake = _FakeEngine()
    b = Batcher(fake, max_batch_tokens=40, max_wait_ms=100)  # beam 2, 4 tokens: 5 sentences fit
    b.start()

    async def main() -> tuple:
        t0 = time.monotonic()
        alone = await asyncio.wait_for(b.translate(["one two three"], SearchOptions(beam=2)), timeout=10)
        waited = fake.batches[0][0] - t0
        texts = [f"w{i} x y" for i in range(12)]
        tasks = [
            asyncio.ensure_future(b.translate([t], SearchOptions(beam=2 if i % 3 else 1))) for i, t in enumerate(texts)
        ]
        tasks.append(asyncio.ensure_future(b.translate(["a b c", "d e f"], SearchOptions(beam=2))))
        await asyncio.sleep(0.01)
        tasks[1].cancel()  # its client went away before the batch ran
        out = await asyncio.gather(*tasks, return_exceptions=True)
        return alone, waited, texts, out

    try:
        alone, waited, texts, out = asyncio.run(main())
    finally:
        b.close()
    assert alone == [[("ONE TWO THREE", pytest.approx(float("nan"), nan_ok=True), 1)]]
    assert waited < 0.05  # nothing else queued: no window (100 ms) to wait (the adaptive window)
    assert isinstance(out[1], asyncio.CancelledError)
    for i, t in enumerate(texts):
        if i != 1:
            assert out[i][0][0][0] == t.upper()
    assert [h[0][0] for h in out[-1]] == ["A B C", "D E F"]  # one request split over sentences, in order
    later = fake.batches[1:]
    assert sum(len(x[1]) for x in later) == 14  # the cancelled sentence was decoded too
    for _, batch, beam in later:
        assert len(batch) * 4 * beam <= 40 or len(batch) == 1  # the budget
        assert all((int(t[1:].split()[0]) % 3 == 0) == (beam == 1) for t in batch if t.startswith("w"))
    assert max(len(x[1]) for x in later) > 1 and b.queued == 0


def test_the_window_waits_only_when_others_are_queued_or_decoding() -> None:
    """Issue #47: a lone sequential client paid the batching window on every request (32 sentences/s
    against 46 without it). Now a request that finds the batcher idle starts at once, and one that
    arrives while another decodes still waits for company, so batches under load stay as large."""
    from aiayn.serve import Batcher, SearchOptions

    fake = _FakeEngine()  # each batch takes 50 ms
    b = Batcher(fake, max_batch_tokens=1000, max_wait_ms=300)
    b.start()

    async def main() -> tuple[list[float], list]:
        opts = SearchOptions(beam=1)
        lone = []
        for i in range(3):  # one client, one request after the other: no window
            t0 = time.monotonic()
            await b.translate([f"s{i} x", f"s{i} y"], opts)  # two sentences of one request: one batch
            lone.append(time.monotonic() - t0)
        first = asyncio.ensure_future(b.translate(["a x"], opts))  # idle: decoded at once
        await asyncio.sleep(0.01)
        # these arrive while "a x" decodes: they wait for each other within the window
        later = [asyncio.ensure_future(b.translate([f"{c} x"], opts)) for c in "bc"]
        await asyncio.sleep(0.1)
        later.append(asyncio.ensure_future(b.translate(["d x"], opts)))
        return lone, await asyncio.gather(first, *later)

    try:
        lone, out = asyncio.run(main())
    finally:
        b.close()
    assert max(lone) < 0.2, lone  # 50 ms of decoding each, not 300 ms of window
    assert [x[1] for x in fake.batches[:3]] == [["s0 x", "s0 y"], ["s1 x", "s1 y"], ["s2 x", "s2 y"]]
    assert [x[1] for x in fake.batches[3:]] == [["a x"], ["b x", "c x", "d x"]]  # d came 100 ms later
    assert [h[0][0][0] for h in out] == ["A X", "B X", "C X", "D X"]


def test_the_sentence_limit_counts_the_sentences_a_request_splits_into(torch_engine) -> None:
    """One text within the char limit can split into many sentences, each a search of its own: the limit
    counts them, for plain text and HTML alike, with a 413 as the other limits."""
    srv = _serve(torch_engine, max_wait_ms=0, sentence_limit=6)
    try:
        for fmt, text in (("text", "Ja. " * 6), ("html", "<p>" + "Ja. " * 6 + "</p>")):
            r = httpx.post(srv.url + "/translate", json={"q": text, "source": "de", "target": "en", "format": fmt})
            assert r.status_code == 200, r.text
            r = httpx.post(
                srv.url + "/translate", json={"q": text + "Nein.", "source": "de", "target": "en", "format": fmt}
            )
            assert r.status_code == 413 and r.json()["error"] == (
                "Invalid request: request (7 sentences) exceeds sentence limit (6)"
            )
    finally:
        srv.stop()


def test_without_the_adaptive_window_a_lone_request_waits_it() -> None:
    from aiayn.serve import Batcher, SearchOptions

    fake = _FakeEngine()
    b = Batcher(fake, max_batch_tokens=1000, max_wait_ms=200, adaptive=False)  # aiayn serve --no-adaptive-wait
    b.start()

    async def main() -> float:
        t0 = time.monotonic()
        await b.translate(["a x"], SearchOptions(beam=1))
        return fake.batches[0][0] - t0

    try:
        assert asyncio.run(main()) > 0.19
    finally:
        b.close()


def test_libretranslate_client_and_api_shape(server: ThreadServer, translator) -> None:
    lt = LibreTranslateAPI(server.url)
    for de in SOURCES[:3]:  # form-encoded, as the client sends it
        assert lt.translate(de, "de", "en") == translator.translate([de], beam=4)[0]
    assert [lang["code"] for lang in lt.languages()] == ["de", "en"]
    assert lt.languages()[0]["targets"] == ["en"]
    settings = httpx.get(server.url + "/frontend/settings").json()  # what LibreTranslate's clients read first
    assert settings["charLimit"] == 1000 and settings["language"]["source"]["code"] == "de"
    assert settings["filesTranslation"] and settings["supportedFilesFormat"] == [
        ".docx",
        ".htm",
        ".html",
        ".pptx",
        ".txt",
    ]
    r = httpx.post(server.url + "/translate", json={"q": SOURCES[:3], "source": "de", "target": "en", "format": "text"})
    assert r.status_code == 200 and r.json() == {"translatedText": translator.translate(SOURCES[:3], beam=4)}
    r = httpx.post(server.url + "/translate", json={"q": SOURCES[0], "source": "de", "target": "en", "alternatives": 2})
    assert r.json()["translatedText"] == translator.translate([SOURCES[0]])[0] and len(r.json()["alternatives"]) == 2
    for body, err in [
        ({"source": "de", "target": "en"}, "Invalid request: missing q parameter"),
        ({"q": "x", "target": "en"}, "Invalid request: missing source parameter"),
        ({"q": "x", "source": "de", "target": "fr"}, "fr is not supported"),
        ({"q": "x", "source": "de", "target": "en", "format": "xml"}, "xml format is not supported"),
    ]:
        r = httpx.post(server.url + "/translate", json=body)
        assert (r.status_code, r.json()) == (400, {"error": err})


def test_detect_and_source_auto(server: ThreadServer, translator) -> None:
    """Issue #47: /detect in LibreTranslate's shape with py3langid's probabilities, and `source: auto`
    detects; a text in a language the model does not read is a 400 naming that language."""
    from aiayn.documents.language import detect

    texts = {
        "de": "Eine Katze sitzt auf dem Tisch und schläft.",
        "en": "A dog is running across the green grass.",
        "fr": "Un chien court dans le parc avec un ballon.",
        "cs": "Pes běží přes zelenou trávu v parku.",
    }
    for lang, text in texts.items():
        r = httpx.post(server.url + "/detect", json={"q": text})
        assert r.status_code == 200
        got = r.json()
        assert [x["language"] for x in got][0] == lang and len(got) == 3
        assert got == [{"confidence": round(100 * p, 2), "language": code} for code, p in detect(text)]
        assert 50 < got[0]["confidence"] <= 100 and got[0]["confidence"] > got[1]["confidence"] >= got[2]["confidence"]
    r = httpx.post(server.url + "/detect", data={"q": [texts["de"], texts["fr"]]})  # form, q repeated
    assert [x[0]["language"] for x in r.json()] == ["de", "fr"]
    assert httpx.post(server.url + "/detect", json={}).status_code == 400
    assert httpx.post(server.url + "/detect", json={"q": "x" * 1001}).status_code == 413  # the char limit

    lt = LibreTranslateAPI(server.url)
    assert lt.translate(texts["de"], "auto", "en") == translator.translate([texts["de"]], beam=4)[0]
    r = httpx.post(server.url + "/translate", json={"q": texts["de"], "source": "auto", "target": "en"})
    de_conf = round(100 * detect(texts["de"])[0][1], 2)
    assert r.status_code == 200 and r.json() == {
        "translatedText": translator.translate([texts["de"]], beam=4)[0],
        "detectedLanguage": {"confidence": de_conf, "language": "de"},
    }
    r = httpx.post(server.url + "/translate", json={"q": [texts["de"], "42 !"], "source": "auto", "target": "en"})
    assert [d["language"] for d in r.json()["detectedLanguage"]] == ["de", "de"]  # no letters: nothing to detect
    # short German that py3langid ranks Italian, Danish or Faroese, German close behind: translated, not refused
    short = ["Hallo", "Danke", "Ein Hund.", "Zwei Männer."]
    assert any(detect(t)[0][0] != "de" for t in short)
    r = httpx.post(server.url + "/translate", json={"q": short, "source": "auto", "target": "en"})
    assert r.status_code == 200 and r.json()["translatedText"] == translator.translate(short, beam=4)
    assert [d["language"] for d in r.json()["detectedLanguage"]] == ["de"] * 4
    for lang in ("fr", "en"):
        r = httpx.post(
            server.url + "/translate", json={"q": [texts["de"], texts[lang]], "source": "auto", "target": "en"}
        )
        assert r.status_code == 400
        name = {"fr": "French", "en": "English"}[lang]
        assert r.json()["error"].startswith(f"detected language {name} ({lang}, confidence ")
        assert r.json()["error"].endswith("this server translates German (de) to English (en)")
    r = httpx.post(server.url + "/translate", json={"q": texts["fr"], "source": "de", "target": "en"})
    assert r.status_code == 200 and "detectedLanguage" not in r.json()  # only when asked to detect


PARAGRAPH = "Ein Hund rennt. Eine Frau fährt Fahrrad.\n\nZwei Männer spielen Fußball.  Ein Kind schläft.\n"
_SENTENCES = ["Ein Hund rennt.", "Eine Frau fährt Fahrrad.", "Zwei Männer spielen Fußball.", "Ein Kind schläft."]


def _alone(translator, text: str, beam: int = 4, starts=None) -> str:
    """`text` translated as the server must: each sentence as it is alone, rejoined in the text's layout."""
    from aiayn.documents.segment import segment

    seg = segment(text, "de", starts=starts)
    return seg.join([translator.translate([x], beam=beam)[0] for x in seg.sentences])


def test_paragraphs_are_cut_into_sentences_and_rejoined_with_their_layout(server: ThreadServer, translator) -> None:
    """Issue #47: a paragraph given whole to a model trained on sentences loses sentences. /translate cuts
    it (on by default, as LibreTranslate), and the answer keeps every space and line break."""
    want = _alone(translator, PARAGRAPH)
    assert want.count("\n") == 3 and want != translator.translate([PARAGRAPH], beam=4)[0]
    r = httpx.post(server.url + "/translate", json={"q": PARAGRAPH, "source": "de", "target": "en"})
    assert r.status_code == 200 and r.json() == {"translatedText": want}
    r = httpx.post(server.url + "/translate", json={"q": [PARAGRAPH, SOURCES[3], " "], "source": "de", "target": "en"})
    assert r.json() == {"translatedText": [want, translator.translate([SOURCES[3]], beam=4)[0], " "]}
    assert LibreTranslateAPI(server.url).translate(PARAGRAPH, "de", "en") == want  # form-encoded
    # alternatives: the k-th hypothesis of every sentence, rejoined
    r = httpx.post(server.url + "/translate", json={"q": PARAGRAPH, "source": "de", "target": "en", "alternatives": 1})
    assert r.json()["translatedText"] == want and len(r.json()["alternatives"]) == 1
    # aiayn's own API: split on request, with the sentences and the whitespace between them (the web page)
    r = httpx.post(server.url + "/v1/translate", json={"q": PARAGRAPH, "split": True})
    (t,) = r.json()["translations"]
    assert t["text"] == want and t["gaps"] == ["", " ", "\n\n", "  ", "\n"]
    assert [x["source"] for x in t["sentences"]] == [
        "Ein Hund rennt.",
        "Eine Frau fährt Fahrrad.",
        "Zwei Männer spielen Fußball.",
        "Ein Kind schläft.",
    ]
    r = httpx.post(server.url + "/v1/translate", json={"q": PARAGRAPH})  # /v1 without split: one sentence
    assert r.json()["translations"][0]["text"] == translator.translate([PARAGRAPH], beam=4)[0]
    r = httpx.post(server.url + "/v1/translate", json={"q": PARAGRAPH, "split": True, "n_best": 2})
    assert r.status_code == 422


def test_sentences_run_together_are_cut_at_the_runs_sentence_starts(torch_engine, translator) -> None:
    """A caption without a final stop and the next one on one line: the server cuts them where the next
    starts with one of the run's sentence starts (`aiayn serve` reads them from the run's data report),
    in plain text and in HTML, and keeps them whole without starts."""
    text = "Ein Hund rennt über die Wiese Zwei Männer spielen Fußball im Park."
    from aiayn.data.sentence_starts import SentenceStarts

    starts = SentenceStarts(frozenset({"Zwei"}))
    srv = _serve(torch_engine, sentence_starts=starts)
    try:
        cut = _alone(translator, text, starts=starts)
        assert cut == " ".join(translator.translate([text[:29], text[30:]], beam=4))  # two sentences
        r = httpx.post(srv.url + "/translate", json={"q": text, "source": "de", "target": "en"})
        assert r.json() == {"translatedText": cut}
        r = httpx.post(
            srv.url + "/translate", json={"q": f"<p>{text}</p>", "source": "de", "target": "en", "format": "html"}
        )
        assert r.json()["translatedText"] == f"<p>{cut}</p>"
        r = httpx.post(srv.url + "/v1/translate", json={"q": text, "split": True})
        assert [x["source"] for x in r.json()["translations"][0]["sentences"]] == [text[:29], text[30:]]
        docx = pytest.importorskip("docx")
        word = io.BytesIO()
        d = docx.Document()
        d.add_paragraph(text)
        d.save(word)
        form = {"source": "de", "target": "en"}
        files = {"file": ("brief.docx", word.getvalue(), "application/octet-stream")}
        r = httpx.post(srv.url + "/translate_file", data=form, files=files)
        got = httpx.get(r.json()["translatedFileUrl"]).content
        assert docx.Document(io.BytesIO(got)).paragraphs[0].text == cut
    finally:
        srv.stop()
    srv = _serve(torch_engine)
    try:
        r = httpx.post(srv.url + "/translate", json={"q": text, "source": "de", "target": "en"})
        assert r.json() == {"translatedText": translator.translate([text], beam=4)[0]}
    finally:
        srv.stop()


def test_html_format(server: ThreadServer, translator) -> None:
    """format html: the text translated by whole sentences, every tag and attribute kept (the markup's
    own rules are tests/test_documents.py's); LibreTranslate refused nothing here, aiayn refused html."""
    from lxml import html as lxml_html

    from aiayn.documents.html import translate_html

    page = '<p lang="de">Ein Hund <b>rennt</b>. <a href="/k" title="Die Katze">Eine Katze</a> sitzt auf dem Tisch.</p>'
    want = translate_html(
        page, "de", lambda sentences: translator.translate(sentences, beam=4), translator.align, target="en"
    )
    r = httpx.post(server.url + "/translate", json={"q": page, "source": "de", "target": "en", "format": "html"})
    assert r.status_code == 200 and r.json() == {"translatedText": want}
    got = lxml_html.fragment_fromstring(want, create_parent="div")
    assert [el.tag for el in got.iter()] == ["div", "p", "b", "a"] and got.find("p/a").get("href") == "/k"
    assert got.find("p").get("lang") == "en"  # the paragraph says what language it now holds
    assert got.text_content() == " ".join(
        translator.translate([x], beam=4)[0] for x in ["Ein Hund rennt.", "Eine Katze sitzt auf dem Tisch."]
    )
    r = httpx.post(
        server.url + "/translate",
        json={"q": [page, "<b>\x00Ein Kind schläft.</b>"], "source": "auto", "target": "en", "format": "html"},
    )
    assert r.status_code == 200 and r.json()["translatedText"][0] == want
    assert [d["language"] for d in r.json()["detectedLanguage"]] == ["de", "de"]
    body = {"q": page, "source": "de", "target": "en", "format": "html", "alternatives": 1}
    assert httpx.post(server.url + "/translate", json=body).status_code == 400


def _html_text(x: str) -> str:
    import html

    return html.escape(x, quote=False)


def _upload(url: str, name: str, data: bytes) -> httpx.Response:
    files = {"file": (name, data, "application/octet-stream")}
    return httpx.post(url + "/translate_file", data={"source": "de", "target": "en"}, files=files)


def test_a_line_break_ends_a_sentence(server: ThreadServer, translator) -> None:
    """Issue #66: format html and a .docx on /translate_file: a <br> and a Word line break (Shift+Enter)
    end a sentence, each line decoded as it is alone, the break kept between the translations."""
    docx = pytest.importorskip("docx")
    first, second = "Ein Hund rennt", "Zwei Männer spielen Fußball."
    one, two = translator.translate([first], beam=4)[0], translator.translate([second], beam=4)[0]
    assert translator.translate([f"{first} {second}"], beam=4)[0] != f"{one} {two}"  # read as one: otherwise
    body = {"q": f"<p>{first}<br>{second}</p>", "source": "de", "target": "en", "format": "html"}
    r = httpx.post(server.url + "/translate", json=body)
    assert r.status_code == 200 and r.json() == {"translatedText": f"<p>{_html_text(one)}<br>{_html_text(two)}</p>"}
    d = docx.Document()
    run = d.add_paragraph().add_run(first)
    run.add_break()
    run.add_text(second)
    word = io.BytesIO()
    d.save(word)
    r = _upload(server.url, "zeilen.docx", word.getvalue())
    got = docx.Document(io.BytesIO(httpx.get(r.json()["translatedFileUrl"]).content))
    assert got.paragraphs[0].text == f"{one}\n{two}"


def test_list_markers_are_kept(server: ThreadServer, translator) -> None:
    """Issue #66: a list marker at a line's start is kept as it is and the rest translated, in text (the
    /v1 split shows it in the gap, not as a sentence) and in an <li>."""
    items = ["Ein Hund rennt.", "Zwei Männer spielen Fußball."]
    out = [translator.translate([x], beam=4)[0] for x in items]
    text = f"1. {items[0]}\n2. {items[1]}"
    r = httpx.post(server.url + "/translate", json={"q": text, "source": "de", "target": "en"})
    assert r.json() == {"translatedText": f"1. {out[0]}\n2. {out[1]}"}
    r = httpx.post(server.url + "/v1/translate", json={"q": text, "split": True})
    (t,) = r.json()["translations"]
    assert [x["source"] for x in t["sentences"]] == items and t["gaps"] == ["1. ", "\n2. ", ""]
    page = f"<ol><li>a) {items[0]}</li><li>• {items[1]}</li></ol>"
    r = httpx.post(server.url + "/translate", json={"q": page, "source": "de", "target": "en", "format": "html"})
    assert r.json() == {"translatedText": f"<ol><li>a) {_html_text(out[0])}</li><li>• {_html_text(out[1])}</li></ol>"}


def test_documents_nested_past_the_parsers_depth_are_a_400(torch_engine) -> None:
    """Issue #66: HTML (/translate, /translate_file) or a .docx nested past libxml2's depth (256) is a 400
    that says why, never a 200 without the text past that depth."""
    pytest.importorskip("docx")
    from nested_docs import DEEP_HTML as deep
    from nested_docs import deep_docx

    word = deep_docx("Ein Hund rennt.")
    srv = _serve(torch_engine)  # the default char limit (5,000): the page has 3,310 characters
    try:
        r = httpx.post(srv.url + "/translate", json={"q": deep, "source": "de", "target": "en", "format": "html"})
        error = (
            "Invalid request: cannot read the HTML past line 1, column 519 (Excessive depth in document: 256): "
            "the text from there on would be lost"
        )
        assert r.status_code == 400 and r.json() == {"error": error}
        r = _upload(srv.url, "tief.html", deep.encode())
        assert r.status_code == 400 and r.json() == {"error": error}
        r = _upload(srv.url, "tief.docx", word)
        assert r.status_code == 400 and r.json()["error"].startswith(
            "Invalid request: cannot read the .docx (word/document.xml cannot be read past line 2, column "
        )
        assert r.json()["error"].endswith(" (Excessive depth in document: 256))")
    finally:
        srv.stop()


def test_concurrent_html_requests_are_aligned_together(server: ThreadServer, translator) -> None:
    """The sentences of HTML requests that arrive while an alignment runs are aligned in one call; each
    page comes back as translate_html with Translator.align gives it alone."""
    from aiayn.documents.html import translate_html

    pages = [f"<p>{de.split()[0]} <b>{' '.join(de.split()[1:])}</b></p>" for de in SOURCES]
    want = [translate_html(p, "de", lambda x: translator.translate(x, beam=4), translator.align) for p in pages]
    aligner = server.app.state.service.aligner
    before = aligner.calls

    async def main() -> list:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
            body = {"source": "de", "target": "en", "format": "html"}
            return await asyncio.gather(*[c.post("/translate", json={"q": p, **body}) for p in pages])

    responses = asyncio.run(main())
    assert [r.json()["translatedText"] for r in responses] == want
    assert 0 < aligner.calls - before < len(pages)


def _doubler(seen: list[list[int]], release: asyncio.Event):
    """A call that records its items, waits for `release`, then doubles them (and refuses -1)."""

    async def double(items: list[int]) -> list[int]:
        seen.append(items)
        await release.wait()
        if -1 in items:
            raise ValueError("no negatives")
        return [2 * x for x in items]

    return double


def test_coalesced_calls_run_together_and_each_caller_gets_its_own() -> None:
    """Calls that arrive while one runs make one call; an error reaches the callers of its call only; a
    caller that goes away costs the others nothing."""
    from aiayn.serve.coalesced import Coalesced

    seen: list[list[int]] = []

    async def main() -> tuple:
        release = asyncio.Event()
        double = _doubler(seen, release)
        c = Coalesced(double)
        first = asyncio.create_task(c([1]))
        await asyncio.sleep(0)  # the first call is running
        rest = [asyncio.create_task(c(items)) for items in ([2, 3], [4], [5])]
        gone = asyncio.create_task(c([6]))
        await asyncio.sleep(0)
        gone.cancel()
        release.set()
        done = await asyncio.gather(first, *rest)
        bad = asyncio.create_task(c([-1]))
        good_after = await asyncio.gather(bad, return_exceptions=True)
        return done, good_after, await c([7]), c.calls

    done, failed, after, calls = asyncio.run(main())
    assert done == [[2], [4, 6], [8], [10]]
    assert seen[:2] == [[1], [2, 3, 4, 5, 6]]  # the cancelled caller's items were in flight: their answer dropped
    assert isinstance(failed[0], ValueError) and after == [14] and calls == 4


def test_coalesced_isolates_an_error_and_caps_a_call() -> None:
    """A merged call that fails is run again caller by caller, so only the caller whose items fail sees
    the error; one call takes callers up to max_items items (a bigger caller alone)."""
    from aiayn.serve.coalesced import Coalesced

    seen: list[list[int]] = []

    async def main() -> tuple:
        release = asyncio.Event()
        double = _doubler(seen, release)
        c = Coalesced(double, max_items=3)
        first = asyncio.create_task(c([0]))
        await asyncio.sleep(0)
        merged = [asyncio.create_task(c(items)) for items in ([1], [-1], [2])]
        await asyncio.sleep(0)
        release.set()
        isolated = await asyncio.gather(first, *merged, return_exceptions=True)
        release.clear()
        first = asyncio.create_task(c([0]))
        await asyncio.sleep(0)
        capped = [asyncio.create_task(c(items)) for items in ([1, 2], [3], [4], [5, 6, 7, 8], [9])]
        await asyncio.sleep(0)
        release.set()
        return isolated, await asyncio.gather(first, *capped), c.calls

    isolated, capped, calls = asyncio.run(main())
    assert isolated[0] == [0] and isolated[1] == [2] and isolated[3] == [4]
    assert isinstance(isolated[2], ValueError)
    assert seen[:5] == [[0], [1, -1, 2], [1], [-1], [2]]
    assert capped == [[0], [2, 4], [6], [8], [10, 12, 14, 16], [18]]
    assert seen[5:] == [[0], [1, 2, 3], [4], [5, 6, 7, 8], [9]] and calls == 10


@pytest.mark.parametrize("when", ["running", "before it starts"])
def test_a_cancelled_coalesced_drain_leaves_no_caller_waiting(when: str) -> None:
    """At the server's shutdown the drain task is cancelled: the callers it held, in flight or waiting,
    are cancelled with it, not left awaiting forever; a later call starts a new drain."""
    from aiayn.serve.coalesced import Coalesced

    async def main() -> tuple:
        async def forever(items: list[int]) -> list[int]:
            await asyncio.Event().wait()
            return items

        c = Coalesced(forever)
        callers = [asyncio.create_task(c([1]))]
        await asyncio.sleep(0)  # the first caller has started the drain (not yet run)
        assert c._task is not None
        if when == "running":
            await asyncio.sleep(0)  # the drain is calling fn
            callers.append(asyncio.create_task(c([2])))  # waits behind it
            await asyncio.sleep(0)
        c._task.cancel()
        results = await asyncio.wait_for(asyncio.gather(*callers, return_exceptions=True), 5)
        c.fn = _echo
        return results, await asyncio.wait_for(c([3]), 5)

    results, after = asyncio.run(main())
    assert results and all(isinstance(r, asyncio.CancelledError) for r in results)
    assert after == [3]


async def _echo(items: list[int]) -> list[int]:
    return items


def test_translate_file_and_download_file(server: ThreadServer, translator) -> None:
    """LibreTranslate's multipart /translate_file: .txt keeps its layout, .html its markup; the answer's
    URL downloads the result; the limits and clear 4xx answers of /translate."""
    from aiayn.documents.html import translate_html

    def upload(name: str, data: bytes, **fields: str) -> httpx.Response:
        form = {"source": "de", "target": "en", **fields}
        return httpx.post(server.url + "/translate_file", data=form, files={"file": (name, data, "text/plain")})

    r = upload("brief.txt", PARAGRAPH.encode())
    assert r.status_code == 200, r.text
    url = r.json()["translatedFileUrl"]
    assert url.startswith(server.url + "/download_file/") and url.endswith(".brief.txt")
    got = httpx.get(url)
    assert got.status_code == 200 and got.text == _alone(translator, PARAGRAPH)
    assert got.headers["content-disposition"] == 'attachment; filename="brief.txt"'
    page = "<html><body><p>Ein Hund <b>rennt</b>.</p>\n<p>Ein Kind schläft.</p></body></html>"
    r = upload("../../seite ü.html", page.encode(), source="auto")
    assert r.json()["translatedFileUrl"].endswith(".seite__.html")  # a safe name, no path
    got = httpx.get(r.json()["translatedFileUrl"])
    assert got.text == translate_html(page, "de", lambda x: translator.translate(x, beam=4), translator.align)
    assert got.headers["content-type"].startswith("text/html")
    # an uploaded page opened from the server's origin runs in a sandbox, and no type is sniffed
    assert got.headers["content-security-policy"] == "sandbox" and got.headers["x-content-type-options"] == "nosniff"
    # a Word document: its paragraphs translated as HTML paragraphs, its runs' formatting carried over
    docx = pytest.importorskip("docx")
    from aiayn.documents.office import translate_office

    d = docx.Document()
    p = d.add_paragraph("Ein Hund ")
    p.add_run("rennt").bold = True
    p.add_run(". Ein Kind schläft.")
    word = io.BytesIO()
    d.save(word)
    r = upload("brief.docx", word.getvalue())
    got = httpx.get(r.json()["translatedFileUrl"])
    assert got.headers["content-type"] == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    expected = translate_office(
        word.getvalue(), "docx", "de", lambda x: translator.translate(x, beam=4), translator.align, "en"
    )
    assert got.content == expected
    assert docx.Document(io.BytesIO(got.content)).paragraphs[0].text == _alone(
        translator, "Ein Hund rennt. Ein Kind schläft."
    )
    # a long name keeps its end, the extension that says what the download is
    r = upload("Brief an die Stadtwerke " * 6 + ".docx", word.getvalue())
    got = httpx.get(r.json()["translatedFileUrl"])
    assert r.json()["translatedFileUrl"].endswith("_Stadtwerke_.docx") and got.content == expected
    assert got.headers["content-type"] == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    d = docx.Document()
    d.add_paragraph("Ein Hund rennt. " * 70)  # 1,120 characters of text in a file of 36 kB
    too_long = io.BytesIO()
    d.save(too_long)
    pptx = pytest.importorskip("pptx")  # and a PowerPoint deck, the same way
    deck = pptx.Presentation()
    deck.slides.add_slide(deck.slide_layouts[1]).shapes.title.text = "Ein Hund rennt. Ein Kind schläft."
    slides = io.BytesIO()
    deck.save(slides)
    got = httpx.get(upload("folien.pptx", slides.getvalue()).json()["translatedFileUrl"])
    assert got.headers["content-type"] == "application/vnd.openxmlformats-officedocument.presentationml.presentation"
    expected = translate_office(
        slides.getvalue(), "pptx", "de", lambda x: translator.translate(x, beam=4), translator.align, "en"
    )
    assert got.content == expected
    title = pptx.Presentation(io.BytesIO(got.content)).slides[0].shapes.title.text
    assert title == _alone(translator, "Ein Hund rennt. Ein Kind schläft.")
    for response, status, error in [
        (upload("a.pdf", b"%PDF"), 400, "file format .pdf is not supported (.docx, .htm, .html, .pptx, .txt)"),
        (
            upload("a.docx", b"plain"),
            400,
            "cannot read the .docx (not a .docx (a zip archive): File is not a zip file)",
        ),
        (upload("a.txt", b"\xff\xfe\x00x"), 400, "the file is not UTF-8 text"),
        (upload("a.txt", b"x", target="fr"), 400, None),
        (upload("a.txt", b"Un chien court dans le parc.", source="auto"), 400, None),
        (upload("a.txt", b"Ein Hund. " * 120), 413, None),  # 1,200 characters: over the char limit
        (upload("a.docx", too_long.getvalue()), 413, "request (1119) exceeds character limit (1000)"),  # its text
        (upload("a.txt", b"x" * 70_000), 413, None),  # over the body limit, refused before parsing
        (httpx.post(server.url + "/translate_file", data={"source": "de", "target": "en"}), 400, None),
        (httpx.post(server.url + "/translate_file", json={"q": "x"}), 400, None),
        (httpx.get(server.url + "/download_file/nope.txt"), 404, None),
    ]:
        assert response.status_code == status, response.text
        if error:
            assert response.json() == {"error": "Invalid request: " + error}


def test_the_sentences_of_a_request_are_decoded_in_one_batch() -> None:
    fake = _FakeEngine()
    srv = _serve(fake, max_wait_ms=0)
    try:
        r = httpx.post(srv.url + "/translate", json={"q": [PARAGRAPH, "Ein Vogel."], "source": "de", "target": "en"})
        assert r.json()["translatedText"] == [PARAGRAPH.upper(), "EIN VOGEL."]
        assert [b[1] for b in fake.batches] == [[*_SENTENCES, "Ein Vogel."]]
    finally:
        srv.stop()
    fake = _FakeEngine()
    srv = _serve(fake, max_wait_ms=0, split_sentences=False)  # aiayn serve --no-split-sentences
    try:
        r = httpx.post(srv.url + "/translate", json={"q": PARAGRAPH, "source": "de", "target": "en"})
        assert r.json()["translatedText"] == PARAGRAPH.upper() and [b[1] for b in fake.batches] == [[PARAGRAPH]]
        # a .txt file too is decoded as it is, not cut (it was cut whatever the setting)
        form = {"source": "de", "target": "en"}
        r = httpx.post(srv.url + "/translate_file", data=form, files={"file": ("a.txt", PARAGRAPH.encode())})
        assert httpx.get(r.json()["translatedFileUrl"]).text == PARAGRAPH.upper()
        assert [b[1] for b in fake.batches][-1] == [PARAGRAPH]
    finally:
        srv.stop()


def test_translated_files_are_bounded_by_count_and_bytes(monkeypatch) -> None:
    from aiayn.serve import files as serve_files

    files = serve_files.Files(max_bytes=100)
    assert files.put("a", b"a" * 40) and files.put("b", b"b" * 40) and files.put("c", b"c" * 40)
    assert files.get("a") is None and files.get("b") == b"b" * 40 and files.bytes == 80  # the oldest went
    assert not files.put("big", b"x" * 101) and files.get("big") is None and files.bytes == 80
    monkeypatch.setattr(serve_files, "MAX_FILES", 2)
    assert files.put("d", b"d") and files.put("e", b"e")
    assert [files.get(k) for k in "bcde"] == [None, None, b"d", b"e"] and files.bytes == 2


def test_translated_files_expire_after_their_time(monkeypatch) -> None:
    """A translated file is there for FILE_TTL_S and gone after it: at the download, and from the store
    (its bytes freed) when the next file comes in."""
    import types

    from aiayn.serve import files as serve_files

    now = [1000.0]
    monkeypatch.setattr(serve_files, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    files = serve_files.Files(max_bytes=100)
    assert files.put("a", b"a" * 40)
    now[0] += serve_files.FILE_TTL_S - 1
    assert files.put("b", b"b" * 40) and files.get("a") == b"a" * 40 and files.bytes == 80
    now[0] += 1
    assert files.get("a") is None and files.get("b") == b"b" * 40  # "a" is an hour old, "b" is not
    assert files.put("c", b"c") and files.bytes == 41 and "a" not in files.items


def test_v1_nbest_beam_and_max_length(server: ThreadServer, translator) -> None:
    r = httpx.post(server.url + "/v1/translate", json={"q": SOURCES[:2], "beam": 3, "n_best": 3})
    assert r.status_code == 200, r.text
    got = r.json()["translations"]
    want = translator.translate_scored(SOURCES[:2], beam=3, n_best=3)
    for g, w in zip(got, want):
        assert [h["text"] for h in g["nbest"]] == [t for t, _ in w] and g["text"] == w[0][0]
        assert [h["score"] for h in g["nbest"]] == pytest.approx([sc for _, sc in w], abs=1e-3)
        assert g["score"] >= g["nbest"][-1]["score"]
    r = httpx.post(server.url + "/v1/translate", json={"q": SOURCES[4], "beam": 1, "max_len_b": 2, "max_len_a": 0})
    assert (
        r.json()["translations"][0]["text"] == translator.translate([SOURCES[4]], beam=1, max_len_a=0, max_len_b=2)[0]
    )
    assert r.json()["translations"][0]["score"] is None  # greedy: no score (JSON has no NaN)


def test_concurrent_requests_share_batches_and_get_their_own_answers(server: ThreadServer, translator) -> None:
    before = _metric(server.url, "aiayn_batch_requests")
    # Some of each beam size: requests with different settings must not share a batch.
    jobs = [(de, beam) for de in SOURCES for beam in (4, 1)]
    want = {(de, beam): translator.translate([de], beam=beam)[0] for de, beam in jobs}

    def disconnecting_client() -> None:  # sends a full request and leaves before the answer
        with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1]))) as s:
            body = json.dumps({"q": SOURCES[0]}).encode()
            s.sendall(
                b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )

    async def main() -> list:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:

            async def one(de: str, beam: int):
                await asyncio.sleep(random.random() * 0.02)
                return await c.post("/v1/translate", json={"q": de, "beam": beam})

            tasks = [one(de, beam) for de, beam in jobs]
            tasks.append(asyncio.to_thread(disconnecting_client))
            return await asyncio.gather(*tasks)

    responses = asyncio.run(main())[:-1]
    for (de, beam), r in zip(jobs, responses):
        assert r.status_code == 200, r.text
        assert r.json()["translations"][0]["text"] == want[de, beam], (de, beam)
    after = _metric(server.url, "aiayn_batch_requests")
    ones = after[("aiayn_batch_requests_bucket", (("le", "1.0"),))] - before.get(
        ("aiayn_batch_requests_bucket", (("le", "1.0"),)), 0
    )
    batches = after[("aiayn_batch_requests_count", ())] - before.get(("aiayn_batch_requests_count", ()), 0)
    assert batches < len(jobs) and ones < batches, "no batch held more than one request"
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
    assert len(set(want.values())) > len(SOURCES) // 2  # the answers differ: a swapped one would show


def test_whole_batching_with_the_real_engine(torch_engine, translator) -> None:
    """`--batching whole`: greedy searches too are decoded in whole batches (no running batch), and
    each request still gets its own sentence's translation."""
    srv = _serve(torch_engine, batching="whole", max_wait_ms=150, max_batch_tokens=4096)
    try:
        jobs = [(de, beam) for de in SOURCES for beam in (1, 4)]

        async def main() -> list:
            async with httpx.AsyncClient(base_url=srv.url, timeout=60) as c:
                return await asyncio.gather(*(c.post("/v1/translate", json={"q": de, "beam": b}) for de, b in jobs))

        responses = asyncio.run(main())
        for (de, beam), r in zip(jobs, responses):
            assert r.status_code == 200, r.text
            assert r.json()["translations"][0]["text"] == translator.translate([de], beam=beam)[0], (de, beam)
        m = _metric(srv.url, "aiayn_batch_requests")
        batches = m[("aiayn_batch_requests_count", ())]
        # every sentence went through a whole batch (greedy ones included: none joined a running batch),
        # and requests shared batches
        assert m[("aiayn_batch_requests_sum", ())] == len(jobs) and batches < len(jobs)
    finally:
        srv.stop()


class _BlockingEngine(_FakeEngine):
    """The fake engine, held inside its first batch until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def translate(self, texts: list[str], opts) -> list:
        assert self.release.wait(60)
        return super().translate(texts, opts)


def test_a_full_queue_is_503_and_the_server_recovers() -> None:
    """docs/serving.md: 503 when more than 10,000 sentences are queued."""
    engine = _BlockingEngine()
    srv = _serve(engine, max_wait_ms=0, batch_limit=-1, char_limit=-1, sentence_limit=-1, body_limit=1 << 22)
    try:
        result: dict = {}
        big = [f"s{i}" for i in range(10_000)]

        def call() -> None:
            result["r"] = httpx.post(srv.url + "/v1/translate", json={"q": big, "beam": 1}, timeout=60)

        t = threading.Thread(target=call)
        t.start()
        deadline = time.monotonic() + 60
        while httpx.get(srv.url + "/health").json()["queued_sentences"] != 10_000:  # all 10,000 queued
            assert t.is_alive() and time.monotonic() < deadline
            time.sleep(0.01)
        r = httpx.post(srv.url + "/v1/translate", json={"q": "one more"})
        assert r.status_code == 503 and "server busy: more than 10000 sentences queued" in r.text, r.text
        engine.release.set()
        t.join(60)
        assert result["r"].status_code == 200
        assert [x["text"] for x in result["r"].json()["translations"]] == [x.upper() for x in big]
        r = httpx.post(srv.url + "/v1/translate", json={"q": "one more"})
        assert r.status_code == 200 and r.json()["translations"][0]["text"] == "ONE MORE"
    finally:
        engine.release.set()
        srv.stop()


def test_an_engine_without_the_optional_abilities_gets_the_protocols_defaults() -> None:
    """An engine declares only its name, count_tokens and translate (the fake): one worker, whole batches,
    tags placed by position (no word links), no attention map (501), nothing to close."""
    fake = _FakeEngine()
    assert fake.workers == 1 and not fake.concurrent and fake.stream() is None and fake.close() is None
    srv = _serve(fake, max_wait_ms=0)
    try:
        body = {"q": "<p>ein <b>hund</b> rennt.</p>", "source": "de", "target": "en", "format": "html"}
        r = httpx.post(srv.url + "/translate", json=body, timeout=30)
        assert r.status_code == 200 and r.json() == {"translatedText": "<p>EIN <b>HUND</b> RENNT.</p>"}
        r = httpx.post(srv.url + "/v1/attention", json={"q": "ein hund"}, timeout=30)
        assert r.status_code == 501 and r.json() == {"error": "the fake backend does not report attention"}
    finally:
        srv.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the worker, ended on purpose
def test_health_is_503_once_the_worker_has_died(monkeypatch) -> None:
    """docs/serving.md: /health is 503 if the worker died. The worker survives any Exception (a
    engine's goes to the requests, a metric's is dropped), so it is ended here by what ends a thread:
    SystemExit, raised after a batch (from its statistics)."""
    from aiayn.serve import metrics as serve_metrics

    def broken(self, stats) -> None:
        raise SystemExit("the worker ends here")

    monkeypatch.setattr(serve_metrics.Metrics, "observe_batch", broken)
    srv = _serve(_FakeEngine(), max_wait_ms=0)
    try:
        assert httpx.get(srv.url + "/health").status_code == 200
        r = httpx.post(srv.url + "/v1/translate", json={"q": "a b"}, timeout=30)
        assert r.status_code == 200 and r.json()["translations"][0]["text"] == "A B"  # answered, then died
        deadline = time.monotonic() + 30
        while (h := httpx.get(srv.url + "/health")).status_code == 200:
            assert time.monotonic() < deadline, "the worker did not stop"
            time.sleep(0.01)
        assert h.status_code == 503 and h.json()["status"] == "worker stopped"
        r = httpx.post(srv.url + "/v1/translate", json={"q": "a b"}, timeout=30)
        assert r.status_code >= 500
    finally:
        srv.stop()


def test_limits_malformed_and_random_bytes(server: ThreadServer) -> None:
    u = server.url
    cases = [
        (
            dict(json={"q": ["x" * 500, "y" * 501], "source": "de", "target": "en"}),
            413,
            "exceeds character limit (1000)",
        ),
        (dict(json={"q": ["a"] * 9, "source": "de", "target": "en"}), 413, "exceeds text limit (8)"),
        (dict(json={"q": "a" * 65_000}), 413, "exceeds limit"),
        (dict(content=b'{"q": "a"', headers={"content-type": "application/json"}), 400, "not valid JSON"),
        (dict(content=b"[" * 15_000, headers={"content-type": "application/json"}), 400, "not valid JSON"),
        (dict(json=["a list"]), 400, "must be a JSON object"),
        (dict(json={"q": 5, "source": "de", "target": "en"}), 400, "q must be a string or a list of strings"),
        (dict(json={"q": ["a", 3], "source": "de", "target": "en"}), 400, "q must be a string"),
    ]
    for kw, status, msg in cases:
        r = httpx.post(u + "/translate", **kw)
        assert r.status_code == status and msg in r.json()["error"], (kw.get("json"), r.status_code, r.text)
    # exactly the character limit is allowed, one more is not (a search of one token keeps it quick)
    short = {"beam": 1, "max_len_a": 0, "max_len_b": 1}
    r = httpx.post(u + "/v1/translate", json={"q": ["x" * 500, "y" * 500], **short}, timeout=60)
    assert r.status_code == 200 and len(r.json()["translations"]) == 2, r.text
    r = httpx.post(u + "/v1/translate", json={"q": ["x" * 500, "y" * 501], **short}, timeout=60)
    assert r.status_code == 413 and "request (1001) exceeds character limit (1000)" in r.json()["error"], r.text
    v1 = [
        ({"q": "x", "beam": "4"}, "beam"),
        ({"q": "x", "beam": 0}, "beam"),
        ({"q": "x", "beam": 99}, "beam"),
        ({"q": ["x"], "n_best": 5, "beam": 2}, "n_best (5) must not exceed beam (2)"),
        ({"q": None}, "q"),
        ({"q": "x", "max_len_b": -1}, "max_len_b"),
        ({"q": "x", "surprise": 1}, "surprise"),
        ({}, "q"),
    ]
    for body, msg in v1:
        r = httpx.post(u + "/v1/translate", json=body)
        assert r.status_code == 422 and msg in r.json()["error"], (body, r.text)
    r = httpx.post(u + "/v1/attention", json={"q": "y" * 1001})
    assert r.status_code == 413
    rng = random.Random(0)
    for i in range(40):
        blob = rng.randbytes(rng.randint(1, 3000))
        path = ["/translate", "/v1/translate", "/v1/attention"][i % 3]
        ctype = ["application/json", "application/x-www-form-urlencoded", "application/octet-stream"][i % 3]
        r = httpx.post(u + path, content=blob, headers={"content-type": ctype})
        assert 400 <= r.status_code < 500 and "error" in r.json(), (path, r.status_code, r.text)
    # Raw garbage on the socket, not even HTTP: uvicorn answers 400 or hangs up; the server lives on.
    with socket.create_connection(("127.0.0.1", int(u.rsplit(":", 1)[1]))) as s:
        s.sendall(rng.randbytes(2000) + b"\r\n\r\n")
        s.settimeout(5)
        try:
            reply = s.recv(100)
        except (ConnectionResetError, TimeoutError):
            reply = b""
        assert reply == b"" or reply.startswith(b"HTTP/1.1 4")
    assert httpx.get(u + "/nope").status_code == 404 and httpx.get(u + "/nope").json()["error"]
    assert httpx.get(u + "/health").json()["status"] == "ok"
    assert httpx.post(u + "/v1/translate", json={"q": SOURCES[0]}).status_code == 200
    assert not any(k[1] and ("status", "500") in k[1] for k in _metric(u, "aiayn_requests"))


def test_api_key_enforced(torch_engine, translator) -> None:
    srv = _serve(torch_engine, api_key="s3cret", max_wait_ms=0)
    try:
        body = {"q": SOURCES[1], "source": "de", "target": "en"}
        r = httpx.post(srv.url + "/translate", json=body)
        assert r.status_code == 400 and "API key" in r.json()["error"]
        r = httpx.post(srv.url + "/translate", json={**body, "api_key": "wrong"})
        assert (r.status_code, r.json()) == (403, {"error": "Invalid API key"})
        assert httpx.post(srv.url + "/v1/translate", json={"q": "x"}, headers={"X-API-Key": "nope"}).status_code == 403
        assert httpx.post(srv.url + "/v1/attention", json={"q": "x"}).status_code == 400
        want = translator.translate([SOURCES[1]])[0]
        assert httpx.post(srv.url + "/translate", json={**body, "api_key": "s3cret"}).json()["translatedText"] == want
        r = httpx.post(srv.url + "/v1/translate", json={"q": SOURCES[1]}, headers={"Authorization": "Bearer s3cret"})
        assert r.json()["translations"][0]["text"] == want
        assert LibreTranslateAPI(srv.url, api_key="s3cret").translate(SOURCES[1], "de", "en") == want
        assert httpx.get(srv.url + "/health").status_code == 200  # health and metrics stay open
    finally:
        srv.stop()


def test_ctranslate2_engine_greedy_identical(run_dir: Path, server: ThreadServer) -> None:
    from aiayn.serve import CTranslate2ServeEngine

    ct2 = CTranslate2ServeEngine(run_dir, threads=1)  # a run directory: its cached export
    srv = _serve(ct2, max_wait_ms=5)
    try:
        lines = SOURCES + ["Hund " * 60, "Ein Hund", "", "Frau Frau Frau"]  # the 60-word line hits the positions
        for extra in ({}, {"max_len_a": 0, "max_len_b": 3}, {"max_len_b": 0}):
            for k in range(0, len(lines), 7):  # the torch server's batch limit is 8
                body = {"q": lines[k : k + 7], "beam": 1, **extra}
                ours = httpx.post(server.url + "/v1/translate", json=body).json()["translations"]
                theirs = httpx.post(srv.url + "/v1/translate", json=body).json()
                assert theirs["backend"] == "ctranslate2"
                assert [t["text"] for t in theirs["translations"]] == [t["text"] for t in ours], extra
        att = httpx.post(srv.url + "/v1/attention", json={"q": SOURCES[0], "beam": 1}).json()
        assert len(att["layers"][0]) == len(att["target_tokens"])
    finally:
        srv.stop()
    assert ct2.translator.searcher.model_dir.parent == run_dir / "ct2"  # written once into the run, reused


def test_attention_draws_the_translation_the_server_answers(
    run_dir: Path, random_run: Path, torch_engine, random_engine
) -> None:
    """Issue #47: the attention view drew CTranslate2's own beam (its length penalty), not the translation
    shown above it (ours, re-ranked). Both engines, trained and untrained weights, greedy and beam."""
    from aiayn.serve import CTranslate2ServeEngine, SearchOptions

    ct2 = CTranslate2ServeEngine(run_dir, threads=1)
    ct2_random = CTranslate2ServeEngine(random_run, threads=1)
    for engine in (torch_engine, random_engine, ct2, ct2_random):
        for beam in (1, 4):
            opts = SearchOptions(beam=beam, max_len_b=12)
            for sentence in SOURCES[:4] + ["Hund Katze Frau", "Zwei"]:
                shown = engine.translate([sentence], opts)[0][0].text
                a = engine.attention(sentence, opts)
                assert a["translation"] == shown, (engine.name, beam, sentence)
                assert len(a["layers"][-1]) == len(a["target_tokens"])
                drawn = a["target_tokens"][:-1] if a["target_tokens"][-1:] == ["</s>"] else a["target_tokens"]
                pieces = "".join(drawn).replace(" ", "").replace("\u2581", "")
                if "<0x" not in pieces:  # byte pieces are shown as such
                    assert pieces == shown.replace(" ", "")


def test_attention_endpoint(server: ThreadServer, translator) -> None:
    r = httpx.post(server.url + "/v1/attention", json={"q": SOURCES[2], "beam": 4})
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["translation"] == translator.translate([SOURCES[2]], beam=4)[0]
    assert len(a["layers"]) == 2 and a["source_tokens"][-1] == "</s>" and a["target_tokens"][-1] == "</s>"
    for m in a["layers"]:  # (target pieces + EOS) x (source pieces + EOS), rows are distributions
        assert len(m) == len(a["target_tokens"]) and all(len(row) == len(a["source_tokens"]) for row in m)
        assert all(abs(sum(row) - 1) < 1e-2 for row in m)


def test_sigterm_answers_the_request_in_flight_then_exits(run_dir: Path) -> None:
    from aiayn import Translator

    default = Translator.load(run_dir, device="cpu")
    assert default.engine == "ctranslate2"
    sock = _free_socket()
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    # A 1.5 s batching window keeps the request surely in flight when SIGTERM arrives.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiayn",
            "serve",
            "-c",
            str(run_dir),
            "--port",
            str(port),
            "--max-wait-ms",
            "1500",
            "--no-adaptive-wait",  # the lone request waits the window, idle server or not
            "--device",
            "cpu",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.1)
        result: dict = {}

        def call() -> None:
            result["r"] = httpx.post(url + "/v1/translate", json={"q": SOURCES[:4]}, timeout=30)

        t = threading.Thread(target=call)
        t.start()
        # SIGTERM once the server holds the request (its 4 sentences queued, answered only after the
        # 1.5 s window), as its own gauge says, not after a sleep that assumes the request got there
        while _metric(url, "aiayn_queue_sentences").get(("aiayn_queue_sentences", ())) != 4:
            assert t.is_alive() and time.monotonic() < deadline, "the request never reached the queue"
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        t.join(30)
        assert result["r"].status_code == 200
        # The default engine (auto): CTranslate2 on the CPU, as Translator.load's default.
        assert [x["text"] for x in result["r"].json()["translations"]] == default.translate(SOURCES[:4])
        # uvicorn re-raises the SIGTERM it caught once shutdown is done: the process ends by it.
        assert proc.wait(30) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert b"Traceback" not in err
    weights, engine = err.decode().splitlines()[:2]  # what loaded, then which engine: first, a line each
    assert weights == f"weights: {run_dir}/best.safetensors (step 150; the best by validation)"
    assert engine.startswith("engine: ctranslate2 (CPU, ctranslate2 ")


@pytest.mark.needs_browser
def test_web_page_in_headless_chromium(server: ThreadServer, translator, tmp_path: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from conftest import browser_paths

    chromium, driver_path = browser_paths()
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
    try:
        wait = WebDriverWait(driver, 30)
        driver.get(server.url + "/")
        # a pasted paragraph: its sentences translated, in its layout (issue #47)
        driver.find_element(By.ID, "source").send_keys(PARAGRAPH)
        driver.find_element(By.ID, "go").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#output span.translation"))
        output = driver.find_element(By.ID, "output")
        assert driver.execute_script("return arguments[0].textContent", output) == _alone(translator, PARAGRAPH)
        spans = driver.find_elements(By.CSS_SELECTOR, "#output span.translation")
        assert [x.text for x in spans] == [translator.translate([x], beam=4)[0] for x in _SENTENCES]
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#heatmap svg rect.cell"))
        # the attention view draws the sentence shown: its rows are the pieces of that translation
        rows = "return [...document.querySelectorAll('#heatmap text.tgt-tok')].map((t) => t.textContent)"

        def drawn(d) -> str:  # the heat map's row labels (by script: a click redraws the map)
            labels = d.execute_script(rows)
            return "".join(labels[:-1] if labels[-1:] == ["</s>"] else labels).replace(" ", "").replace("\u2581", "")

        for span in (spans[2], spans[0]):
            span.click()
            wait.until(lambda d, span=span: "selected" in span.get_attribute("class"))
            wait.until(lambda d, span=span: d.find_element(By.ID, "att-translation").text == span.text)
            wait.until(lambda d, span=span: drawn(d) == span.text.replace(" ", ""))
        driver.find_element(By.ID, "source").clear()
        driver.find_element(By.ID, "source").send_keys(SOURCES[5])
        driver.find_element(By.ID, "go").click()
        want = translator.translate([SOURCES[5]], beam=4)[0]
        shown = "return [...document.querySelectorAll('#output span.translation')].map((s) => s.textContent)"
        wait.until(lambda d: d.execute_script(shown) == [want])  # by script: the page replaces the elements
        wait.until(lambda d: d.find_element(By.ID, "att-translation").text == want)  # the new sentence's map
        wait.until(lambda d: drawn(d) == want.replace(" ", ""))
        src = driver.find_elements(By.CSS_SELECTOR, "#heatmap text.src-tok")
        tgt = driver.find_elements(By.CSS_SELECTOR, "#heatmap text.tgt-tok")
        cells = driver.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell")
        assert len(cells) == len(src) * len(tgt) and len(tgt) >= 2
        assert not driver.find_elements(By.CSS_SELECTOR, "#heatmap .aligned")
        ActionChains(driver).move_to_element(tgt[1]).perform()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#heatmap text.src-tok.aligned"))
        assert len(driver.find_elements(By.CSS_SELECTOR, '#heatmap rect.cell.hl[data-row="1"]')) == len(src)
        assert len(driver.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell.aligned")) == 1
        assert not driver.find_elements(By.CSS_SELECTOR, "#status:not(:empty)")
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def random_run(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained model (learned positions; the trained one has sinusoids) with the run's vocabulary:
    its greedy outputs run to their length limits, the trained one's mostly end with EOS."""
    run = tmp_path_factory.mktemp("random_run")
    (run / "spm.model").write_bytes((run_dir / "spm.model").read_bytes())
    torch.manual_seed(1)
    cfg = ModelConfig.preset("tiny", vocab_size=Tokenizer(run / "spm.model").vocab_size, max_positions=48, dropout=0.0)
    save_weights(Transformer(dataclasses.replace(cfg, positional="learned")).eval(), run / "best.safetensors", step=0)
    return run


@pytest.fixture(scope="module")
def random_engine(random_run: Path):
    from aiayn.serve import TorchServeEngine

    return TorchServeEngine(random_run, device="cpu")


@pytest.mark.parametrize("which", ["trained", "random"])
def test_continuous_greedy_equals_each_sentence_alone(which: str, torch_engine, random_engine) -> None:
    """Sentences of different lengths join a running greedy batch at different decoder steps (and
    rows leave as they end): each output is token for token `TorchServeEngine.translate` of it alone."""
    from aiayn.serve import SearchOptions

    engine = torch_engine if which == "trained" else random_engine
    lines = SOURCES + ["Hund " * 60, "Ein Hund", "", "Frau Frau Frau", "Zwei"]  # the 60-word line is cut
    options = [SearchOptions(beam=1), SearchOptions(beam=1, max_len_a=0, max_len_b=3)]
    options.append(SearchOptions(beam=1, max_len_b=0))
    jobs = [(line, options[i % 3] if i % 4 == 0 else options[0]) for i, line in enumerate(lines)]
    want = [engine.translate([line], opts)[0] for line, opts in jobs]
    stream = engine.stream()
    ids: dict[int, list[int]] = {}  # the generated ids too: byte pieces of random outputs may decode alike
    engine_step = stream.greedy.step

    def step() -> list:
        out = engine_step()
        ids.update(out)
        return out

    stream.greedy.step = step  # type: ignore[method-assign]
    rng = random.Random(0)
    got: dict[int, list] = {}
    pending, steps, joined_running = list(range(len(jobs))), 0, 0
    while pending or stream.rows:
        take = pending[: rng.choice([0, 0, 1, 1, 2, 3])] if stream.rows else pending[:2]
        pending = pending[len(take) :]
        joined_running += bool(take and stream.rows)
        for opts in options:  # one add per search setting, as the batcher does
            group = [i for i in take if jobs[i][1] == opts]
            for key, hyps in stream.add([jobs[i][0] for i in group], opts, group):
                got[key] = hyps
        for key, hyps in stream.step():
            assert key not in got
            got[key] = hyps
        steps += 1
        if steps % 4:  # else free slots stay for joining rows to take over (DecoderCache.refill)
            continue
        stream.greedy.compact()
        cache = stream.greedy.cache
        if cache is not None:  # no buffer columns before the oldest running row's first
            assert cache.length == int(stream.greedy.done.max())
            assert cache.start is None or int(cache.start.min()) == 0
            assert cache.src_mask.size(-1) == max(
                cache.src_mask[r].sum().item() for r in range(stream.rows)
            )  # nor source columns past the longest running source
    assert joined_running >= 5 and steps > 10
    from aiayn.decode.search import greedy_search

    tr = engine.translator
    for i, (line, opts) in enumerate(jobs):
        assert got[i][0][0] == want[i][0][0], (which, line)
        pieces = tr.tokenizer.encode(line)[: tr.max_input_len - 1]
        if pieces:
            src = torch.tensor([pieces + [EOS_ID]])
            assert ids[i] == greedy_search(tr.model, src, opts.max_len_a, opts.max_len_b)[0], (which, line)
        assert (got[i][0][2] > 0) == bool(got[i][0][0])  # target pieces + EOS; 0 for an empty source
    if which == "trained":
        assert len({g[0][0] for g in got.values()}) > len(SOURCES) // 2
    else:
        assert max(len(g[0][0]) for g in got.values()) > 40  # the cut line decodes up to the positions


def test_batcher_continuous_joins_running_batch_and_keeps_order(random_engine) -> None:
    """Through the batcher: greedy sentences submitted while a long one decodes join it and are
    answered before it ends, a beam search in between waits for the running batch and is decoded
    whole, and every answer equals the sentence translated alone. The untrained model decodes to the
    length limits: 47 steps for the long line (the positions), 3 for the short ones."""
    from aiayn.serve import Batcher, SearchOptions

    stats = []
    b = Batcher(random_engine, max_batch_tokens=4096, max_wait_ms=0, observer=stats.append)
    b.start()
    short = SearchOptions(beam=1, max_len_a=0, max_len_b=3)
    jobs = [("Hund " * 60, SearchOptions(beam=1))]
    jobs += [(de, SearchOptions(beam=4) if i == 7 else short) for i, de in enumerate(SOURCES)]

    async def main() -> tuple:
        done_at: dict[int, float] = {}

        async def one(i: int, text: str, opts: SearchOptions):
            await asyncio.sleep(0.002 * i)
            out = await b.translate([text], opts)
            done_at[i] = time.monotonic()
            return out

        outs = await asyncio.gather(*(one(i, t, opts) for i, (t, opts) in enumerate(jobs)))
        return outs, done_at

    try:
        outs, done_at = asyncio.run(main())
    finally:
        b.close()
    for (text, opts), out in zip(jobs, outs):
        assert out[0][0][0] == random_engine.translate([text], opts)[0][0][0], (text, opts)
    assert min(done_at[i] for i in range(1, 4)) < done_at[0]  # short ones joined later, left earlier
    assert b.queued == 0 and sum(s.sentences for s in stats) == len(jobs)


def test_a_failing_stream_step_answers_every_running_sentence_with_the_error(random_engine, monkeypatch) -> None:
    """The stream lets finished rows go before their ids become text: when that last part fails, the
    sentences that had just finished get the error like the running ones (none waits forever), the
    queue count returns to zero, and the next request is answered as usual."""
    from aiayn.serve import Batcher, SearchOptions

    tok = random_engine.tokenizer
    decode = tok.decode
    calls = {"n": 0}

    def broken(ids):
        calls["n"] += 1
        raise IndexError("piece id is out of range")

    b = Batcher(random_engine, max_batch_tokens=4096, max_wait_ms=0)
    b.start()
    short = SearchOptions(beam=1, max_len_a=0, max_len_b=3)

    async def ask(texts: list[str]):
        try:
            return await asyncio.wait_for(b.translate(texts, short), 30)
        except IndexError as e:
            return e

    try:
        monkeypatch.setattr(tok, "decode", broken)
        failed = asyncio.run(ask(SOURCES[:3]))
        assert isinstance(failed, IndexError) and calls["n"] >= 1
        assert b.queued == 0
        monkeypatch.setattr(tok, "decode", decode)
        again = asyncio.run(ask(SOURCES[:2]))
    finally:
        b.close()
    assert [o[0][0] for o in again] == [random_engine.translate([s], short)[0][0][0] for s in SOURCES[:2]]


def test_a_stream_refuses_keys_that_do_not_match_its_sources(random_engine) -> None:
    from aiayn.decode.continuous import GreedyStream

    stream = GreedyStream(random_engine.translator.model)
    for sources, keys in (([[5, 9, 3], [7, 3]], ["a"]), ([[5, 3]], [None]), ([[]], ["a"])):
        with pytest.raises(ValueError, match="one key"):
            stream.add(sources, keys)
    assert stream.rows == 0


def test_serve_takes_one_engine_switch() -> None:
    import argparse

    from aiayn.cli.serve import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert parser.parse_args(["serve", "-c", "r"]).engine == "auto"
    assert parser.parse_args(["serve", "-c", "r", "--engine", "torch"]).engine == "torch"
    with pytest.raises(SystemExit):  # the switch's old name is gone (issue #49)
        parser.parse_args(["serve", "-c", "r", "--backend", "ctranslate2"])


def test_load_engine_follows_the_engine_choice(run_dir: Path) -> None:
    from aiayn.serve.engines import CTranslate2ServeEngine, TorchServeEngine, load_engine

    auto = load_engine("auto", run_dir, device="cpu", threads=1)
    assert isinstance(auto, CTranslate2ServeEngine) and auto.translator.engine_reason.startswith("CPU, ctranslate2 ")
    assert auto.stream() is None  # CTranslate2 decodes whole batches
    assert auto.workers == 1  # threads given: one batch at a time on them
    assert auto.translator.searcher.translator.num_translators == 1
    default = load_engine("auto", run_dir, device="cpu")  # one single-threaded replica per core
    cores = cpu_cores()
    assert default.workers == cores and default.translator.searcher.translator.num_translators == cores
    three = load_engine("ctranslate2", run_dir, device="cpu", workers=3)
    assert three.workers == three.translator.searcher.translator.num_translators == 3
    torch_ = load_engine("torch", run_dir, device="cpu", threads=1)
    assert type(torch_) is TorchServeEngine and torch_.translator.engine == "torch" and torch_.workers == 1
    with pytest.raises(AiaynError, match="one batch at a time"):
        load_engine("torch", run_dir, device="cpu", workers=2)


def test_serve_takes_workers() -> None:
    import argparse

    from aiayn.cli.serve import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert parser.parse_args(["serve", "-c", "r"]).workers == 0
    assert parser.parse_args(["serve", "-c", "r", "--workers", "3"]).workers == 3


def test_ctranslate2_workers_decode_batches_at_once_and_each_answer_is_its_own(run_dir: Path) -> None:
    """Two workers over two CTranslate2 replicas: batches of one request and of concurrent ones decode
    at the same time (their calls overlap), every sentence gets the translation of it alone, in its
    request's order, and closing stops both workers. An engine that cannot decode two batches at once
    refuses two workers."""
    from aiayn.serve import Batcher, CTranslate2ServeEngine, SearchOptions

    ct2 = CTranslate2ServeEngine(run_dir, threads=1, workers=2)
    assert ct2.workers == ct2.translator.searcher.translator.num_translators == 2  # a replica per worker
    translate = ct2.translate
    calls: list[tuple[float, float]] = []

    def timed(texts, opts):
        t0 = time.monotonic()
        try:
            return translate(texts, opts)
        finally:
            calls.append((t0, time.monotonic()))

    ct2.translate = timed  # type: ignore[method-assign]
    lines = [de + " Hund" * (i % 3) for i, de in enumerate(SOURCES * 3)]
    want = {line: ct2.translator.translate([line], beam=4)[0] for line in set(lines)}
    b = Batcher(ct2, max_batch_tokens=4 * 4 * 30, max_wait_ms=0, workers=2)  # a few sentences per batch
    b.start()

    async def main() -> list:
        one = b.translate(lines, SearchOptions(beam=4))  # one request, split over many batches
        many = [b.translate([line], SearchOptions(beam=4)) for line in lines]
        return await asyncio.wait_for(asyncio.gather(one, *many), 120)

    try:
        for _ in range(3):
            calls.clear()
            outs = asyncio.run(main())
            assert [h[0][0] for h in outs[0]] == [want[line] for line in lines]
            assert [o[0][0][0] for o in outs[1:]] == [want[line] for line in lines]
            assert b.queued == 0 and len(calls) > 4
            spans = sorted(calls)
            if any(a_end > b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])):
                break
        else:
            raise AssertionError(f"no two batches decoded at once in 3 rounds: {spans}")
    finally:
        b.close()
    assert not any(t.is_alive() for t in b._threads)
    fake = _FakeEngine()
    with pytest.raises(AiaynError, match="one batch at a time"):
        Batcher(fake, workers=2)
    with pytest.raises(AiaynError, match="at least one worker"):
        Batcher(ct2, workers=0)
    assert CTranslate2ServeEngine(run_dir).workers == cpu_cores()  # the layout Translator chose
