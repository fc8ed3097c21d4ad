"""Cross-request dynamic batching: sentences of concurrent requests decoded together.

A worker thread decodes (one owns the PyTorch model; CTranslate2 gets one per replica, see
`workers`). Requests put their sentences on a queue as items; a worker
takes the oldest waiting item, then gathers more items with the same search settings (beam,
length penalty, max length, n-best: one search call needs one setting) in arrival order while the
padded token cost, sentences x longest source x beam, stays within `max_batch_tokens`. It starts
the batch when the budget is full or when the oldest item has waited `max_wait_ms`, whichever
comes first, so no sentence waits longer than the window for its batch to be formed (it may still
wait for the batches ahead of it to finish decoding: each worker decodes one batch at a time).
The window is adaptive: a request that arrives when nothing is queued or decoding starts at once
if nothing else has come meanwhile, so a lone sequential client pays no window; sentences that
arrive while others are queued or decoding wait the window as before, so batches under load stay
as large.

Continuous batching (greedy search, `beam` 1 and `n_best` 1, with an engine that offers `stream()`:
the PyTorch one): instead of decoding a batch to its end, the worker keeps one running decoder
batch and, at every decoder step boundary, admits the greedy sentences waiting at the head of the
queue while running sentences x longest source stays within `max_batch_tokens`, and answers each
sentence as soon as it ends (aiayn.decode.continuous). So a sentence waits at most one decoder
step to start, not a whole batch. Anything else at the head of the queue (a beam search, an
exclusive job) stops admission: the running sentences finish, then it runs as a whole batch as
above, so arrival order is kept and nothing starves. An idle worker gathers a first batch within
`max_wait_ms` as above (the adaptive window). `continuous=False` decodes greedy searches in whole
batches as well.

Each request holds a `Ticket`; the worker writes results into it from its thread and resolves the
request's asyncio future on the event loop with `call_soon_threadsafe`. A request whose client has
gone away (its future cancelled) is still decoded with its batch and its result dropped: the other
requests of that batch are answered as usual.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from aiayn.config import DecodeConfig
from aiayn.errors import AiaynError


@dataclass(frozen=True)
class SearchOptions:
    """What one search call needs to be the same for all its sentences."""

    beam: int = DecodeConfig.beam
    length_penalty: float = DecodeConfig.length_penalty
    max_len_a: float = DecodeConfig.max_len_a
    max_len_b: int = DecodeConfig.max_len_b
    n_best: int = 1


class Hypothesis(NamedTuple):
    """One translation of a sentence as an engine gives it."""

    text: str
    score: float  # sum log p / length penalty; nan: greedy search has none
    pieces: int  # target pieces with EOS (0 for an empty text): the metrics' tokens/s


class Engine(Protocol):
    """What the server decodes with (aiayn.serve.engines: a Translator on PyTorch or CTranslate2). An
    engine subclasses this: the optional abilities below have defaults (one worker, no continuous
    batching, no word links, no attention map, nothing to close)."""

    name: str  # torch | ctranslate2 (the server reports it as its "backend")
    workers: int = 1  # batches decoded at once, each on a worker thread of its own
    concurrent: bool = False  # `translate` may be called from several threads at once

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Source pieces per text, EOS included, as the model will see them (after truncation)."""
        ...

    def translate(self, texts: Sequence[str], opts: SearchOptions) -> list[list[Hypothesis]]:
        """n-best hypotheses per text, best first; an empty text gives [Hypothesis("", nan, 0)]."""
        ...

    def stream(self) -> Stream | None:
        """A running greedy decoder batch for continuous batching; None: whole batches only."""
        return None

    def align(self, sources: Sequence[str], targets: Sequence[str]) -> list[list[frozenset[int]] | None]:
        """Per pair, each source word's target words (aiayn.decode.align), to place HTML tags by; None for
        a pair without links, whose tags are placed by position (all of them by default)."""
        return [None] * len(sources)

    def attention(self, sentence: str, opts: SearchOptions) -> dict[str, Any] | None:
        """The translation of one sentence with its encoder-decoder attention, for the web page; None: the
        engine reports none."""
        return None

    def close(self) -> None:
        """Let go of what the engine holds, at the server's shutdown."""
        return None


class Stream(Protocol):
    """A running greedy decoder batch (`stream()` of an engine that offers continuous batching)."""

    @property
    def rows(self) -> int:
        """Sentences decoding now."""

    @property
    def source_len(self) -> int:
        """Their padded source length (0 when none)."""

    def add(self, texts: Sequence[str], opts: SearchOptions, keys: Sequence[Any]) -> list[tuple[Any, list[Hypothesis]]]:
        """Texts join before the next step (opts: greedy) -> (key, hypotheses) of those answered now."""

    def step(self) -> list[tuple[Any, list[Hypothesis]]]:
        """One decoder step -> (key, hypotheses) of the sentences that ended."""

    def clear(self) -> None:
        """Drop every sentence (after a failure; the batcher answers them)."""


