"""Work the tool cache does beside a call rather than inside it: store writes that only other processes
read, and private copies made while a request is in flight.

A call's latency is what its caller waits for. Two pieces of a revalidated read need not be waited for:
- the write that records the server's confirmation in the store (`update_meta`): it feeds other processes
  and this process's next lookup of the same entry, never the answer being returned. It runs as a task
  started here (`Deferred.start`), still bounded by the store's deadline (the fence), still compare-and-set
  in the store, awaited by the next lookup of the same key in this process (by any cache over the same
  store object: `Deferred.of`) and by `flush()` (which `ToolCache.close()` calls). A write cancelled before
  it ran (the event loop shutting down) is logged, never dropped silently.
- the private copy of the held answer a revalidation serves: it can be made while the conditional request
  is on the wire, when the loop would otherwise sit idle (`ahead`).

Both need a way to run something beside the current task. The MCP SDKs run on asyncio (trio is not a
target), so this uses asyncio's loop directly; on any other event loop nothing is deferred and the work is
done inline, as before.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Coroutine, Sized
from typing import Any, ClassVar, Generic, TypeVar

logger = logging.getLogger("mcpcache.client")

T = TypeVar("T")


def _loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (or no loop at all): nothing runs beside the caller
        return None


_MOST_TURNS = 200
"""How many turns of the loop `Ahead` waits for the loop to have nothing else ready, before it runs anyway."""

_WHEN_UNSURE_S = 0.001
"""A loop that does not show what it has ready (not CPython's own): `Ahead` runs this long after it is made."""


class Ahead(Generic[T]):
    """`make()` run while the caller awaits something else, or by `result()` at the latest; `cancel()` when
    its result is not wanted after all.

    It runs on a turn of the loop when nothing else is ready to run: after the request the caller awaits has
    gone out (sending it takes the transport's tasks several turns; running first would delay it by exactly
    what it means to hide), while the reply is awaited. CPython's loop shows what is ready (`_ready`, checked
    by tests/client/test_private_apis.py); on a loop that does not, it runs a millisecond later."""

    __slots__ = ("_done", "_handle", "_loop", "_make", "_turns", "_value")

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._done = False
        self._value: T | None = None
        self._turns = 0
        self._loop = _loop()
        self._handle: asyncio.Handle | None = None
        if self._loop is not None:
            if isinstance(getattr(self._loop, "_ready", None), Sized):
                self._handle = self._loop.call_soon(self._when_idle)
            else:
                self._handle = self._loop.call_later(_WHEN_UNSURE_S, self._run)

    def _when_idle(self) -> None:
        ready: Sized = self._loop._ready  # type: ignore[union-attr]
        if len(ready) and self._turns < _MOST_TURNS:
            self._turns += 1
            self._handle = self._loop.call_soon(self._when_idle)  # type: ignore[union-attr]
            return
        self._run()

    def _run(self) -> None:
        if self._done:
            return
        try:
            self._value = self._make()
        except Exception:  # made again by result(), where its error reaches the caller
            logger.debug("making a value ahead failed; it is made when asked for", exc_info=True)
            return
        self._done = True

    def result(self) -> T:
        if self._handle is not None:
            self._handle.cancel()
        if not self._done:
            self._value = self._make()
            self._done = True
        value = self._value
        self._value = None  # handed out once: a private copy has one owner
        return value  # type: ignore[return-value]

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._done = True
        self._value = None


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
