"""Load test of `aiayn serve`: N concurrent clients for T seconds, batching on and off, then a fuzz phase.

    python bench/serve_load.py -c RUN --clients 32 --seconds 20

For each mode the script starts `aiayn serve` on a free 127.0.0.1 port (a subprocess), lets N
asyncio+httpx clients each send one Multi30k test sentence per request, back to back, for T
seconds, and reports sentences/s, target tokens/s (the server's own counter), latency p50/p95/p99,
errors and the server's RSS sampled every second. Modes:

- batched:       --max-wait-ms 5 --max-batch-tokens 8192 (the serve defaults but a shorter window;
                 with --beam 1, continuous batching)
- whole-batches: the same with --batching whole (every batch decoded to its end: the server before
                 continuous batching; differs from `batched` with --beam 1 only)
- one-at-a-time: --max-wait-ms 0 --max-batch-tokens 1 (every sentence decoded alone)
- sequential:    one client (whatever --clients says), one request after another, the server's
                 defaults (its adaptive 10 ms window); sequential-no-wait: the same with --max-wait-ms 0
- libretranslate, libretranslate-sequential: LibreTranslate itself (--libretranslate: the executable of
                 its own venv) serving the run's Argos package (--argos-packages), N clients or one,
                 on /translate: the peer on the same model

--unit paragraph sends paragraphs of 1-5 consecutive test sentences (joined by a space or a newline)
to LibreTranslate's /translate, which cuts them into sentences; --unit html sends
bench/documents.py's HTML snippets (1-3 test sentences in a <p> with 1-3 inline tags) there with
format html; --api libretranslate sends single sentences there too (the default is /v1/translate).
Clients and server share the machine: each result says how many cores each used (`client_cores`,
`server_cores`); `--http aiohttp` drives the same load with about a twentieth of httpx's CPU a
request (0.23 against 5.4 ms here).

Then 1,000 malformed / oversized / random-bytes / wrong-type requests go to the batched server,
which must answer each with a 4xx and still pass /health. Results: printed, and JSON under
bench/results/. Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
MODES = {
    "batched": ["--max-wait-ms", "5", "--max-batch-tokens", "8192"],
    # one client, one request after another, the server's defaults (adaptive 10 ms window); and the
    # same with no window at all, the bound the adaptive window should reach
    "sequential": [],
    "sequential-no-wait": ["--max-wait-ms", "0"],
    "whole-batches": ["--max-wait-ms", "5", "--max-batch-tokens", "8192", "--batching", "whole"],
    "one-at-a-time": ["--max-wait-ms", "0", "--max-batch-tokens", "1"],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used, its threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def start_server(
    run: str, flags: list[str], beam: int, threads: int, engine: str, workers: int = 0
) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"aiayn-serve-{port}.log", "w+b")  # never a full pipe
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiayn",
            "serve",
            "-c",
            run,
            "--port",
            str(port),
            "--device",
            "cpu",
            "--beam",
            str(beam),
            "--threads",
            str(threads),
            "--engine",
            engine,
            "--workers",
            str(workers),
            *flags,
        ],
        env=env,
        stdout=log,
        stderr=log,
    )
    return proc, wait_until_up(proc, log, f"http://127.0.0.1:{port}", "/health", 120)


def wait_until_up(proc: subprocess.Popen, log: Any, url: str, path: str, seconds: float) -> str:
    """`url` once GET `path` answers 200; the end of the server's log if it exits or never answers."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise SystemExit(f"{proc.args[0]} exited: {log.read().decode()[-2000:]}")
        try:
            if httpx.get(url + path, timeout=1).status_code == 200:
                return url
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{url} did not come up in {seconds:g} s")


def start_libretranslate(executable: str, packages: str, threads: int) -> tuple[subprocess.Popen, str]:
    """LibreTranslate (its own venv's `libretranslate`) serving the Argos packages installed under
    `packages` (`aiayn export --argos`, then argostranslate.package.install_from_path with
    ARGOS_PACKAGES_DIR set), offline as docs/serving.md says: spaCy sentence chunking from the package,
    the package index pointed at a closed port."""
    port = free_port()
    env = {
        **os.environ,
        "ARGOS_PACKAGES_DIR": packages,
        "ARGOS_CHUNK_TYPE": "SPACY",
        "ARGOS_PACKAGE_INDEX": "http://127.0.0.1:9/",
        "ARGOS_DEVICE_TYPE": "cpu",
    }
    if threads:
        env["ARGOS_INTRA_THREADS"] = str(threads)
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"libretranslate-{port}.log", "w+b")
    cmd = [executable, "--host", "127.0.0.1", "--port", str(port), "--load-only", "de,en", "--disable-web-ui"]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log)
    return proc, wait_until_up(proc, log, f"http://127.0.0.1:{port}", "/languages", 300)


