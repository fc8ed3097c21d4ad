"""Group commit for the server's awaited calls: calls that arrive while one runs are run together as the
next one (`Coalesced`), as the HTML requests' word alignments are."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


class Coalesced:
    """Calls of `fn` (a list of items -> one result per item, awaited) that arrive while one runs are
    run together as the next one (group commit): how the server aligns the sentences of concurrent
    HTML requests in one call, as their decoding is batched.

    - One call takes callers in arrival order up to `max_items` items (a caller with more is taken
      alone), so one call never holds the worker for the whole queue.
    - Each caller gets its own items' results. If a merged call fails, each of its callers is run
      again alone, so an error reaches only the callers whose items cause it.
    - A caller that goes away loses only its answer.
    - If the drain stops other than by running dry (cancelled at the server's shutdown, or a
      BaseException out of `fn`), every caller it still held is cancelled rather than left waiting."""

    def __init__(self, fn: Callable[[list[Any]], Awaitable[list[Any]]], max_items: int = 256) -> None:
        self.fn = fn
        self.max_items = max_items
        self.calls = 0  # calls of fn so far
        self._waiting: list[tuple[list[Any], asyncio.Future]] = []
        self._task: asyncio.Task | None = None

    async def __call__(self, items: list[Any]) -> list[Any]:
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((items, future))
        if self._task is None or self._task.done():  # the drain runs apart from any one request
            held: list[tuple[list[Any], asyncio.Future]] = []  # the callers of the call in flight
            self._task = asyncio.create_task(self._drain(held))
            self._task.add_done_callback(lambda task: self._stopped(task, held))
        return await future

    def _take(self) -> list[tuple[list[Any], asyncio.Future]]:
        """The callers of the next call: at least one, then as many as fit in `max_items`."""
        n, size = 1, len(self._waiting[0][0])
        while n < len(self._waiting) and size + len(self._waiting[n][0]) <= self.max_items:
            size += len(self._waiting[n][0])
            n += 1
        taken, self._waiting = self._waiting[:n], self._waiting[n:]
        return taken

    async def _drain(self, held: list[tuple[list[Any], asyncio.Future]]) -> None:
        while self._waiting:
            held[:] = self._take()
            try:
                await self._answer(held)
            except Exception as e:
                if len(held) == 1:
                    _settle(held[0][1], error=e)
                else:  # a merged call failed: each caller alone, so the error reaches its own callers only
                    for caller in held:
                        if not caller[1].done():
                            try:
                                await self._answer([caller])
                            except Exception as own:
                                _settle(caller[1], error=own)
            held.clear()

    async def _answer(self, callers: list[tuple[list[Any], asyncio.Future]]) -> None:
        self.calls += 1
        out = await self.fn([x for items, _ in callers for x in items])
        at = 0
        for items, future in callers:
            _settle(future, out[at : at + len(items)])
            at += len(items)

    def _stopped(self, task: asyncio.Task, held: list[tuple[list[Any], asyncio.Future]]) -> None:
        # Ran dry: everyone was answered. Otherwise the callers in flight, and the waiting ones unless a
        # new drain has started for them, would wait forever.
        stranded = held + (self._waiting if self._task is task else [])
        if self._task is task:
            self._waiting = []
        for _, future in stranded:
            future.cancel()


def _settle(future: asyncio.Future, result: Any = None, error: Exception | None = None) -> None:
    """Answer a caller unless it has gone away."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
