"""The HTTP API of `aiayn serve` (FastAPI): LibreTranslate's /translate, aiayn's own /v1, metrics, a web page.

    POST /translate      {"q": str | [str], "source": "de", "target": "en", "format": "text" | "html", "api_key": ...}
                         -> {"translatedText": str | [str]}; JSON or form-encoded, as LibreTranslate
    POST /detect         {"q": str} -> [{"confidence": 97.1, "language": "de"}, ...] (py3langid, best first)
    POST /translate_file multipart: file (.txt, .html, .docx, .pptx), source, target -> {"translatedFileUrl": URL}
    GET  /download_file/NAME  the translated file (the URL above)
    GET  /languages      [{"code": "de", "name": "German", "targets": ["en"]}, ...]
    POST /v1/translate   {"q": [str], "beam": 4, "n_best": 2, "length_penalty": 0.6, "max_len_a": 1, "max_len_b": 50}
                         -> {"translations": [{"text", "score", "nbest": [{"text", "score"}]}], ...}
    POST /v1/attention   {"q": str, "beam": 4} -> translation + encoder-decoder attention (the web page)
    GET  /health, GET /metrics (Prometheus text), GET / (the web page)

Errors are LibreTranslate's shape, {"error": "one line"}: 400 malformed or missing fields, 422 wrong
types or values (/v1), 413 over the char / batch / body limits, 400/403 missing/wrong API key,
503 queue full. Bodies are read and parsed here (not by FastAPI's model binding) so the body limit
holds before anything is parsed and every parse failure becomes one of those answers.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from lxml.etree import LxmlError
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from aiayn.config import DecodeConfig
from aiayn.data.language import detect
from aiayn.data.segment import SentenceStarts
from aiayn.decode.documents import SplitTexts, split_texts
from aiayn.decode.html import HtmlDocument, HtmlError
from aiayn.decode.office import KINDS, OfficeDocument, OfficeError
from aiayn.errors import AiaynError
from aiayn.serve.batcher import Backend, Batcher, BatchStats, Coalesced, Hypothesis, Overloaded, SearchOptions

log = logging.getLogger("aiayn.serve")
STATIC = Path(__file__).parent / "static"
MAX_BEAM = 16
# `source: auto` refuses a text as another language only where the identifier gives the source language
# less than this share of the top language's probability: py3langid ranks short German ("Hallo", "Danke",
# "Ein Hund.", "Zwei Männer.") Italian, Danish, Faroese or Luxembourgish, with German close behind (0.5-0.97
# of the top), and those must still translate; a French, Czech or English sentence gives German < 0.02 of it
AUTO_REFUSE = 0.1
LANGUAGE_NAMES = {
    "de": "German",
    "en": "English",
    "fr": "French",
    "cs": "Czech",
    "es": "Spanish",
    "it": "Italian",
    "nl": "Dutch",
    "pt": "Portuguese",
    "ru": "Russian",
    "zh": "Chinese",
    "ja": "Japanese",
    "sk": "Slovak",
    "pl": "Polish",
    "sv": "Swedish",
    "da": "Danish",
    "fi": "Finnish",
    "hu": "Hungarian",
    "ro": "Romanian",
    "tr": "Turkish",
    "el": "Greek",
    "uk": "Ukrainian",
    "ar": "Arabic",
    "ko": "Korean",
    "lb": "Luxembourgish",
}


@dataclass
class ServeSettings:
    """Limits and defaults of one server (the CLI flags); -1 = no limit, as LibreTranslate."""

    source_lang: str = "de"
    target_lang: str = "en"
    beam: int = DecodeConfig.beam
    length_penalty: float = DecodeConfig.length_penalty
    max_len_a: float = DecodeConfig.max_len_a
    max_len_b: int = DecodeConfig.max_len_b
    max_batch_tokens: int = DecodeConfig.max_tokens  # sentences x longest source x beam
    max_wait_ms: float = 10.0
    adaptive_wait: bool = True  # a request that finds the server idle does not wait the window
    batching: str = "continuous"  # greedy searches join a running batch; "whole": batches run to their end
    char_limit: int = 5000  # characters per request, summed over its sentences
    batch_limit: int = 64  # texts per request (LibreTranslate's batch limit: q items)
    # sentences per request once its texts are split (413 beyond): the char limit alone let one text of
    # "Ja. Ja. ..." queue over a thousand searches
    sentence_limit: int = 512
    body_limit: int = 1 << 20  # bytes
    api_key: str | None = None
    # Texts are cut into sentences (aiayn.data.segment), all decoded in one batch and rejoined with their
    # whitespace, as LibreTranslate does: the model was trained on single sentences (issue #47).
    split_sentences: bool = True
    # where a sentence without a final stop may run into the next (aiayn.decode.documents.run_sentence_starts)
    sentence_starts: SentenceStarts = field(default_factory=SentenceStarts)


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class V1Translate(BaseModel):
    """aiayn's own request: strict types (no "4" -> 4), unknown fields refused."""

    model_config = ConfigDict(extra="forbid")
    q: StrictStr | list[StrictStr]
    beam: StrictInt | None = Field(None, ge=1, le=MAX_BEAM)
    n_best: StrictInt = Field(1, ge=1, le=MAX_BEAM)
    length_penalty: StrictFloat | StrictInt | None = Field(None, ge=0, le=10)
    max_len_a: StrictFloat | StrictInt | None = Field(None, ge=0, le=10)
    max_len_b: StrictInt | None = Field(None, ge=0, le=1024)
    api_key: StrictStr | None = None
    # each text cut into sentences, decoded together, rejoined; the answer lists them (the web page)
    split: StrictBool = False


