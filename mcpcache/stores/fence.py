"""The store fence: every store operation of the tool cache, the gateway's delta history and references goes
through one, so a failing store is the same quick miss for all three.

A failing store is a miss, never a failed call, and a store that does not answer within its deadline is a
failing store: the fence enforces both, whatever the store does. An operation that raises, or that does
not finish within its deadline, is abandoned and reported as a miss (a load) or a skipped write (a save).

The deadline is `deadline_s` for any operation, plus `seconds_per_mb` for every MB of body it moves
(`transfer_budget_s`): a save knows its body's length, and a body is loaded only after a metadata peek
read the length recorded when it was saved. The bytes counted are bounded by `most_bytes` (the largest
body its owner stores), so a record that claims to be huge cannot buy a frozen store a long wait.

A store that misses its deadline is not asked again for `cooldown_s` (a circuit): a frozen server or a
lock held elsewhere costs one deadline, not one per call. A store that fails quickly (refused connection,
an exception) costs little and is asked again on the next call.

What a person reads is one line when an outage begins, with its real reason ("save failed
(OperationalError: database is locked)"), and one line when the store answers again, however many calls
the outage cost: every failure is counted (`on_failure`), none is printed on its own, and no traceback is
printed (the first failure's is logged at DEBUG). An outage ends when a kind of operation that failed in it
(load, save, ...) works again, or any operation once the store missed a deadline (it answered nothing): a
store that can be read but not written (a read-only file, a write lock held elsewhere) says so once, not
once per call, and a server that comes back says so at its first answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

import anyio

from mcpcache.stores.base import Store
from mcpcache.stores.circuit import Circuit
from mcpcache.stores.items import DEFAULT_SECONDS_PER_MB, Item, transfer_budget_s

__all__ = [
    "DEFAULT_FENCE",
    "DEFAULT_STORE_COOLDOWN_S",
    "DEFAULT_STORE_DEADLINE_S",
    "DEFAULT_STORE_SECONDS_PER_MB",
    "STORE_DOWN",
    "STORE_UP",
    "FenceSettings",
    "FencedStore",
]

T = TypeVar("T")

DEFAULT_STORE_DEADLINE_S: Final = 1.0
DEFAULT_STORE_COOLDOWN_S: Final = 5.0
DEFAULT_STORE_SECONDS_PER_MB: Final = DEFAULT_SECONDS_PER_MB

STORE_DOWN: Final = "mcpcache_store_down"
"""On the log record of an outage's first failure: what failed (an application that says outages its own way,
as `mcpcache gateway` does, reads it and holds the record back)."""
STORE_UP: Final = "mcpcache_store_up"
"""On the log record of an outage's end."""

_MOST_REASON_CHARS: Final = 300
_ANY: Final = "*"
"""In the failing kinds: the store missed a deadline, so any answer of it ends the outage."""


@dataclass(frozen=True)
class FenceSettings:
    """How long a store may take before it counts as failing, and how long it is then left alone."""

    deadline_s: float = DEFAULT_STORE_DEADLINE_S
    """What any store operation may take (> 0), before the time its body adds (`seconds_per_mb`)."""
    cooldown_s: float = DEFAULT_STORE_COOLDOWN_S
    """How long a store that missed a deadline is not asked (>= 0; 0: asked again on the next call)."""
    seconds_per_mb: float = DEFAULT_STORE_SECONDS_PER_MB
    """What an operation may take on top of `deadline_s` for every MB (10^6 bytes) of body it moves (>= 0)."""

    def __post_init__(self) -> None:
        if not self.deadline_s > 0:
            raise ValueError(f"store deadline must be > 0 seconds, got {self.deadline_s!r}")
        if not self.cooldown_s >= 0:
            raise ValueError(f"store cooldown must be >= 0 seconds, got {self.cooldown_s!r}")
        if not self.seconds_per_mb >= 0:
            raise ValueError(f"store deadline per MB must be >= 0 seconds, got {self.seconds_per_mb!r}")


