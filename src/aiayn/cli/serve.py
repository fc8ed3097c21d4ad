"""`aiayn serve`: parsing only; the server lives in aiayn.serve.app, the model in aiayn.serve.engines."""

from __future__ import annotations

import argparse
from typing import Any

from aiayn.cli._args import same_named
from aiayn.cli.translate import add_engine_arg
from aiayn.config import DecodeConfig


def _serve(a: argparse.Namespace) -> int:
    from aiayn.errors import AiaynError

    try:
        import uvicorn  # noqa: F401  (here: a missing extra is one line before any model loads)

        from aiayn.serve.app import create_app  # noqa: F401  (translation's server: serve_translations)
        from aiayn.serve.engines import load_engine  # noqa: F401
        from aiayn.serve.settings import ServeSettings
    except ImportError as e:
        raise AiaynError(
            f"aiayn serve needs the serve extra ({e.name} is missing): pip install 'aiayn[serve]'"
        ) from None
    from aiayn.checkpoint import find_in_run
    from aiayn.config import Config, DataConfig
    from aiayn.data.sentence_starts import SentenceStarts, run_sentence_starts
    from aiayn.hub import resolve_run
    from aiayn.train.tasks import run_spec

    run = resolve_run(a.checkpoint)  # hf://user/model -> its directory in the HF cache
    spec = run_spec(str(run))
    found = find_in_run(run, "config.yaml")
    cfg = Config.load(str(found)) if found else None
    d = cfg.decode if cfg else DecodeConfig()
    data = cfg.data if cfg else DataConfig()
    beam = a.beam if a.beam is not None else d.beam
    max_batch_tokens = a.max_batch_tokens if a.max_batch_tokens is not None else d.max_tokens
    if beam < 1 or max_batch_tokens < 1 or a.max_wait_ms < 0 or not 0 < a.port < 65536:
        raise AiaynError("need --beam >= 1, --max-batch-tokens >= 1, --max-wait-ms >= 0 and a port in 1..65535")
    source_lang = a.source_lang or data.src_lang
    settings = ServeSettings(
        source_lang=source_lang,
        target_lang=a.target_lang or data.tgt_lang,
        beam=beam,
        length_penalty=d.length_penalty,
        max_len_a=d.max_len_a,
        max_len_b=d.max_len_b,
        max_batch_tokens=max_batch_tokens,
        body_limit=a.max_body_bytes,
        **same_named(a, "max_wait_ms", "adaptive_wait", "batching", "char_limit", "batch_limit", "sentence_limit"),
        **same_named(a, "api_key", "split_sentences"),
        sentence_starts=run_sentence_starts(run, source_lang) if a.run_on_cuts else SentenceStarts(),
    )
    return int(spec.serve(a, run, spec, settings))  # the task's server: translation's, or its predictor's


def serve_translations(a: argparse.Namespace, run: Any, spec: Any, settings: Any) -> int:
    """The translate TaskSpec's `serve`: the translation server (LibreTranslate's API, /v1, the web page)."""
    from aiayn.cli.translate import say_engine
    from aiayn.serve.app import create_app
    from aiayn.serve.engines import load_engine

    engine = load_engine(a.engine, run, device=a.device, threads=a.threads, workers=a.workers)
    say_engine(engine.translator)
    app = create_app(engine, settings)
    print(
        f"aiayn serve: {a.checkpoint} ({engine.name}, {engine.workers} worker{'s' if engine.workers > 1 else ''}, "
        f"{settings.source_lang}->{settings.target_lang}, beam {settings.beam}) "
        f"on http://{a.host}:{a.port}",
        flush=True,
    )
    return _listen(app, a)


def _listen(app: Any, a: argparse.Namespace) -> int:
    import uvicorn

    # SIGTERM / Ctrl-C: uvicorn stops accepting, answers the requests in flight, then runs the
    # app's shutdown (which stops the batching worker).
    uvicorn.run(
        app,
        host=a.host,
        port=a.port,
        log_level=a.log_level,
        timeout_graceful_shutdown=a.grace_s,
        limit_concurrency=a.max_connections,
    )
    return 0


