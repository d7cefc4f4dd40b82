"""Store writes the tool cache makes beside a call rather than inside it.

A call's latency is what its caller waits for. The write that records a revalidation's confirmation in the
store (`update_meta`) need not be waited for: it feeds other processes and this process's next lookup of
the same entry, never the answer being returned. It runs as a task started here (`Deferred.start`), still
bounded by the store's deadline (the fence), still compare-and-set in the store, awaited by the next lookup
of the same key in this process (by any cache over the same store object: `Deferred.of`) and by `flush()`
(which `ToolCache.close()` calls). A write cancelled before it ran (the event loop shutting down) is
logged, never dropped silently.

(Making the private copy of a held answer while its revalidation's request was out was tried as well, on a
turn of the loop with nothing else ready: on the 2-core machine of docs/benchmarks.md it made the read
0.1-0.2 ms slower than copying after the reply, so it is not done.)

Running something beside the current task needs the event loop. The MCP SDKs run on asyncio (trio is not a
target), so this uses asyncio's loop directly; on any other event loop nothing is deferred.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar

logger = logging.getLogger("mcpcache.client")


def _loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (or no loop at all): nothing runs beside the caller
        return None


class Deferred:
    """Store writes started beside the calls that asked for them, by key: awaited by the next lookup of the
    key, and all of them by `flush()`. One per store object (`of`), so that every cache of this process
    over that store reads what the others deferred, as it would have read it from the store."""

    _per_store: ClassVar[weakref.WeakKeyDictionary[object, Deferred]] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, store: object) -> Deferred:
        try:
            deferred = cls._per_store.get(store)
        except TypeError:  # a store that cannot be weakly referenced or hashed: writes of its own caches only
            return cls()
        if deferred is None:
            deferred = cls._per_store[store] = cls()
        return deferred

    def __init__(self) -> None:
        self._by_key: dict[str, asyncio.Task[Any]] = {}
        self._all: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._all)

    async def start(self, key: str, write: Callable[[], Coroutine[Any, Any, object]], what: str) -> None:
        """Run `write()` beside the caller (inline where the loop is not asyncio). A write already pending
        for `key` is awaited first, so writes to one key land in the order they were asked for."""
        loop = _loop()
        if loop is None:
            await write()
            return
        previous = self._by_key.get(key)
        task = loop.create_task(self._run(previous, write, what))
        self._by_key[key] = task
        self._all.add(task)
        task.add_done_callback(lambda done: self._forget(key, done))

    @staticmethod
    async def _run(
        previous: asyncio.Task[Any] | None, write: Callable[[], Coroutine[Any, Any, object]], what: str
    ) -> None:
        try:
            if previous is not None:
                await asyncio.wait([previous])
            await write()  # the fence bounds it and turns a failing store into a logged, counted failure
        except asyncio.CancelledError:
            logger.warning("tool cache: %s was cancelled before it reached the store", what)
            raise

    def _forget(self, key: str, task: asyncio.Task[Any]) -> None:
        self._all.discard(task)
        if self._by_key.get(key) is task:
            del self._by_key[key]
        if not task.cancelled() and task.exception() is not None:  # pragma: no cover - the fence catches
            logger.warning("tool cache: a deferred store write failed", exc_info=task.exception())

    def pending(self, key: str) -> bool:
        """Whether a write for `key` has not landed yet."""
        task = self._by_key.get(key)
        return task is not None and not task.done()

    async def settled(self, key: str) -> None:
        """Wait for the write pending for `key`, if any (never cancels it: a caller giving up does not)."""
        task = self._by_key.get(key)
        if task is not None and not task.done():
            await _wait(task)

    async def flush(self) -> None:
        """Wait for every write started so far (and those they chain to)."""
        while self._all:
            await _wait(*self._all)


async def _wait(*tasks: asyncio.Task[Any]) -> None:
    # asyncio.wait, not `await task`: a caller cancelled while waiting must not cancel the write.
    await asyncio.wait(tasks)