def paragraphs(sentences: list[str], seed: int = 0) -> list[tuple[str, int]]:
    """Consecutive test sentences grouped into paragraphs of 1-5, joined by a space or a newline (seeded):
    (text, sentences in it)."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(sentences):
        k = min(len(sentences) - i, rng.randint(1, 5))
        out.append((rng.choice([" ", "\n"]).join(sentences[i : i + k]), k))
        i += k
    return out


def html_pages(sentences: list[str], seed: int = 0) -> list[tuple[str, int]]:
    """bench/documents.py's snippets over consecutive test sentences: (page, sentences in it)."""
    from documents import snippet  # bench/documents.py, beside this script

    rng = random.Random(seed)
    out, i = [], 0
    while i < len(sentences):
        k = min(len(sentences) - i, rng.randint(1, 3))
        out.append((snippet(sentences[i : i + k], rng), k))
        i += k
    return out


async def load(
    url: str,
    sentences: list[str],
    clients: int,
    seconds: float,
    pid: int,
    unit: str = "sentence",
    api: str = "v1",
    http: str = "httpx",
) -> dict:
    """`clients` closed-loop clients for `seconds`; `unit` sentence (one test sentence per request) or
    paragraph (1-5 per request, LibreTranslate's /translate: the server cuts them); `api` v1
    (/v1/translate) or libretranslate (/translate) for sentences; `http` the client library, httpx or
    aiohttp (about a twentieth of httpx's CPU a request: more of the shared cores left to the server)."""
    units = {"sentence": lambda x: [(s, 1) for s in x], "paragraph": paragraphs, "html": html_pages}
    items = units[unit](sentences)
    done = [0]  # sentences answered
    latencies: list[float] = []
    errors: dict[str, int] = {}
    rss: list[tuple[float, float]] = []
    t0 = time.monotonic()
    stop = t0 + seconds

    transport_errors: tuple[type[BaseException], ...] = (httpx.HTTPError, TimeoutError)

    async def client(k: int, post: Callable[[str, dict], Awaitable[int]]) -> None:
        i = k * 97
        while time.monotonic() < stop:
            s, n = items[i % len(items)]
            i += 1
            t = time.monotonic()
            try:
                if unit == "html":
                    status = await post("/translate", {"q": s, "source": "de", "target": "en", "format": "html"})
                elif unit == "paragraph" or api == "libretranslate":
                    status = await post("/translate", {"q": s, "source": "de", "target": "en"})
                else:
                    status = await post("/v1/translate", {"q": s})
                if status != 200:
                    errors[str(status)] = errors.get(str(status), 0) + 1
                    continue
            except transport_errors as e:
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                continue
            latencies.append(time.monotonic() - t)
            done[0] += n

    async def sample_rss() -> None:
        while time.monotonic() < stop:
            rss.append((round(time.monotonic() - t0, 1), round(rss_mib(pid), 1)))
            await asyncio.sleep(1)

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    names = [
        "aiayn_target_tokens_total",
        "aiayn_batch_decode_seconds_sum",
        "aiayn_batch_sentences_count",
        "aiayn_batch_sentences_sum",
    ]
    before = {n: metric(url, n) for n in names}
    cpu0 = (cpu_s(os.getpid()), cpu_s(pid))
    if http == "aiohttp":
        import aiohttp

        transport_errors = (aiohttp.ClientError, TimeoutError)
        connector = aiohttp.TCPConnector(limit=clients)
        async with aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(60)) as session:

            async def post(path: str, body: dict) -> int:
                async with session.post(path, json=body) as r:
                    await r.read()
                    return r.status

            await asyncio.gather(sample_rss(), *(client(k, post) for k in range(clients)))
    else:
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as c:

            async def post(path: str, body: dict) -> int:
                return (await c.post(path, json=body)).status_code

            await asyncio.gather(sample_rss(), *(client(k, post) for k in range(clients)))
    elapsed = time.monotonic() - t0
    # where the cores went: the clients (this process) and the server (its decoding threads included)
    cpu = [round((now - then) / elapsed, 2) for now, then in zip((cpu_s(os.getpid()), cpu_s(pid)), cpu0)]
    d = {n: metric(url, n) - before[n] for n in names}
    tokens = d["aiayn_target_tokens_total"]
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [float("nan")] * 99
    return {
        "unit": unit,
        "http_client": http,
        "requests": len(latencies),
        "sentences": done[0],
        "seconds": round(elapsed, 1),
        "requests_per_s": round(len(latencies) / elapsed, 2),
        "sentences_per_s": round(done[0] / elapsed, 2),
        "target_tokens_per_s": round(tokens / elapsed, 1),
        "latency_p50_s": round(q[49], 3),
        "latency_p95_s": round(q[94], 3),
        "latency_p99_s": round(q[98], 3),
        "errors": errors,
        "mean_batch_sentences": round(d["aiayn_batch_sentences_sum"] / max(d["aiayn_batch_sentences_count"], 1), 1),
        "worker_busy": round(d["aiayn_batch_decode_seconds_sum"] / elapsed, 2),
        "client_cores": cpu[0],
        "server_cores": cpu[1],
        "rss_mib": rss,
    }