class Overloaded(AiaynError):
    """The queue holds more sentences than the server accepts."""


class Ticket:
    """One request's sentences; resolved (on its event loop) once every sentence is decoded."""

    def __init__(self, n: int, loop: asyncio.AbstractEventLoop) -> None:
        self.results: list[Any] = [None] * n
        self.remaining = n
        self.loop = loop
        self.future: asyncio.Future = loop.create_future()
        self.error: BaseException | None = None

    def _resolve(self) -> None:  # on the event loop
        if self.future.done():  # cancelled: the client went away
            return
        if self.error is not None:
            self.future.set_exception(self.error)
        else:
            self.future.set_result(self.results)


@dataclass
class _Item:
    ticket: Ticket
    index: int  # position in the ticket's request
    text: str
    n_tokens: int
    opts: SearchOptions | None  # None: an exclusive job (fn) rather than a sentence
    arrived: float = field(default_factory=time.monotonic)
    fn: Callable[[], Any] | None = None
    started: float = 0.0  # when it joined the running batch (continuous batching)
    idle: bool = False  # nothing was queued or decoding when its request came (the adaptive window)


@dataclass
class BatchStats:
    """Reported to the observer after every batch (metrics). With continuous batching: after every
    decoder step at which sentences ended, for those sentences; decode_s is the decoding time since
    the previous report and waited_s the longest wait of theirs before joining."""

    sentences: int
    requests: int
    source_tokens: int
    target_tokens: int
    decode_s: float
    waited_s: float  # how long the oldest sentence waited before its batch started


