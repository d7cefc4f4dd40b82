"""The failing-store fence: every store operation the tool cache makes goes through it.

A failing store is a miss, never a failed call, and a store that does not answer within its deadline is a
failing store: the fence enforces both, whatever the store does. An operation that raises, or that does
not finish within its deadline, is abandoned and reported as a miss (a load) or a skipped write (a save).

The deadline is `deadline_s` for any operation, plus `seconds_per_mb` for every MB of body it moves
(`transfer_budget_s`): a save knows its body's length, and a body is loaded only after a metadata peek
read the length recorded when it was saved. The bytes counted are bounded by `most_bytes` (the largest
answer the cache stores), so a record that claims to be huge cannot buy a frozen store a long wait.

A store that misses its deadline is not asked again for `cooldown_s` (a circuit): a frozen server or a
lock held elsewhere costs one deadline, not one per call. A store that fails quickly (refused connection,
an exception) costs little and is asked again on the next call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio

from mcpcache.stores.base import DEFAULT_SECONDS_PER_MB, Item, Store, transfer_budget_s
from mcpcache.stores.circuit import Circuit

logger = logging.getLogger("mcpcache.client")

T = TypeVar("T")

DEFAULT_STORE_DEADLINE_S = 1.0
DEFAULT_STORE_COOLDOWN_S = 5.0
DEFAULT_STORE_SECONDS_PER_MB = DEFAULT_SECONDS_PER_MB


class FencedStore:
    """The store's operations, each bounded by a deadline, with every failure turned into a miss."""

    def __init__(
        self,
        store: Store,
        on_failure: Callable[[], None],
        *,
        deadline_s: float = DEFAULT_STORE_DEADLINE_S,
        cooldown_s: float = DEFAULT_STORE_COOLDOWN_S,
        seconds_per_mb: float = DEFAULT_STORE_SECONDS_PER_MB,
        most_bytes: int = 0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not deadline_s > 0:
            raise ValueError(f"store deadline must be > 0 seconds, got {deadline_s!r}")
        if not cooldown_s >= 0:
            raise ValueError(f"store cooldown must be >= 0 seconds, got {cooldown_s!r}")
        if not seconds_per_mb >= 0:
            raise ValueError(f"store deadline per MB must be >= 0 seconds, got {seconds_per_mb!r}")
        self.store = store
        self.deadline_s = deadline_s
        self.cooldown_s = cooldown_s
        self.seconds_per_mb = seconds_per_mb
        self.most_bytes = most_bytes
        self._on_failure = on_failure
        self._monotonic = monotonic
        self._circuit = Circuit(cooldown_s, monotonic=monotonic)
        self._warned: set[str] = set()

    @property
    def circuit_open(self) -> bool:
        return self._circuit.is_open

    def deadline_for(self, nbytes: int) -> float:
        """The deadline of an operation moving `nbytes` of body (counted up to `most_bytes`)."""
        return transfer_budget_s(self.deadline_s, self.seconds_per_mb, nbytes, self.most_bytes)

    async def _run(self, op: str, action: Callable[[], Awaitable[T]], default: T, *, moving: int = 0) -> T:
        if self.circuit_open:
            return default
        deadline = self.deadline_for(moving)
        try:
            with anyio.move_on_after(deadline) as scope:
                return await action()
        except Exception:
            self._failed(op, "failed", exc_info=True)
            return default
        if scope.cancelled_caught:
            # Not asked again for a while: a store that does not answer would otherwise cost every call
            # its deadline.
            self._circuit.trip()
            self._failed(op, f"did not answer within {deadline:g} s; not asked for {self.cooldown_s:g} s")
        return default

    def _failed(self, op: str, what: str, *, exc_info: bool = False) -> None:
        self._on_failure()
        # One warning per burst of failures of the same operation, re-armed when that operation succeeds.
        if op not in self._warned:
            self._warned.add(op)
            logger.warning("tool cache store %s %s; continuing without the cache", op, what, exc_info=exc_info)

    def _ok(self, op: str) -> None:
        self._warned.discard(op)

    async def look(self, keys: Sequence[str], *, peek: bool = False, moving: int = 0) -> list[Item | None] | None:
        """`Store.load_many` (or `peek_many`: without bodies), or None when the store did not answer (its
        circuit open, a failure, the deadline): the caller then knows nothing the store holds, not even
        that nothing is there. `moving`: the bytes of body the load is expected to bring (see the module
        docstring)."""

        async def action() -> list[Item | None]:
            items = await (self.store.peek_many(keys) if peek else self.store.load_many(keys))
            self._ok("load")
            return items

        now: list[Item | None] | None = None
        if peek and not self.circuit_open:
            # A store in this process's memory answers at once: no deadline to watch (a cancel scope is most
            # of what a fresh hit from memory would otherwise cost).
            try:
                now = self.store.peek_now(keys)
            except Exception:
                self._failed("load", "failed", exc_info=True)
                return None
            if now is not None and self._warned:
                self._ok("load")
        items = await self._run("load", action, None, moving=0 if peek else moving) if now is None else now
        if not isinstance(items, list) or len(items) != len(keys):
            return None
        return [item if isinstance(item, Item) else None for item in items]

    async def load_many(self, keys: Sequence[str]) -> list[Item | None]:
        """`Store.load_many` (each of them answers None on any failure)."""
        items = await self.look(keys)
        return [None] * len(keys) if items is None else items

    async def peek_many(self, keys: Sequence[str]) -> list[Item | None]:
        """`Store.peek_many`: the items without their bodies (each of them answers None on any failure)."""
        items = await self.look(keys, peek=True)
        return [None] * len(keys) if items is None else items

    async def save(self, key: str, item: Item) -> bool:
        async def action() -> bool:
            stored = await self.store.save(key, item)
            self._ok("save")
            return stored is not False  # a store that returns nothing stored it

        return await self._run("save", action, False, moving=len(item.body))

    async def save_persistently(self, key: str, item: Item, *, attempts: int = 3) -> bool:
        """A write other processes depend on for correctness (a freshness end: another process learns of a
        mutation only through it). It is asked for even while the circuit is open, and tried again after a
        failure (a lock held for a moment by another writer), a few times within one deadline: it is small,
        and what it costs is paid by a mutating call, never by a read."""
        give_up = self._monotonic() + self.deadline_s
        for attempt in range(attempts):
            remaining = give_up - self._monotonic()
            if remaining <= 0:
                break
            with anyio.move_on_after(remaining):
                try:
                    stored = await self.store.save(key, item)
                except Exception:
                    self._failed("save", "failed", exc_info=True)
                    if attempt + 1 < attempts:
                        await anyio.sleep(0.02)
                    continue
                self._ok("save")
                return stored is not False
            self._failed("save", f"did not answer within {self.deadline_s:g} s")
            break
        return False

    async def update_meta(
        self, key: str, meta: Mapping[str, Any], expires_at: float | None, *, if_tag: str | None, stamp: float
    ) -> bool:
        async def action() -> bool:
            updated = await self.store.update_meta(key, meta, expires_at, if_tag=if_tag, stamp=stamp)
            self._ok("update")
            return bool(updated)

        return await self._run("update", action, False)

    async def remove(self, key: str) -> None:
        async def action() -> None:
            await self.store.remove(key)
            self._ok("remove")

        await self._run("remove", action, None)