async def fuzz(url: str, n: int, seed: int = 0) -> dict:
    """n bad requests: every answer must be a 4xx with a JSON error; counts by status."""
    rng = random.Random(seed)
    statuses: dict[str, int] = {}

    def body() -> tuple[str, dict]:
        kind = rng.randrange(8)
        path = rng.choice(["/translate", "/v1/translate", "/v1/attention", "/detect", "/translate_file"])
        if kind == 0:
            return path, {"content": rng.randbytes(rng.randint(1, 4000))}
        if kind == 1:
            return path, {
                "content": rng.randbytes(rng.randint(1, 200)),
                "headers": {"content-type": "application/json"},
            }
        if kind == 2:  # truncated JSON
            truncated = json.dumps({"q": "Ein Hund", "source": "de", "target": "en"})[: rng.randint(1, 30)]
            return path, {"content": truncated, "headers": {"content-type": "application/json"}}
        if kind == 3:  # oversized body
            return path, {"content": b"x" * (1 << 20) + b"x" * rng.randint(1, 1000)}
        if kind == 4:  # over the char limit
            return path, {"json": {"q": "Hund " * 2000, "source": "de", "target": "en"}}
        if kind == 5:  # over the batch limit
            return "/translate", {"json": {"q": ["Hund"] * 100, "source": "de", "target": "en"}}
        if kind == 6:  # wrong types
            return path, {
                "json": rng.choice(
                    [
                        {"q": 5},
                        {"q": ["a", None]},
                        {"q": "a", "beam": "x"},
                        [1, 2],
                        {"q": "a", "beam": 10**30},
                        {"q": {"nested": []}},
                        None,
                    ]
                )
            }
        return path, {"content": b"[" * rng.randint(1000, 100_000), "headers": {"content-type": "application/json"}}

    async with httpx.AsyncClient(base_url=url, timeout=60) as c:
        sem = asyncio.Semaphore(16)

        async def one() -> None:
            path, kw = body()
            async with sem:
                try:
                    r = await c.post(path, **kw)
                    key = str(r.status_code)
                    if r.status_code >= 400:
                        r.json()["error"]  # a JSON error, not a stack trace
                except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
                    key = type(e).__name__
            statuses[key] = statuses.get(key, 0) + 1

        await asyncio.gather(*(one() for _ in range(n)))
    healthy = httpx.get(url + "/health").status_code == 200
    return {
        "requests": n,
        "statuses": dict(sorted(statuses.items())),
        "healthy_after": healthy,
        # 5xx or no answer; a 200 is a body that is a valid request after all ({"q": "a", "beam": "x"} on
        # /detect, which reads q and ignores other fields, as LibreTranslate)
        "server_errors": sum(v for k, v in statuses.items() if not k.startswith(("2", "4"))),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-c", "--checkpoint", required=True, help="run directory to serve")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--fuzz", type=int, default=1000)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="server's intra-op threads per worker (default 1: on a shared CPU more threads spin-wait; 0: the "
        "server's default)",
    )
    p.add_argument("--workers", type=int, default=0, help="server's --workers (default 0: the server's default)")
    p.add_argument(
        "--modes",
        default="batched,one-at-a-time",
        help="comma-separated: " + ", ".join([*MODES, "libretranslate", "libretranslate-sequential"]),
    )
    p.add_argument(
        "--unit",
        default="sentence",
        choices=["sentence", "paragraph", "html"],
        help="what a request holds: one test sentence, a paragraph of 1-5 (LibreTranslate's /translate, "
        "which cuts it into sentences; latency is per paragraph, sentences/s counts its sentences), or an "
        "HTML snippet of 1-3 with inline tags (format html)",
    )
    p.add_argument(
        "--api",
        default="v1",
        choices=["v1", "libretranslate"],
        help="endpoint of the sentence requests: /v1/translate (default) or /translate",
    )
    p.add_argument(
        "--http",
        default="httpx",
        choices=["httpx", "aiohttp"],
        help="the clients' HTTP library (default httpx); aiohttp (pip install aiohttp) uses about a twentieth"
        " of the CPU a request, so more of the cores the clients share with the server are left to it",
    )
    p.add_argument(
        "--libretranslate",
        default="",
        help="the `libretranslate` executable of its own venv, for the modes libretranslate (N clients) and "
        "libretranslate-sequential (one)",
    )
    p.add_argument("--argos-packages", default="", help="ARGOS_PACKAGES_DIR holding the installed package")
    p.add_argument("--engine", default="auto", help="auto | torch | ctranslate2 (passed to aiayn serve)")
    p.add_argument("--data", default=os.environ.get("AIAYN_DATA_DIR", str(ROOT.parent / "shared/data/multi30k")))
    p.add_argument("--out", default=str(ROOT / "bench/results/serve_load.json"))
    a = p.parse_args()
    with gzip.open(Path(a.data) / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    results: dict = {
        "clients": a.clients,
        "seconds": a.seconds,
        "beam": a.beam,
        "threads": a.threads,
        "workers": a.workers,
        "engine": a.engine,
        "unit": a.unit,
        "api": a.api,
        "http": a.http,
        "run": a.checkpoint,
        "modes": {},
    }
    for mode in a.modes.split(","):
        lt = mode.startswith("libretranslate")
        if lt:
            if not a.libretranslate:
                raise SystemExit(f"mode {mode} needs --libretranslate PATH and --argos-packages DIR")
            proc, url = start_libretranslate(a.libretranslate, a.argos_packages, a.threads)
        else:
            proc, url = start_server(a.checkpoint, MODES[mode], a.beam, a.threads, a.engine, a.workers)
        try:
            for s in sentences[:8]:  # warm up (LibreTranslate loads its model on the first request)
                httpx.post(url + "/translate", json={"q": s, "source": "de", "target": "en"}, timeout=300)
            # one client, request after request
            clients = 1 if mode.startswith("sequential") or mode == "libretranslate-sequential" else a.clients
            api = "libretranslate" if lt else a.api
            r = asyncio.run(load(url, sentences, clients, a.seconds, proc.pid, a.unit, api, a.http))
            r["clients"] = clients
            print(
                f"{mode:>14}: {r['sentences_per_s']:7.2f} sentences/s {r['target_tokens_per_s']:8.1f} tokens/s  "
                f"p50 {r['latency_p50_s']:.3f}s p95 {r['latency_p95_s']:.3f}s p99 {r['latency_p99_s']:.3f}s  "
                f"errors {r['errors'] or 0}  batch {r['mean_batch_sentences']} busy {r['worker_busy']}  "
                f"cores: clients {r['client_cores']} server {r['server_cores']}  "
                f"RSS MiB {r['rss_mib'][0][1]} -> {r['rss_mib'][-1][1]}",
                flush=True,
            )
            if mode == "batched" and a.fuzz:
                r["fuzz"] = asyncio.run(fuzz(url, a.fuzz))
                r["rss_after_fuzz_mib"] = round(rss_mib(proc.pid), 1)
                print(f"{'fuzz':>14}: {r['fuzz']}  RSS after {r['rss_after_fuzz_mib']} MiB", flush=True)
            results["modes"][mode] = r
        finally:
            proc.terminate()
            proc.wait(60)
    m = results["modes"]
    if "batched" in m and "one-at-a-time" in m and m["one-at-a-time"]["sentences_per_s"]:
        results["speedup"] = round(m["batched"]["sentences_per_s"] / m["one-at-a-time"]["sentences_per_s"], 2)
        print(f"batched / one-at-a-time throughput: {results['speedup']}x")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
