"""The server's Prometheus metrics (a registry of the app's own) and the middleware that counts each request
by endpoint and status and times it."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from aiayn.serve.batcher import BatchStats


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


class Measure:
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
