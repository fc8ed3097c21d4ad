"""HTTP for every endpoint of `aiayn serve`: LibreTranslate's error shape ({"error": "one line"}) for every
failure, and reading a request (its body within the limit, JSON or form fields, a multipart upload, the
API key, the text limits) before any model sees it."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from aiayn.serve.settings import ServeSettings

log = logging.getLogger("aiayn.serve")


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def add_error_handlers(app: FastAPI) -> None:
    """Every failure answers LibreTranslate's {"error": "one line"}."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError) -> JSONResponse:
        return error(e.status, e.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        return error(e.status_code, str(e.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError) -> JSONResponse:
        return error(422, "Invalid request: " + first_error(e.errors()))

    @app.exception_handler(Exception)
    async def _internal(request: Request, e: Exception) -> JSONResponse:
        log.exception("internal error on %s", request.url.path)
        return error(500, f"internal error: {type(e).__name__}")


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
            raise ApiError(400, f"Invalid request: body is not valid JSON ({one_line(e)})") from None
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
            raise ApiError(400, f"Invalid request: {one_line(e.message)}") from None
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

    def check_languages(self, fields: dict[str, Any]) -> bool:
        """Whether the request's source is "auto"; its source and target must be the server's languages."""
        source, target = fields.get("source"), fields.get("target")
        if not isinstance(source, str) or source not in (self.settings.source_lang, "auto"):
            raise ApiError(400, f"{one_line(source)} is not supported")
        if not isinstance(target, str) or target != self.settings.target_lang:
            raise ApiError(400, f"{one_line(target)} is not supported")
        return source == "auto"

    def check_limits(self, texts: list[str]) -> None:
        s = self.settings
        if s.batch_limit >= 0 and len(texts) > s.batch_limit:
            raise ApiError(413, f"Invalid request: request ({len(texts)}) exceeds text limit ({s.batch_limit})")
        chars = sum(len(t) for t in texts)
        if s.char_limit >= 0 and chars > s.char_limit:
            raise ApiError(413, f"Invalid request: request ({chars}) exceeds character limit ({s.char_limit})")


def required(fields: dict[str, Any], *names: str) -> None:
    """LibreTranslate's 400 for the first of the fields `names` that is missing or empty."""
    for name in names:
        value = fields.get(name)
        if value is None or value == "" or value == []:
            raise ApiError(400, f"Invalid request: missing {name} parameter")


def texts_of(q: Any) -> tuple[list[str], bool]:
    """LibreTranslate's q (an untrusted JSON or form value) -> (the texts, whether q was a list)."""
    batch = isinstance(q, list)
    if not (isinstance(q, str) or (batch and all(isinstance(x, str) for x in q))):
        raise ApiError(400, "Invalid request: q must be a string or a list of strings")
    return (q if batch else [q]), batch


def validated(model: type[BaseModel], fields: dict[str, Any]) -> Any:
    try:
        return model.model_validate(fields)
    except ValidationError as e:
        raise ApiError(422, "Invalid request: " + first_error(e.errors())) from None


def one_line(x: Any) -> str:
    return str(x).replace("\n", " ")[:200]


def first_error(errors: Sequence[Any]) -> str:
    """Pydantic's first complaint as `field: message` (the full list would drown the one that matters)."""
    if not errors:
        return "invalid body"
    e = errors[0]
    where = ".".join(str(p) for p in e.get("loc", ()) if p not in ("body",))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {e.get('msg', 'invalid')}{more}" if where else f"{e.get('msg', 'invalid')}{more}"