class Batcher:
    """The queue and its worker thread. Start with `start()`, stop with `close()`."""

    def __init__(
        self,
        engine: Engine,
        max_batch_tokens: int = 8192,
        max_wait_ms: float = 10.0,
        max_queue: int = 10_000,
        observer: Callable[[BatchStats], None] | None = None,
        continuous: bool = True,
        workers: int = 1,
        adaptive: bool = True,
    ) -> None:
        """`continuous`: greedy searches join a running batch (when the engine offers `stream()`).
        `workers` > 1: that many batches decode at once, each on a worker thread of its own; for an
        engine whose `translate` may be called from several threads at once (`concurrent`, the
        CTranslate2 one with as many replicas), and without continuous batching. `adaptive`: a request
        that finds the batcher idle starts at once (False: every batch waits out its window)."""
        if max_batch_tokens < 1 or max_wait_ms < 0:
            raise AiaynError("need --max-batch-tokens >= 1 and --max-wait-ms >= 0")
        if workers < 1:
            raise AiaynError(f"need at least one worker, got {workers}")
        if workers > 1 and not engine.concurrent:
            raise AiaynError(f"the {engine.name} engine decodes one batch at a time (workers {workers})")
        self.engine = engine
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000.0
        self.adaptive = adaptive
        self.max_queue = max_queue
        self.observer = observer
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        self._pending: list[_Item] = []  # taken off the queue, not yet batched (under `_gather`)
        self._gather = threading.Lock()  # one worker at a time takes items and forms its batch
        self._threads = [
            threading.Thread(target=self._work, name=f"aiayn-batcher-{i}", daemon=True) for i in range(workers)
        ]
        self._stop = threading.Event()
        self._count_lock = threading.Lock()  # `queued` and tickets change on several threads
        self.queued = 0  # sentences submitted and not yet decoded
        self._stream: Stream | None = engine.stream() if continuous and workers == 1 else None
        # The sentences in the running stream, by id: kept here, not asked of the stream, so a step that
        # fails part-way (after the stream let finished rows go) still answers every one of them.
        self._running: dict[int, _Item] = {}
        self._busy = 0.0  # decoding time not yet reported (continuous batching)

    # -- the event-loop side ------------------------------------------------------------------------

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def close(self, timeout: float = 30.0) -> None:
        """Decode what is queued, then stop the workers (uvicorn has already drained the requests)."""
        self._stop.set()
        for _ in self._threads:
            self._queue.put(None)  # wakes a worker waiting for items
        end = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))

    @property
    def alive(self) -> bool:
        """Whether every worker thread runs (they stop only with `close`)."""
        return all(t.is_alive() for t in self._threads)

    async def translate(self, texts: Sequence[str], opts: SearchOptions) -> list[list[Hypothesis]]:
        """Queue a request's sentences; returns their n-best lists in order."""
        if not self.alive:
            raise AiaynError("the translation worker is not running")
        if not texts:
            return []
        ticket = Ticket(len(texts), asyncio.get_running_loop())
        counts = self.engine.count_tokens(texts)
        with self._count_lock:
            if self.queued + len(texts) > self.max_queue:
                raise Overloaded(f"server busy: more than {self.max_queue} sentences queued, retry later")
            idle = self.queued == 0
            self.queued += len(texts)
        for i, (text, n) in enumerate(zip(texts, counts)):
            self._queue.put(_Item(ticket, i, text, n, opts, idle=idle))
        return await ticket.future

    async def run_exclusive(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on a worker thread between its batches (with one worker, as the PyTorch engine has:
        the model is not used by anything else meanwhile)."""
        if not self.alive:
            raise AiaynError("the translation worker is not running")
        ticket = Ticket(1, asyncio.get_running_loop())
        self._queue.put(_Item(ticket, 0, "", 0, None, fn=fn))
        return (await ticket.future)[0]

    # -- the worker thread --------------------------------------------------------------------------

    def _take(self, timeout: float | None) -> bool:
        """Move one item (waiting up to `timeout`; None = forever) and whatever else is queued into
        `_pending`. False when nothing came."""
        try:
            item = self._queue.get(timeout=timeout) if timeout is None or timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return False
        while True:
            if item is not None:
                self._pending.append(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return True

    def _cost(self, n: int, longest: int, beam: int) -> int:
        return n * longest * beam  # padded source tokens x beam, as Translator counts a batch

    def _streams(self, it: _Item) -> bool:
        """Whether the item joins the running batch (continuous batching: greedy sentences)."""
        return self._stream is not None and it.opts is not None and it.opts.beam == 1 and it.opts.n_best == 1

    def _select(self) -> tuple[list[_Item], bool]:
        """The batch the oldest pending item leads -> (items, full): full = the next item with the
        same settings (for continuous batching: the next greedy one) would not fit the budget."""
        head = self._pending[0]
        if head.opts is None:
            return [head], True
        stream = self._streams(head)
        beam = 1 if stream else head.opts.beam
        batch, longest = [head], head.n_tokens
        for it in self._pending[1:]:
            if not (self._streams(it) if stream else it.opts == head.opts):
                continue
            if self._cost(len(batch) + 1, max(longest, it.n_tokens), beam) > self.max_batch_tokens:
                return batch, True
            batch.append(it)
            longest = max(longest, it.n_tokens)
        return batch, False

    def _work(self) -> None:
        while True:
            if self._stream is not None and self._stream.rows:  # one worker: `_gather` is its own
                self._take(0)
                self._admit()
                self._advance()
                continue
            with self._gather:
                batch = self._next_batch()
            if batch is None:
                return
            if self._streams(batch[0]):
                self._join(batch)
            else:
                self._run(batch)

    def _next_batch(self) -> list[_Item] | None:
        """Wait for items and form the next batch (see the module's docstring); None: stop."""
        while not self._pending:
            if self._stop.is_set() and self._queue.empty():
                return None
            self._take(None if not self._stop.is_set() else 0)
        head = self._pending[0]
        deadline = head.arrived + self.max_wait
        while True:
            batch, full = self._select()
            left = deadline - time.monotonic()
            if full or left <= 0 or (self.adaptive and head.idle and self._idle()) or not self._take(left):
                break
        chosen = {id(it) for it in batch}
        self._pending = [it for it in self._pending if id(it) not in chosen]
        return batch

    def _idle(self) -> bool:
        """Nothing is queued or decoding but the sentences pending here. With a head that arrived at an
        idle batcher there is no traffic a wait could batch with, so the batch starts now (the adaptive
        window): a lone client sending one request after another never waits (issue #47: 32 against 46
        sentences/s). A sentence that arrived while others were queued or decoding waits the window as
        before, so under load, when answered clients send again within the window, batches stay as
        large."""
        with self._count_lock:
            return self.queued <= sum(it.opts is not None for it in self._pending)

    # -- continuous batching (worker thread) ----------------------------------------------------------

    def _admit(self) -> None:
        """At a step boundary: the greedy sentences at the head of the queue join the running batch
        while running sentences x longest source stays within the budget. Anything else at the head
        stops admission (it runs once the running batch has finished: arrival order)."""
        assert self._stream is not None
        rows, longest = self._stream.rows, self._stream.source_len
        batch: list[_Item] = []
        for it in self._pending:
            if not self._streams(it) or self._cost(rows + 1, max(longest, it.n_tokens), 1) > self.max_batch_tokens:
                break
            batch.append(it)
            rows, longest = rows + 1, max(longest, it.n_tokens)
        if batch:
            self._pending = self._pending[len(batch) :]
            self._join(batch)

    def _join(self, batch: list[_Item]) -> None:
        assert self._stream is not None
        started = time.monotonic()
        groups: dict[SearchOptions, list[_Item]] = {}
        for it in batch:  # max_len_a/b may differ: they are per row; greedy ignores the length penalty
            it.started = started
            assert it.opts is not None
            groups.setdefault(it.opts, []).append(it)
        answered: set[int] = set()
        try:
            for opts, items in groups.items():
                self._running.update((id(it), it) for it in items)
                now = self._stream.add([it.text for it in items], opts, items)
                if now:
                    self._stream_done(now)
                    answered.update(id(k) for k, _ in now)
        except BaseException as e:  # noqa: BLE001 - fails the running sentences, never the worker
            self._fail_running(e, [it for it in batch if id(it) not in answered])
        self._busy += time.monotonic() - started

    def _stream_done(self, done: list[tuple[_Item, Any]]) -> None:
        for it, _ in done:
            self._running.pop(id(it), None)
        self._finish([k for k, _ in done], [h for _, h in done])

    def _fail_running(self, error: BaseException, also: Sequence[_Item] = ()) -> None:
        """Every sentence of the running stream (and `also`) gets `error`; the stream starts empty."""
        assert self._stream is not None
        try:
            self._stream.clear()
        except BaseException:  # noqa: BLE001 - the sentences below are answered whatever the stream does
            pass
        failed = dict(self._running)
        failed.update((id(it), it) for it in also)
        self._running.clear()
        self._finish(list(failed.values()), None, error)

    def _advance(self) -> None:
        """One decoder step of the running batch; the sentences that ended are answered now."""
        assert self._stream is not None
        t0 = time.monotonic()
        try:
            done = self._stream.step()
        except BaseException as e:  # noqa: BLE001 - fails the running sentences, never the worker
            self._busy = 0.0
            self._fail_running(e)
            return
        self._busy += time.monotonic() - t0
        if not done:
            return
        items: list[_Item] = [k for k, _ in done]
        outputs = [h for _, h in done]
        self._stream_done(done)
        decode_s, self._busy = self._busy, 0.0
        self._observe(
            items, sum(h[0].pieces for h in outputs if h), decode_s, max(it.started - it.arrived for it in items)
        )

    def _run(self, batch: list[_Item]) -> None:
        started = time.monotonic()
        waited = started - batch[0].arrived
        fn = batch[0].fn  # an exclusive job, else sentences
        target_tokens = 0
        outputs: list[Any] | None = None
        error: BaseException | None = None
        try:
            if fn is not None:
                outputs = [fn()]
            else:
                opts = batch[0].opts
                assert opts is not None  # sentences carry their search options; only exclusive jobs have none
                outputs = self.engine.translate([it.text for it in batch], opts)
                target_tokens = sum(h[0].pieces for h in outputs if h)
        except BaseException as e:  # noqa: BLE001 - any failure goes to the requests, never kills the worker
            outputs, error = None, e
        decode_s = time.monotonic() - started
        self._finish(batch, outputs, error, queued=fn is None)
        if fn is None:
            self._observe(batch, target_tokens, decode_s, waited)

    def _finish(
        self, items: list[_Item], outputs: list[Any] | None, error: BaseException | None = None, queued: bool = True
    ) -> None:
        """Items done (outputs None: failed with `error`): results in, tickets resolved when complete.
        `queued`: they are sentences counted in `queued` (an exclusive job is not)."""
        with self._count_lock:  # a request's sentences may end in batches of different workers
            for i, it in enumerate(items):
                it.ticket.results[it.index] = None if outputs is None else outputs[i]
                it.ticket.remaining -= 1
                if error is not None:
                    it.ticket.error = error
            if queued:
                self.queued -= len(items)
        self._resolve({id(it.ticket): it.ticket for it in items}.values())

    def _resolve(self, tickets: Iterable[Ticket]) -> None:
        for t in tickets:
            if t.remaining == 0 or t.error is not None:
                try:
                    t.loop.call_soon_threadsafe(t._resolve)
                except RuntimeError:  # the loop is closed: nobody is waiting any more
                    pass

    def _observe(self, items: list[_Item], target_tokens: int, decode_s: float, waited: float) -> None:
        if self.observer is None:
            return
        requests = len({id(it.ticket) for it in items})
        try:
            self.observer(
                BatchStats(len(items), requests, sum(it.n_tokens for it in items), target_tokens, decode_s, waited)
            )
        except Exception:  # noqa: BLE001 - metrics must not stop decoding
            pass