def serve_predictions(a: argparse.Namespace, run: Any, spec: Any, settings: Any) -> int:
    """A TaskSpec's `serve` by default: its predictor at POST /v1/predict (aiayn.serve.tasks), or a one-line
    refusal for a task without one. The translation flags (beam, engine, batching) do not apply."""
    from aiayn.errors import AiaynError
    from aiayn.serve.tasks import create_task_app

    if spec.predictor is None:
        raise AiaynError(
            f"aiayn serve: task {spec.name} has no predictor to serve (its TaskSpec builds none); "
            "it serves translation runs and the runs of tasks with a predictor"
        )
    app = create_task_app(spec.name, spec.predictor(str(run), a.device), settings)
    print(f"aiayn serve: {a.checkpoint} (task {spec.name}: POST /v1/predict) on http://{a.host}:{a.port}", flush=True)
    return _listen(app, a)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="HTTP translation server (LibreTranslate API + /v1) with a web page; for a run of another task, "
        "its predictor at POST /v1/predict (what aiayn predict prints, as JSON)",
    )
    p.add_argument(
        "-c",
        "--checkpoint",
        required=True,
        metavar="RUN",
        help="run directory, weights file, a CTranslate2 export (aiayn export --ctranslate2) or "
        "hf://user/model[@REVISION] (the Hugging Face Hub)",
    )
    add_engine_arg(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=5000, help="default 5000 (LibreTranslate's)")
    _add_batching_args(p)
    _add_limit_args(p)
    _add_process_args(p)
    p.set_defaults(run=_serve)


def _add_batching_args(p: argparse.ArgumentParser) -> None:
    """How sentences are searched and share batches."""
    p.add_argument(
        "--beam",
        type=int,
        help=f"beam size for /translate and /v1's default (default: the run's, else {DecodeConfig.beam})",
    )
    p.add_argument(
        "--max-batch-tokens",
        type=int,
        help=f"budget of one decoded batch: sentences x longest source x beam (default: the run's "
        f"decode.max_tokens, else {DecodeConfig.max_tokens}, as aiayn translate --max-tokens)",
    )
    p.add_argument(
        "--max-wait-ms",
        type=float,
        default=10.0,
        help="longest a sentence waits for others to share its batch (default 10; 0 = no waiting)",
    )
    p.add_argument(
        "--no-adaptive-wait",
        dest="adaptive_wait",
        action="store_false",
        help="every batch waits out --max-wait-ms, even when nothing else is queued or decoding (default: a "
        "request that finds the server idle starts at once)",
    )
    p.add_argument(
        "--batching",
        default="continuous",
        choices=["continuous", "whole"],
        help="continuous (default): greedy searches join and leave a running batch at every decoder "
        "step (torch engine; CTranslate2 decodes whole batches); whole: every batch is decoded to its end "
        "before the next starts",
    )


def _add_limit_args(p: argparse.ArgumentParser) -> None:
    """What one request may ask, and how its texts reach the model."""
    p.add_argument(
        "--char-limit",
        type=int,
        default=5000,
        help="characters per request, over all its sentences; -1 = none (default 5000)",
    )
    p.add_argument("--batch-limit", type=int, default=64, help="texts (q items) per request; -1 = none (default 64)")
    p.add_argument(
        "--sentence-limit",
        type=int,
        default=512,
        help="sentences per request once its texts are split; -1 = none (default 512)",
    )
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="request body limit (default 1 MiB)")
    p.add_argument(
        "--api-key",
        default=None,
        help="require this key (api_key field, X-API-Key or Authorization: Bearer) on translations",
    )
    p.add_argument(
        "--no-split-sentences",
        dest="split_sentences",
        action="store_false",
        help="hand each text of /translate to the model whole (default: cut into sentences, decoded in one batch, "
        "rejoined with the text's whitespace, as LibreTranslate does)",
    )
    p.add_argument(
        "--no-run-on-cuts",
        dest="run_on_cuts",
        action="store_false",
        help="cut sentences at punctuation and line breaks only (default: also where a sentence without a final "
        "stop runs into one that starts with a word the run learnt to start sentences; docs/serving.md)",
    )
    p.add_argument("--source-lang", help="language code reported and accepted (default: the run's data.src_lang)")
    p.add_argument("--target-lang", help="(default: the run's data.tgt_lang)")


def _add_process_args(p: argparse.ArgumentParser) -> None:
    """The device, threads and workers, connections and shutdown of the server process."""
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda if present)")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="intra-op threads of torch / CTranslate2 (default 0: the library's choice; CTranslate2 on the "
        "CPU with --workers 0: 1 per worker)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="batches decoded at once (CTranslate2 only; default 0: one per CPU core for CTranslate2 on the "
        "CPU when --threads is 0, else 1)",
    )
    p.add_argument(
        "--max-connections", type=int, default=1000, help="open connections beyond this get 503 (default 1000)"
    )
    p.add_argument(
        "--grace-s",
        type=float,
        default=30.0,
        help="on SIGTERM, how long in-flight requests may take to finish (default 30)",
    )
    p.add_argument("--log-level", default="warning", help="uvicorn's log level (default warning)")
