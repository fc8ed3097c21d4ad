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
503 queue full. Bodies are read and parsed by aiayn.serve.http (not by FastAPI's model binding) so the
body limit holds before anything is parsed and every parse failure becomes one of those answers; the
routes here read their fields and call the one `Service` (aiayn.serve.service).
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path, PurePath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from aiayn.documents.formats import FORMATS, format_of
from aiayn.documents.language import LANGUAGE_NAMES
from aiayn.errors import AiaynError
from aiayn.serve.batcher import Batcher, Engine
from aiayn.serve.files import MEDIA_TYPES, Files, safe_name
from aiayn.serve.http import ApiError, add_error_handlers, one_line, required, texts_of, validated
from aiayn.serve.metrics import Measure, Metrics
from aiayn.serve.service import MAX_BEAM, Service, V1Attention, V1Translate
from aiayn.serve.settings import ServeSettings

log = logging.getLogger("aiayn.serve")
STATIC = Path(__file__).parent / "static"


def create_app(engine: Engine, settings: ServeSettings | None = None) -> FastAPI:
    """The FastAPI app serving `engine`; its lifespan starts and stops the batching worker. The routes
    live in five routers below (LibreTranslate's API, its files, aiayn's /v1, operations, the web page);
    what they share is one `Service` in app.state."""
    s = settings or ServeSettings()
    metrics = Metrics()
    if s.batching not in ("continuous", "whole"):
        raise AiaynError(f"batching must be continuous or whole, not {s.batching!r}")
    batcher = Batcher(
        engine,
        s.max_batch_tokens,
        s.max_wait_ms,
        observer=metrics.observe_batch,
        continuous=s.batching == "continuous",
        workers=engine.workers,
        adaptive=s.adaptive_wait,
    )
    metrics.queue.set_function(lambda: batcher.queued)
    service = Service(s, engine, batcher, metrics, Files())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        try:
            yield
        finally:  # uvicorn has answered the in-flight requests by now (graceful shutdown)
            batcher.close()
            engine.close()

    app = FastAPI(title="aiayn serve", lifespan=lifespan, docs_url="/docs", redoc_url=None)
    app.state.service = service
    app.state.batcher, app.state.metrics, app.state.settings = batcher, metrics, s
    add_error_handlers(app)
    routers = (libre_router, files_router, v1_router, ops_router, page_router)
    for router in routers:
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    # the metrics count these paths by name, any other as "other" (a path with a parameter: never the same)
    known = {r.path for router in routers for r in router.routes if isinstance(r, APIRoute) and "{" not in r.path}
    app.add_middleware(Measure, metrics=metrics, known=known)
    return app


async def _service(request: Request) -> Service:  # async: a plain def would run on a thread, a hop per request
    return request.app.state.service


Svc = Annotated[Service, Depends(_service)]


# -- LibreTranslate ----------------------------------------------------------------------------------

libre_router = APIRouter()


@libre_router.post("/translate")
async def translate(request: Request, svc: Svc) -> JSONResponse:
    fields = await svc.read_fields(request)
    svc.check_key(request, fields)
    required(fields, "q", "source", "target")
    texts, batch = texts_of(fields["q"])
    auto = svc.check_languages(fields)
    fmt = fields.get("format") or "text"
    if fmt not in ("text", "html"):
        raise ApiError(400, f"{one_line(fmt)} format is not supported")
    try:
        alternatives = int(fields.get("alternatives", 0))
    except (TypeError, ValueError):
        raise ApiError(400, "Invalid request: alternatives must be an integer") from None
    if not 0 <= alternatives < MAX_BEAM:
        raise ApiError(400, f"Invalid request: alternatives must lie in 0..{MAX_BEAM - 1}")
    svc.check_limits(texts)
    best, others, detected = await svc.translate_texts(texts, fmt, auto, alternatives)
    out: dict[str, Any] = {"translatedText": best if batch else best[0]}
    if alternatives:
        out["alternatives"] = others if batch else others[0]
    if detected is not None:
        out["detectedLanguage"] = detected if batch else detected[0]
    return JSONResponse(out)


@libre_router.post("/detect")
async def detect_languages(request: Request, svc: Svc) -> JSONResponse:
    """LibreTranslate's /detect: [{"confidence": 0..100, "language": code}], best first (its top 3;
    q a list: one such list per text)."""
    fields = await svc.read_fields(request)
    svc.check_key(request, fields)
    required(fields, "q")
    texts, batch = texts_of(fields["q"])
    svc.check_limits(texts)
    found = svc.detect_languages(texts)
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
            "supportedFilesFormat": sorted(FORMATS),
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
    fields, filename, data = await svc.read_upload(request)
    svc.check_key(request, fields)
    required(fields, "source", "target")
    auto = svc.check_languages(fields)
    ext, fmt = PurePath(filename).suffix.lower(), format_of(filename)
    if fmt is None:
        raise ApiError(
            400,
            f"Invalid request: file format {one_line(ext or filename)} is not supported ({', '.join(sorted(FORMATS))})",
        )
    out = await svc.translate_file(data, fmt, ext, auto)
    name = f"{secrets.token_urlsafe(16)}.{safe_name(filename)}"
    if not svc.files.put(name, out):
        raise ApiError(413, f"Invalid request: the translated file is over the {svc.files.max_bytes} bytes kept")
    return JSONResponse({"translatedFileUrl": str(request.base_url) + "download_file/" + name})


@files_router.get("/download_file/{name}")
async def download_file(name: str, svc: Svc) -> Response:
    data = svc.files.get(name)
    if data is None:
        raise ApiError(404, "Invalid request: no such file (or it has expired)")
    kind = format_of(name) or "text"
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
    req = validated(V1Translate, fields)
    texts = [req.q] if isinstance(req.q, str) else req.q
    svc.check_limits(texts)
    opts = svc.options(req)
    if req.split and opts.n_best > 1:
        raise ApiError(422, "Invalid request: n_best > 1 needs split false (one sentence per text)")
    translations: list[dict[str, Any]]
    if not req.split:
        translations = [
            {
                "text": h[0].text,
                "score": _score(h[0].score),
                "nbest": [{"text": x.text, "score": _score(x.score)} for x in h],
            }
            for h in await svc.run(texts, opts)
        ]
    else:  # each text's sentences and the whitespace between them: the page shows and links them
        translations = [
            {
                "text": done.renders[0],
                "score": None,
                "nbest": [{"text": done.renders[0], "score": None}],
                "sentences": [
                    {"source": src, "text": h[0].text, "score": _score(h[0].score)}
                    for src, h in zip(doc.sentences, done.hypotheses)
                ],
                "gaps": doc.gaps,
            }
            for doc, done in await svc.translate_split(texts, opts)
        ]
    return JSONResponse({"translations": translations, "beam": opts.beam, "backend": svc.engine.name})


@v1_router.post("/attention")
async def v1_attention(request: Request, svc: Svc) -> JSONResponse:
    fields = await svc.read_fields(request)
    svc.check_key(request, fields)
    req = validated(V1Attention, fields)
    svc.check_limits([req.q])
    if not req.q.strip():
        raise ApiError(400, "Invalid request: missing q parameter")
    return JSONResponse(await svc.attention(req.q, svc.options(req)))


# -- operations and the web page ---------------------------------------------------------------------

ops_router = APIRouter()


@ops_router.get("/health")
async def health(svc: Svc) -> JSONResponse:
    alive = svc.batcher.alive
    return JSONResponse(
        {
            "status": "ok" if alive else "worker stopped",
            "backend": svc.engine.name,
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


def _score(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 4)  # JSON has no NaN: greedy search has no score
