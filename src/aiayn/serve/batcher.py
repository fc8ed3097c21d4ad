"""Cross-request dynamic batching: sentences of concurrent requests decoded together.

One worker thread owns the model. Requests put their sentences on a queue as items; the worker
takes the oldest waiting item, then gathers more items with the same search settings (beam,
length penalty, max length, n-best: one search call needs one setting) in arrival order while the
padded token cost, sentences x longest source x beam, stays within `max_batch_tokens`. It starts
the batch when the budget is full or when the oldest item has waited `max_wait_ms`, whichever
comes first, so no sentence waits longer than the window for its batch to be formed (it may still
wait for the batch ahead of it to finish decoding: one model, one batch at a time).

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

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


Hypothesis = tuple[str, float, int]  # text, score (nan for greedy), number of target pieces


class Backend(Protocol):
    """What the batcher decodes with (aiayn.serve.backends: PyTorch, CTranslate2)."""

    name: str

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Source pieces per text, EOS included, as the model will see them (after truncation)."""

    def translate(self, texts: Sequence[str], opts: SearchOptions) -> list[list[Hypothesis]]:
        """n-best hypotheses per text, best first; an empty text gives [("", nan, 0)]."""


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


@dataclass
class BatchStats:
    """Reported to the observer after every batch (metrics)."""

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
        backend: Backend,
        max_batch_tokens: int = 8192,
        max_wait_ms: float = 10.0,
        max_queue: int = 10_000,
        observer: Callable[[BatchStats], None] | None = None,
    ) -> None:
        if max_batch_tokens < 1 or max_wait_ms < 0:
            raise AiaynError("need --max-batch-tokens >= 1 and --max-wait-ms >= 0")
        self.backend = backend
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.observer = observer
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        self._pending: list[_Item] = []  # taken off the queue, not yet batched (worker thread only)
        self._thread = threading.Thread(target=self._work, name="aiayn-batcher", daemon=True)
        self._stop = threading.Event()
        self._count_lock = threading.Lock()  # `queued` changes on both threads
        self.queued = 0  # sentences submitted and not yet decoded

    # -- the event-loop side ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """Decode what is queued, then stop the worker (uvicorn has already drained the requests)."""
        self._stop.set()
        self._queue.put(None)
        self._thread.join(timeout)

    async def translate(self, texts: Sequence[str], opts: SearchOptions) -> list[list[Hypothesis]]:
        """Queue a request's sentences; returns their n-best lists in order."""
        if not self._thread.is_alive():
            raise AiaynError("the translation worker is not running")
        if not texts:
            return []
        ticket = Ticket(len(texts), asyncio.get_running_loop())
        counts = self.backend.count_tokens(texts)
        with self._count_lock:
            if self.queued + len(texts) > self.max_queue:
                raise Overloaded(f"server busy: more than {self.max_queue} sentences queued, retry later")
            self.queued += len(texts)
        for i, (text, n) in enumerate(zip(texts, counts)):
            self._queue.put(_Item(ticket, i, text, n, opts))
        return await ticket.future

    async def run_exclusive(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the worker thread between batches (the model is not thread-safe)."""
        if not self._thread.is_alive():
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

    def _select(self) -> tuple[list[_Item], bool]:
        """The batch the oldest pending item leads -> (items, full): full = the next item with the
        same settings would not fit the budget."""
        head = self._pending[0]
        if head.opts is None:
            return [head], True
        batch, longest = [head], head.n_tokens
        for it in self._pending[1:]:
            if it.opts != head.opts:
                continue
            if self._cost(len(batch) + 1, max(longest, it.n_tokens), head.opts.beam) > self.max_batch_tokens:
                return batch, True
            batch.append(it)
            longest = max(longest, it.n_tokens)
        return batch, False

    def _work(self) -> None:
        while True:
            if not self._pending:
                if self._stop.is_set() and self._queue.empty():
                    return
                self._take(None if not self._stop.is_set() else 0)
                continue
            head = self._pending[0]
            deadline = head.arrived + self.max_wait
            while True:
                batch, full = self._select()
                left = deadline - time.monotonic()
                if full or left <= 0 or not self._take(left):
                    break
            chosen = {id(it) for it in batch}
            self._pending = [it for it in self._pending if id(it) not in chosen]
            self._run(batch)

    def _run(self, batch: list[_Item]) -> None:
        started = time.monotonic()
        waited = started - batch[0].arrived
        tickets = {id(it.ticket): it.ticket for it in batch}
        target_tokens = 0
        try:
            if batch[0].fn is not None:
                outputs = [batch[0].fn()]
            else:
                opts = batch[0].opts
                assert opts is not None  # sentences carry their search options; only exclusive jobs have none
                outputs = self.backend.translate([it.text for it in batch], opts)
                target_tokens = sum(h[0][2] for h in outputs if h)
        except BaseException as e:  # noqa: BLE001 - any failure goes to the requests, never kills the worker
            for t in tickets.values():
                t.error = e
            outputs = [None] * len(batch)
        decode_s = time.monotonic() - started
        for it, out in zip(batch, outputs):
            it.ticket.results[it.index] = out
            it.ticket.remaining -= 1
        if batch[0].fn is None:
            with self._count_lock:
                self.queued -= len(batch)
        for t in tickets.values():
            if t.remaining == 0 or t.error is not None:
                try:
                    t.loop.call_soon_threadsafe(t._resolve)
                except RuntimeError:  # the loop is closed: nobody is waiting any more
                    pass
        if self.observer is not None and batch[0].fn is None:
            try:
                self.observer(
                    BatchStats(
                        len(batch), len(tickets), sum(it.n_tokens for it in batch), target_tokens, decode_s, waited
                    )
                )
            except Exception:  # noqa: BLE001 - metrics must not stop decoding
                pass
