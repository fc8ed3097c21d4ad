"""`aiayn serve` on a run of a task other than translation: the predictor its TaskSpec builds, the same
one `aiayn predict` runs, behind one JSON endpoint.

    POST /v1/predict  {"q": str | [str], "api_key": ...} -> {"task": "mlm", "predictions": [one per text]}
    GET  /health      {"status": "ok", "task": "mlm"}

A prediction is what `aiayn predict` prints for that line: a string (a label, a continuation, a tree)
or a JSON value (mlm: per [MASK], its candidates). Errors, the body / text / character limits and the
API key are the translation server's (aiayn.serve.app); an input the predictor refuses (a text without
[MASK] for mlm) is 422 with its one-line reason. One batch runs at a time, on a worker thread, so the
event loop keeps answering /health while the model works.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError
from starlette.concurrency import run_in_threadpool

from aiayn.errors import AiaynError
from aiayn.serve.http import ApiError, Requests, add_error_handlers
from aiayn.serve.settings import ServeSettings
from aiayn.train.tasks.spec import Predict


class PredictRequest(BaseModel):
    """Strict types, unknown fields refused (as /v1/translate)."""

    model_config = ConfigDict(extra="forbid")
    q: StrictStr | list[StrictStr]
    api_key: StrictStr | None = None


def create_task_app(task: str, predict: Predict, settings: ServeSettings | None = None) -> FastAPI:
    """The FastAPI app serving `predict`, the predictor of a run of task `task`."""
    requests = Requests(settings or ServeSettings())
    one_at_a_time = asyncio.Lock()
    app = FastAPI(title=f"aiayn serve ({task})", docs_url="/docs", redoc_url=None)
    add_error_handlers(app)

    @app.post("/v1/predict")
    async def v1_predict(request: Request) -> JSONResponse:
        fields = await requests.read_fields(request)
        requests.check_key(request, fields)
        try:
            req = PredictRequest.model_validate(fields)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise ApiError(422, f"Invalid request: {where}: {first.get('msg', 'invalid')}") from None
        texts = [req.q] if isinstance(req.q, str) else req.q
        requests.check_limits(texts)
        async with one_at_a_time:
            try:
                out: list[Any] = await run_in_threadpool(predict, texts) if texts else []
            except AiaynError as e:
                raise ApiError(422, f"Invalid request: {e}") from None
        return JSONResponse({"task": task, "predictions": out})

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "ok", "task": task})

    return app