DEFAULT_FENCE: Final = FenceSettings()


def _reason(exc: BaseException) -> str:
    """`failed (Type: message)` on one line, cut to a readable length."""
    text = " ".join(str(exc).split()) or "no message"
    if len(text) > _MOST_REASON_CHARS:
        text = text[: _MOST_REASON_CHARS - 1] + "…"
    return f"failed ({type(exc).__name__}: {text})"


class FencedStore:
    """The store's operations, each bounded by a deadline, with every failure turned into a miss.

    `who` names the store in its lines ("tool cache store", "reference store"); `meanwhile` says
    what its users get while the store fails ("calls go on without the cache"); `logger` is the owner's."""

    def __init__(
        self,
        store: Store,
        *,
        who: str,
        meanwhile: str,
        logger: logging.Logger,
        on_failure: Callable[[], None] = lambda: None,
        settings: FenceSettings = DEFAULT_FENCE,
        most_bytes: int = 0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.settings = settings
        self.deadline_s = settings.deadline_s
        self.cooldown_s = settings.cooldown_s
        self.seconds_per_mb = settings.seconds_per_mb
        self.most_bytes = most_bytes
        self._who = f"{who} ({type(store).__name__})"
        self._meanwhile = meanwhile
        self._logger = logger
        self._on_failure = on_failure
        self._monotonic = monotonic
        self._circuit = Circuit(settings.cooldown_s, monotonic=monotonic)
        self._failing: set[str] = set()
        """The kinds of operation that failed in the current outage."""
        self._trouble: str | None = None
        self._outage_began = 0.0
        self._outage_failures = 0

    @property
    def circuit_open(self) -> bool:
        return self._circuit.is_open

    @property
    def trouble(self) -> str | None:
        """Why the store is failing ("failed (ConnectionError: ...)", "did not answer within 1 s"), or None
        while it works: what an outcome's reason says instead of guessing."""
        return self._trouble

    def deadline_for(self, nbytes: int) -> float:
        """The deadline of an operation moving `nbytes` of body (counted up to `most_bytes`)."""
        return transfer_budget_s(self.deadline_s, self.seconds_per_mb, nbytes, self.most_bytes)

    async def run(self, op: str, action: Callable[[], Awaitable[T]], default: T, *, moving: int = 0) -> T:
        """`action()` within its deadline, or `default` when the store fails, misses the deadline or recently
        missed one. `op` names the kind of operation in what is logged ("load", "save", ...)."""
        if self.circuit_open:
            return default
        deadline = self.deadline_for(moving)
        try:
            with anyio.move_on_after(deadline) as scope:
                done = await action()
                self.worked(op)
                return done
        except Exception as exc:
            self.failed(op, _reason(exc), exc)
            return default
        if scope.cancelled_caught:
            # Not asked again for a while: a store that does not answer would otherwise cost every call
            # its deadline.
            self._circuit.trip()
            self.failed(op, f"did not answer within {deadline:g} s", silent=True)
        return default

    def failed(self, op: str, what: str, exc: BaseException | None = None, *, silent: bool = False) -> None:
        """Count a failure of `op` (`what`: "failed (...)" or "did not answer within ..."); the first of an
        outage is the one line logged. `silent`: the store answered nothing at all (a missed deadline), so
        whatever it answers next ends the outage."""
        self._on_failure()
        self._failing.add(_ANY if silent else op)
        if self._trouble is not None:
            self._outage_failures += 1
            return
        self._trouble = what
        self._outage_began = self._monotonic()
        self._outage_failures = 1
        left = f" (not asked again for {self.cooldown_s:g} s)" if self.circuit_open and self.cooldown_s else ""
        self._logger.warning(
            "%s: %s %s%s; %s until it answers again",
            *(self._who, op, what, left, self._meanwhile),
            extra={STORE_DOWN: f"{op} {what}"},
        )
        if exc is not None:
            self._logger.debug("%s: %s failed", self._who, op, exc_info=exc)

    def worked(self, op: str) -> None:
        """`op` worked: the outage ends if that kind of operation failed in it, or the store was silent."""
        if not self._failing or (op not in self._failing and _ANY not in self._failing):
            return
        self._failing.clear()
        if self._trouble is None:
            return
        took = self._monotonic() - self._outage_began
        failures = self._outage_failures
        self._trouble = None
        noun = "operation" if failures == 1 else "operations"
        self._logger.warning(
            "%s answers again after %d failed %s in %.1f s", self._who, failures, noun, took, extra={STORE_UP: True}
        )

    # The operations ------------------------------------------------------------------------------

    async def look(self, keys: Sequence[str], *, peek: bool = False, moving: int = 0) -> list[Item | None] | None:
        """`Store.load_many` (or `peek_many`: without bodies), or None when the store did not answer (its
        circuit open, a failure, the deadline): the caller then knows nothing the store holds, not even
        that nothing is there. `moving`: the bytes of body the load is expected to bring (see the module
        docstring)."""

        async def action() -> list[Item | None]:
            return await (self.store.peek_many(keys) if peek else self.store.load_many(keys))

        now: list[Item | None] | None = None
        if peek and not self.circuit_open:
            # A store in this process's memory answers at once: no deadline to watch (a cancel scope is most
            # of what a fresh hit from memory would otherwise cost).
            try:
                now = self.store.peek_now(keys)
            except Exception as exc:
                self.failed("load", _reason(exc), exc)
                return None
            if now is not None:
                self.worked("load")
        items = await self.run("load", action, None, moving=0 if peek else moving) if now is None else now
        if not isinstance(items, list) or len(items) != len(keys):
            return None
        return [item if isinstance(item, Item) else None for item in items]

    async def load(self, key: str, *, moving: int = 0) -> Item | Literal[False] | None:
        """`Store.load`: the item, None when none is held, False when the store did not answer."""

        async def action() -> Item | Literal[False] | None:
            item = await self.store.load(key)
            return item if isinstance(item, Item) else None

        return await self.run("load", action, False, moving=moving)

    async def load_many(self, keys: Sequence[str]) -> list[Item | None]:
        """`Store.load_many` (each of them answers None on any failure)."""
        items = await self.look(keys)
        return [None] * len(keys) if items is None else items

    async def peek_many(self, keys: Sequence[str]) -> list[Item | None]:
        """`Store.peek_many`: the items without their bodies (each of them answers None on any failure)."""
        items = await self.look(keys, peek=True)
        return [None] * len(keys) if items is None else items

    async def save(self, key: str, item: Item) -> bool:
        """`Store.save`; False when it was refused or the store failed (`trouble` then says why)."""

        async def action() -> bool:
            stored = await self.store.save(key, item)
            return stored is not False  # a store that returns nothing stored it

        return await self.run("save", action, False, moving=len(item.body))

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
                except Exception as exc:
                    self.failed("save", _reason(exc), exc)
                    if attempt + 1 < attempts:
                        await anyio.sleep(0.02)
                    continue
                self.worked("save")
                return stored is not False
            self.failed("save", f"did not answer within {self.deadline_s:g} s", silent=True)
            break
        return False

    async def update_meta(
        self, key: str, meta: Mapping[str, Any], expires_at: float | None, *, if_tag: str | None, stamp: float
    ) -> bool:
        async def action() -> bool:
            return bool(await self.store.update_meta(key, meta, expires_at, if_tag=if_tag, stamp=stamp))

        return await self.run("update", action, False)

    async def remove(self, key: str) -> None:
        async def action() -> None:
            await self.store.remove(key)

        await self.run("remove", action, None)

    async def trim_group(self, group: str, max_bytes: int) -> int:
        """`Store.trim_group`: how many items it evicted (0 when the store failed)."""

        async def action() -> int:
            return await self.store.trim_group(group, max_bytes)

        return await self.run("trim", action, 0)