class V1Attention(V1Translate):
    q: StrictStr


class Metrics:
    """Prometheus metrics in a registry of the app's own (two apps in one process do not collide)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "aiayn_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "aiayn_request_latency_seconds",
            "HTTP request latency",
            ["endpoint"],
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.batch_sentences = Histogram(
            "aiayn_batch_sentences",
            "Sentences per decoded batch",
            registry=r,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        )
        self.batch_requests = Histogram(
            "aiayn_batch_requests",
            "Requests whose sentences share one decoded batch",
            registry=r,
            buckets=(1, 2, 4, 8, 16, 32, 64),
        )
        self.batch_wait = Histogram(
            "aiayn_batch_wait_seconds",
            "Wait of a batch's oldest sentence before decoding",
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5),
        )
        self.decode = Histogram(
            "aiayn_batch_decode_seconds",
            "Decode time per batch",
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.sentences = Counter("aiayn_sentences", "Sentences translated", registry=r)
        self.source_tokens = Counter("aiayn_source_tokens", "Source pieces decoded (EOS included)", registry=r)
        self.target_tokens = Counter("aiayn_target_tokens", "Target pieces generated (EOS included)", registry=r)
        self.tokens_per_s = Gauge(
            "aiayn_tokens_per_second", "Target pieces per second of decode time, last batch", registry=r
        )
        self.queue = Gauge("aiayn_queue_sentences", "Sentences waiting or being decoded", registry=r)

    def observe_batch(self, s: BatchStats) -> None:  # on the worker thread; prometheus_client is thread-safe
        self.batch_sentences.observe(s.sentences)
        self.batch_requests.observe(s.requests)
        self.batch_wait.observe(s.waited_s)
        self.decode.observe(s.decode_s)
        self.sentences.inc(s.sentences)
        self.source_tokens.inc(s.source_tokens)
        self.target_tokens.inc(s.target_tokens)
        if s.decode_s > 0:
            self.tokens_per_s.set(s.target_tokens / s.decode_s)


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


class _Measure:
    """ASGI middleware: request count by endpoint + status, and latency. Unknown paths share one
    label, so random URLs cannot grow the metric without bound."""

    def __init__(self, app: Any, metrics: Metrics, known: set[str]) -> None:
        self.app, self.metrics, self.known = app, metrics, known

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        endpoint = path if path in self.known else "other"
        status = [500]
        t0 = time.perf_counter()

        async def send_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.requests.labels(endpoint, str(status[0])).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - t0)


def create_app(backend: Backend, settings: ServeSettings | None = None) -> FastAPI:
    """The FastAPI app serving `backend`; its lifespan starts and stops the batching worker. The routes
    live in five routers below (LibreTranslate's API, its files, aiayn's /v1, operations, the web page);
    what they share is one `Service` in app.state."""
    s = settings or ServeSettings()
    metrics = Metrics()
    if s.batching not in ("continuous", "whole"):
        raise AiaynError(f"batching must be continuous or whole, not {s.batching!r}")
    batcher = Batcher(
        backend,
        s.max_batch_tokens,
        s.max_wait_ms,
        observer=metrics.observe_batch,
        continuous=s.batching == "continuous",
        workers=getattr(backend, "workers", 1),
        adaptive=s.adaptive_wait,
    )
    metrics.queue.set_function(lambda: batcher.queued)
    service = Service(s, backend, batcher, metrics, _Files())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        try:
            yield
        finally:  # uvicorn has answered the in-flight requests by now (graceful shutdown)
            batcher.close()
            close = getattr(backend, "close", None)
            if close is not None:
                close()

    app = FastAPI(title="aiayn serve", lifespan=lifespan, docs_url="/docs", redoc_url=None)
    app.state.service = service
    app.state.batcher, app.state.metrics, app.state.settings = batcher, metrics, s
    add_error_handlers(app)
    for router in (libre_router, files_router, v1_router, ops_router, page_router):
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    known = {
        "/",
        "/translate",
        "/languages",
        "/v1/translate",
        "/v1/attention",
        "/health",
        "/metrics",
        "/frontend/settings",
        "/detect",
        "/translate_file",
    }
    app.add_middleware(_Measure, metrics=metrics, known=known)
    return app


def add_error_handlers(app: FastAPI) -> None:
    """Every failure answers LibreTranslate's {"error": "one line"}."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError) -> JSONResponse:
        return _error(e.status, e.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        return _error(e.status_code, str(e.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError) -> JSONResponse:
        return _error(422, "Invalid request: " + _first_error(e.errors()))

    @app.exception_handler(Exception)
    async def _internal(request: Request, e: Exception) -> JSONResponse:
        log.exception("internal error on %s", request.url.path)
        return _error(500, f"internal error: {type(e).__name__}")


@dataclass
class Requests:
    """The steps every endpoint takes before its model (read the body within the limit, check the key
    and the limits), which need only the settings: the translation routers' and the task endpoint's
    (aiayn.serve.tasks)."""

    settings: ServeSettings

    async def read_body(self, request: Request) -> bytes:
        """The body, refused with 413 as soon as it passes the limit (declared or streamed)."""
        limit = self.settings.body_limit
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise ApiError(400, "Invalid request: bad Content-Length header")
            if limit >= 0 and int(declared) > limit:
                raise ApiError(413, f"Invalid request: body ({declared} bytes) exceeds limit ({limit})")
        chunks, total = [], 0
        async for chunk in request.stream():
            total += len(chunk)
            if limit >= 0 and total > limit:
                raise ApiError(413, f"Invalid request: body exceeds limit ({limit} bytes)")
            chunks.append(chunk)
        return b"".join(chunks)

    async def read_fields(self, request: Request) -> dict[str, Any]:
        """JSON object, or form fields (LibreTranslate and its clients send both)."""
        body = await self.read_body(request)
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype == "application/x-www-form-urlencoded" or (ctype != "application/json" and body[:1] not in b"{["):
            try:
                form = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=1000)
            except (UnicodeDecodeError, ValueError) as e:
                raise ApiError(400, f"Invalid request: body is neither JSON nor form data ({e})") from None
            if not form and body.strip():
                raise ApiError(400, "Invalid request: body is neither a JSON object nor form data")
            # A repeated field (q=a&q=b) is a list, as a JSON array would be.
            return {k: v[0] if len(v) == 1 else v for k, v in form.items()}
        try:
            data = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise ApiError(400, f"Invalid request: body is not valid JSON ({_one_line(e)})") from None
        if not isinstance(data, dict):
            raise ApiError(400, "Invalid request: body must be a JSON object")
        return data

    async def read_upload(self, request: Request) -> tuple[dict[str, str], str, bytes]:
        """A multipart body (LibreTranslate's /translate_file) -> (its text fields, file name, file bytes),
        within the body limit (read_body) before anything is parsed."""
        from starlette.datastructures import UploadFile
        from starlette.formparsers import MultiPartException, MultiPartParser

        body = await self.read_body(request)
        if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
            raise ApiError(400, "Invalid request: send the file as multipart/form-data (field file)")

        async def stream() -> AsyncGenerator[bytes, None]:
            yield body

        try:
            form = await MultiPartParser(request.headers, stream(), max_files=1, max_fields=20).parse()
        except MultiPartException as e:
            raise ApiError(400, f"Invalid request: {_one_line(e.message)}") from None
        try:  # the parser spools the upload to a temporary file: closed on every path
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise ApiError(400, "Invalid request: missing file parameter")
            data = await upload.read()
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
            return fields, upload.filename or "", data
        finally:
            await form.close()

    def check_key(self, request: Request, fields: dict[str, Any]) -> None:
        key = self.settings.api_key
        if key is None:
            return
        given = fields.get("api_key") or request.headers.get("x-api-key")
        auth = request.headers.get("authorization", "")
        if not given and auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        if not given:  # LibreTranslate's answers: 400 without a key, 403 with a wrong one
            raise ApiError(400, "Please contact the server operator to get an API key")
        if not isinstance(given, str) or not secrets.compare_digest(given.encode(), key.encode()):
            raise ApiError(403, "Invalid API key")

    def check_limits(self, texts: list[str]) -> None:
        s = self.settings
        if s.batch_limit >= 0 and len(texts) > s.batch_limit:
            raise ApiError(413, f"Invalid request: request ({len(texts)}) exceeds text limit ({s.batch_limit})")
        chars = sum(len(t) for t in texts)
        if s.char_limit >= 0 and chars > s.char_limit:
            raise ApiError(413, f"Invalid request: request ({chars}) exceeds character limit ({s.char_limit})")


@dataclass
class Service(Requests):
    """What the translation routers share: the settings (and the request steps of `Requests`), the
    backend, the batching worker, the metrics and the translated files; and the steps of a translation
    (its options, queueing its sentences)."""

    backend: Backend
    batcher: Batcher
    metrics: Metrics
    files: _Files
    aligner: Coalesced | None = None  # word links of (source, translation) pairs, concurrent requests' together

    def __post_init__(self) -> None:
        translator = getattr(self.backend, "translator", None)  # a translation backend's (Translator.align)
        if translator is not None:

            async def align(pairs: list[tuple[str, str]]) -> list[Any]:
                sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
                return await self.batcher.run_exclusive(lambda: translator.align(sources, targets))

            self.aligner = Coalesced(align)

    def default_options(self) -> SearchOptions:
        s = self.settings
        return SearchOptions(s.beam, s.length_penalty, s.max_len_a, s.max_len_b)

    def options(self, req: V1Translate) -> SearchOptions:
        s = self.settings
        beam = req.beam if req.beam is not None else s.beam
        if req.n_best > beam:
            raise ApiError(422, f"Invalid request: n_best ({req.n_best}) must not exceed beam ({beam})")
        return SearchOptions(
            beam=beam,
            n_best=req.n_best,
            length_penalty=float(_pick(req.length_penalty, s.length_penalty)),
            max_len_a=float(_pick(req.max_len_a, s.max_len_a)),
            max_len_b=int(_pick(req.max_len_b, s.max_len_b)),
        )

    async def run(self, texts: list[str], opts: SearchOptions) -> list:
        limit = self.settings.sentence_limit
        if limit >= 0 and len(texts) > limit:
            raise ApiError(413, f"Invalid request: request ({len(texts)} sentences) exceeds sentence limit ({limit})")
        try:
            return await self.batcher.translate(texts, opts)
        except Overloaded as e:
            raise ApiError(503, str(e)) from None

    async def run_texts(self, texts: list[str], opts: SearchOptions, split: bool) -> tuple[SplitTexts | None, list]:
        """n-best lists of the texts' translations; `split`: each text cut into sentences, all of them
        queued at once (one request: they batch together), each hypothesis k rejoined from the
        sentences' k-th (their last when a sentence has fewer) in the text's layout."""
        if not split:
            return None, await self.run(texts, opts)
        docs = split_texts(texts, self.settings.source_lang, starts=self.settings.sentence_starts)
        nbest = await self.run(docs.sentences, opts)
        per_k = [docs.join([h[min(k, len(h) - 1)][0] for h in nbest]) for k in range(opts.n_best)]
        joined = [[(per_k[k][i], math.nan, 0) for k in range(opts.n_best)] for i in range(len(texts))]
        return docs, joined

    def parse_html(self, texts: list[str]) -> list[HtmlDocument]:
        try:
            s = self.settings
            return [HtmlDocument(t, s.source_lang, s.target_lang, s.sentence_starts) for t in texts]
        except HtmlError as e:  # libxml2 stopped reading (too deep): never a 200 without the rest of the text
            raise ApiError(400, f"Invalid request: {_one_line(e)}") from None
        except (ValueError, LxmlError) as e:
            raise ApiError(400, f"Invalid request: cannot parse the HTML ({_one_line(e)})") from None

    async def render_html(self, pages: list[HtmlDocument], opts: SearchOptions) -> list[list[Hypothesis]]:
        """Every sentence of every page decoded at once; the sentences that hold tags aligned with their
        translations (Translator.align, on a worker between batches, with concurrent requests'), and each
        page rendered."""
        nbest = await self.run([x for p in pages for x in p.sentences], opts)
        per_page, at = [], 0
        for p in pages:
            per_page.append([h[0][0] for h in nbest[at : at + len(p.sentences)]])
            at += len(p.sentences)
        tagged = [(k, i) for k, p in enumerate(pages) for i in p.tagged]
        links: list[dict[int, Any]] = [{} for _ in pages]
        if tagged and self.aligner is not None:
            found = await self.aligner([(pages[k].sentences[i], per_page[k][i]) for k, i in tagged])
            for (k, i), sentence_links in zip(tagged, found):
                links[k][i] = sentence_links
        return [[(p.render(mine, mine_links), math.nan, 0)] for p, mine, mine_links in zip(pages, per_page, links)]

    def detect_source(self, texts: list[str]) -> list[dict[str, Any]]:
        """`source: auto`: each text's language (aiayn.data.language); one the model does not read, when the
        identifier finds the source language far less likely (AUTO_REFUSE), is a 400 that names it. A text
        without letters has nothing to detect, and a short one ("Hallo", "Ein Hund.") is often ranked another
        language just ahead of the source's: both are read as the source language, with its probability."""
        s = self.settings
        out = []
        for text in texts:
            ranked = detect(text, top=200)
            lang, p = ranked[0]
            own = dict(ranked).get(s.source_lang, 0.0)
            if not any(c.isalpha() for c in text) or (lang != s.source_lang and own >= AUTO_REFUSE * p):
                lang, p = s.source_lang, own
            elif lang != s.source_lang:
                raise ApiError(
                    400,
                    f"detected language {LANGUAGE_NAMES.get(lang, lang)} ({lang}, confidence {100 * p:.1f}); "
                    f"this server translates {LANGUAGE_NAMES.get(s.source_lang, s.source_lang)} ({s.source_lang}) "
                    f"to {LANGUAGE_NAMES.get(s.target_lang, s.target_lang)} ({s.target_lang})",
                )
            out.append({"confidence": round(100 * p, 2), "language": lang})
        return out


async def _service(request: Request) -> Service:  # async: a plain def would run on a thread, a hop per request
    return request.app.state.service


Svc = Annotated[Service, Depends(_service)]

# -- LibreTranslate ----------------------------------------------------------------------------------

libre_router = APIRouter()


@libre_router.post("/translate")
async def translate(request: Request, svc: Svc) -> JSONResponse:
    s = svc.settings
    fields = await svc.read_fields(request)
    svc.check_key(request, fields)
    # untrusted JSON or form values, checked one by one below
    q: Any = fields.get("q")
    source: Any = fields.get("source")
    target: Any = fields.get("target")
    for name, value in (("q", q), ("source", source), ("target", target)):
        if value is None or value == "" or value == []:
            raise ApiError(400, f"Invalid request: missing {name} parameter")
    batch = isinstance(q, list)
    if not (isinstance(q, str) or (batch and all(isinstance(x, str) for x in q))):
        raise ApiError(400, "Invalid request: q must be a string or a list of strings")
    if not isinstance(source, str) or source not in (s.source_lang, "auto"):
        raise ApiError(400, f"{_one_line(source)} is not supported")
    if not isinstance(target, str) or target != s.target_lang:
        raise ApiError(400, f"{_one_line(target)} is not supported")
    fmt = fields.get("format") or "text"
    if fmt not in ("text", "html"):
        raise ApiError(400, f"{_one_line(fmt)} format is not supported")
    alternatives = fields.get("alternatives", 0)
    try:
        alternatives = int(alternatives)
    except (TypeError, ValueError):
        raise ApiError(400, "Invalid request: alternatives must be an integer") from None
    if not 0 <= alternatives < MAX_BEAM:
        raise ApiError(400, f"Invalid request: alternatives must lie in 0..{MAX_BEAM - 1}")
    texts = q if batch else [q]
    svc.check_limits(texts)
    if fmt == "html":
        if alternatives:
            raise ApiError(400, "Invalid request: alternatives are not supported with format html")
        pages = svc.parse_html(texts)
        detected = svc.detect_source([" ".join(p.sentences) for p in pages]) if source == "auto" else None
        nbest = await svc.render_html(pages, svc.default_options())
    else:
        detected = svc.detect_source(texts) if source == "auto" else None
        beam = max(s.beam, alternatives + 1)
        opts = SearchOptions(beam, s.length_penalty, s.max_len_a, s.max_len_b, n_best=alternatives + 1)
        _, nbest = await svc.run_texts(texts, opts, s.split_sentences)
    best = [h[0][0] for h in nbest]
    out: dict[str, Any] = {"translatedText": best if batch else best[0]}
    if alternatives:
        alts = [[t for t, _, _ in h[1:]] for h in nbest]
        out["alternatives"] = alts if batch else alts[0]
    if detected is not None:
        out["detectedLanguage"] = detected if batch else detected[0]
    return JSONResponse(out)


@libre_router.post("/detect")
async def detect_languages(request: Request, svc: Svc) -> JSONResponse:
    """LibreTranslate's /detect: [{"confidence": 0..100, "language": code}], best first (its top 3;
    q a list: one such list per text)."""
    fields = await svc.read_fields(request)
    svc.check_key(request, fields)
    q: Any = fields.get("q")
    if q is None or q == "" or q == []:
        raise ApiError(400, "Invalid request: missing q parameter")
    batch = isinstance(q, list)
    if not (isinstance(q, str) or (batch and all(isinstance(x, str) for x in q))):
        raise ApiError(400, "Invalid request: q must be a string or a list of strings")
    texts = q if batch else [q]
    svc.check_limits(texts)
    found = [[{"confidence": round(100 * p, 2), "language": lang} for lang, p in detect(t)] for t in texts]
    return JSONResponse(found if batch else found[0])


@libre_router.get("/languages")
async def languages(svc: Svc) -> JSONResponse:
    s = svc.settings
    pair = [(s.source_lang, [s.target_lang]), (s.target_lang, [])]
    return JSONResponse([{"code": c, "name": LANGUAGE_NAMES.get(c, c), "targets": t} for c, t in pair])


@libre_router.get("/frontend/settings")
async def frontend_settings(svc: Svc) -> JSONResponse:  # what LibreTranslate's clients ask a server first
    s = svc.settings
    return JSONResponse(
        {
            "charLimit": s.char_limit,
            "apiKeys": s.api_key is not None,
            "keyRequired": s.api_key is not None,
            "language": {"source": {"code": s.source_lang}, "target": {"code": s.target_lang}},
            "filesTranslation": True,
            "supportedFilesFormat": sorted(FILE_TYPES),
        }
    )


# -- LibreTranslate's files --------------------------------------------------------------------------

files_router = APIRouter()


@files_router.post("/translate_file")
async def translate_file(request: Request, svc: Svc) -> JSONResponse:
    """LibreTranslate's file translation: .txt (sentences, the layout kept), .html/.htm (as format
    html), .docx and .pptx (each paragraph as an HTML paragraph, its runs' formatting carried over); the
    answer names where to download the result (/download_file), kept in memory for FILE_TTL_S, the
    newest MAX_FILES of them."""
    s = svc.settings
    fields, filename, data = await svc.read_upload(request)
    svc.check_key(request, fields)
    source, target = fields.get("source"), fields.get("target")
    for name, value in (("source", source), ("target", target)):
        if not value:
            raise ApiError(400, f"Invalid request: missing {name} parameter")
    if source not in (s.source_lang, "auto"):
        raise ApiError(400, f"{_one_line(source)} is not supported")
    if target != s.target_lang:
        raise ApiError(400, f"{_one_line(target)} is not supported")
    ext = Path(filename).suffix.lower()
    if ext not in FILE_TYPES:
        raise ApiError(
            400,
            f"Invalid request: file format {_one_line(ext or filename)} is not supported "
            f"({', '.join(sorted(FILE_TYPES))})",
        )
    opts = svc.default_options()
    if FILE_TYPES[ext] in KINDS:
        try:
            doc = OfficeDocument(data, FILE_TYPES[ext], s.source_lang, s.target_lang, s.sentence_starts)
        except (OfficeError, LxmlError) as e:
            raise ApiError(400, f"Invalid request: cannot read the {ext} ({_one_line(e)})") from None
        text = " ".join(doc.page.sentences)
        svc.check_limits([text])
        if source == "auto":
            svc.detect_source([text])
        rendered = (await svc.render_html([doc.page], opts))[0][0][0]
        try:
            out = doc.rebuild(rendered)
        except OfficeError as e:  # a picture or another part that cannot be unpacked
            raise ApiError(400, f"Invalid request: cannot read the {ext} ({_one_line(e)})") from None
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ApiError(400, "Invalid request: the file is not UTF-8 text") from None
        svc.check_limits([text])
        if FILE_TYPES[ext] == "html":
            pages = svc.parse_html([text])
            if source == "auto":
                svc.detect_source([" ".join(pages[0].sentences)])
            out = (await svc.render_html(pages, opts))[0][0][0].encode("utf-8")
        else:
            if source == "auto":
                svc.detect_source([text])
            out = (await svc.run_texts([text], opts, s.split_sentences))[1][0][0][0].encode("utf-8")
    name = f"{secrets.token_urlsafe(16)}.{_safe_name(filename)}"
    if not svc.files.put(name, out):
        raise ApiError(413, f"Invalid request: the translated file is over the {svc.files.max_bytes} bytes kept")
    return JSONResponse({"translatedFileUrl": str(request.base_url) + "download_file/" + name})


@files_router.get("/download_file/{name}")
async def download_file(name: str, svc: Svc) -> Response:
    data = svc.files.get(name)
    if data is None:
        raise ApiError(404, "Invalid request: no such file (or it has expired)")
    kind = FILE_TYPES.get(Path(name).suffix.lower(), "text")
    original = name.split(".", 1)[1]
    headers = {"Content-Disposition": f'attachment; filename="{original}"', "X-Content-Type-Options": "nosniff"}
    if kind == "html":  # an uploaded page opened from this origin runs no script and reaches nothing of the server's
        headers["Content-Security-Policy"] = "sandbox"
    return Response(data, media_type=MEDIA_TYPES[kind], headers=headers)


# -- aiayn's own -------------------------------------------------------------------------------------

v1_router = APIRouter(prefix="/v1")


@v1_router.post("/translate")
async def v1_translate(request: Request, svc: Svc) -> JSONResponse:
    fields = await svc.read_fields(request)
    svc.check_key(request, fields)
    req = _validated(V1Translate, fields)
    texts = [req.q] if isinstance(req.q, str) else req.q
    svc.check_limits(texts)
    opts = svc.options(req)
    if req.split and opts.n_best > 1:
        raise ApiError(422, "Invalid request: n_best > 1 needs split false (one sentence per text)")
    if not req.split:
        translations = [
            {
                "text": h[0][0],
                "score": _score(h[0][1]),
                "nbest": [{"text": t, "score": _score(sc)} for t, sc, _ in h],
            }
            for h in await svc.run(texts, opts)
        ]
    else:  # each text's sentences and the whitespace between them: the page shows and links them
        docs = split_texts(texts, svc.settings.source_lang, starts=svc.settings.sentence_starts)
        nbest = await svc.run(docs.sentences, opts)
        joined, at, translations = docs.join([h[0][0] for h in nbest]), 0, []
        for text, part in zip(joined, docs.parts):
            mine = nbest[at : at + len(part.sentences)]
            at += len(part.sentences)
            translations.append(
                {
                    "text": text,
                    "score": None,
                    "nbest": [{"text": text, "score": None}],
                    "sentences": [
                        {"source": src, "text": h[0][0], "score": _score(h[0][1])}
                        for src, h in zip(part.sentences, mine)
                    ],
                    "gaps": part.gaps,
                }
            )
    return JSONResponse({"translations": translations, "beam": opts.beam, "backend": svc.backend.name})


@v1_router.post("/attention")
async def v1_attention(request: Request, svc: Svc) -> JSONResponse:
    fields = await svc.read_fields(request)
    svc.check_key(request, fields)
    req = _validated(V1Attention, fields)
    svc.check_limits([req.q])
    if not req.q.strip():
        raise ApiError(400, "Invalid request: missing q parameter")
    opts = svc.options(req)
    att = getattr(svc.backend, "attention", None)
    if att is None:
        raise ApiError(501, f"the {svc.backend.name} backend does not report attention")
    return JSONResponse(await svc.batcher.run_exclusive(lambda: att(req.q, opts)))


def _validated(model: type[BaseModel], fields: dict[str, Any]) -> Any:
    try:
        return model.model_validate(fields)
    except ValidationError as e:
        raise ApiError(422, "Invalid request: " + _first_error(e.errors())) from None


# -- operations and the web page ---------------------------------------------------------------------

ops_router = APIRouter()


@ops_router.get("/health")
async def health(svc: Svc) -> JSONResponse:
    alive = svc.batcher.alive
    return JSONResponse(
        {
            "status": "ok" if alive else "worker stopped",
            "backend": svc.backend.name,
            "queued_sentences": svc.batcher.queued,
        },
        status_code=200 if alive else 503,
    )


@ops_router.get("/metrics")
async def prometheus(svc: Svc) -> Response:
    return Response(generate_latest(svc.metrics.registry), media_type=CONTENT_TYPE_LATEST)


page_router = APIRouter()


@page_router.get("/")
async def index() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html")


FILE_TYPES = {".txt": "text", ".html": "html", ".htm": "html", ".docx": "docx", ".pptx": "pptx"}
MEDIA_TYPES = {
    "text": "text/plain; charset=utf-8",
    "html": "text/html; charset=utf-8",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
}
MAX_FILES = 256  # translated files kept for /download_file: memory stays bounded, by count and by size
MAX_FILE_BYTES = 64 << 20
FILE_TTL_S = 3600.0


class _Files:
    """Translated files by name, the newest MAX_FILES holding at most `max_bytes` together, each for
    FILE_TTL_S (LibreTranslate keeps them in a temporary directory for a while as well)."""

    def __init__(self, max_bytes: int = MAX_FILE_BYTES) -> None:
        self.items: dict[str, tuple[float, bytes]] = {}
        self.max_bytes = max_bytes
        self.bytes = 0

    def put(self, name: str, data: bytes) -> bool:
        """Keep `data` under `name`, dropping the oldest as needed; False: it alone is over the budget."""
        if len(data) > self.max_bytes:
            return False
        now = time.monotonic()
        for k in [k for k, v in self.items.items() if now - v[0] >= FILE_TTL_S]:
            self._drop(k)
        while self.items and (len(self.items) >= MAX_FILES or self.bytes + len(data) > self.max_bytes):
            self._drop(next(iter(self.items)))  # the oldest: dicts keep insertion order
        self.items[name] = (now, data)
        self.bytes += len(data)
        return True

    def _drop(self, name: str) -> None:
        self.bytes -= len(self.items.pop(name)[1])

    def get(self, name: str) -> bytes | None:
        item = self.items.get(name)
        return item[1] if item is not None and time.monotonic() - item[0] < FILE_TTL_S else None


def _safe_name(filename: str) -> str:
    """The upload's base name with only ASCII letters, digits, '.', '-' and '_' (it goes into a URL)."""
    base = Path(filename.replace("\\", "/")).name
    return "".join(c if (c.isascii() and c.isalnum()) or c in ".-_" else "_" for c in base)[-100:] or "file.txt"


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value


def _score(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 4)  # JSON has no NaN: greedy search has no score


def _one_line(x: Any) -> str:
    return str(x).replace("\n", " ")[:200]


def _first_error(errors: Sequence[Any]) -> str:
    """Pydantic's first complaint as `field: message` (the full list would drown the one that matters)."""
    if not errors:
        return "invalid body"
    e = errors[0]
    where = ".".join(str(p) for p in e.get("loc", ()) if p not in ("body",))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {e.get('msg', 'invalid')}{more}" if where else f"{e.get('msg', 'invalid')}{more}"
