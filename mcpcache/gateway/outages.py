"""What `mcpcache gateway` says about its store being down: one line when it cannot be reached (at start, or
when it stops answering), one when it answers again, never a traceback.

A store that fails is a miss in every call (the caches' fence and the delta history see to it); the gateway
serves without it. What a person at the console needs is when that began and ended, not a warning (and a
chained traceback) per failing operation. So the gateway's logging runs through `OneLine` (every record one
line, an exception as its innermost cause) and `StoreOutages`, which turns the first failure raised inside the
store (`mcpcache.stores`) into the outage's one line and holds back those that follow, while `watch` asks the
store every few seconds until it answers again.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from pathlib import Path

import anyio

from mcpcache.stores.base import Store
from mcpcache.stores.fence import STORE_DOWN, STORE_UP

__all__ = ["OneLine", "StoreOutages", "cause_of", "install_logging"]

PROBE_KEY = "mcpcache-gateway-probe"
"""A key nothing stores: a lookup of it asks the store something without touching what it holds."""
PROBE_DEADLINE_S = 3.0
"""How long the store has to answer a probe (a connection refused answers at once)."""
RECHECK_S = 5.0
"""How often a store that is down is asked again."""

_STORES = str(Path(__file__).resolve().parents[1] / "stores")


def cause_of(exc: BaseException) -> str:
    """The innermost cause that says something, as `Type: message` (an exception group's first)."""
    while True:
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        elif exc.__cause__ is not None:
            exc = exc.__cause__
        else:
            break
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class OneLine(logging.Formatter):
    """A record as one line: its message, and for an exception its innermost cause, never a traceback."""

    def __init__(self) -> None:
        super().__init__("%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        message = " ".join(record.getMessage().split())
        if record.exc_info and record.exc_info[1] is not None:
            message += f" ({cause_of(record.exc_info[1])})"
        return message


def _raised_by_the_store(exc: BaseException) -> bool:
    return any(frame.filename.startswith(_STORES) for frame in traceback.extract_tb(exc.__traceback__))


class StoreOutages(logging.Filter):
    """One line per outage of the gateway's store (`say`), and the store's failures held back meanwhile."""

    def __init__(self, store: Store, shown: str, say: Callable[[str], None]) -> None:
        super().__init__()
        self.store = store
        self.shown = shown
        self.say = say
        self.down = False

    def filter(self, record: logging.LogRecord) -> bool:
        # The fences of the gateway's caches and delta history each say their own outage; the gateway's one
        # line stands for all of them, and `watch` says when the store answers again.
        down = getattr(record, STORE_DOWN, None)
        if down is not None:
            self.went_down(str(down))
            return False
        if getattr(record, STORE_UP, False):
            return False
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not _raised_by_the_store(exc):
            return True
        self.went_down(cause_of(exc))
        return False

    def went_down(self, why: str) -> None:
        if not self.down:
            self.down = True
            said = f"the store {self.shown} is unreachable ({why}); serving without it until it answers"
            self.say(f"mcpcache gateway: {said}")

    async def probe(self) -> str | None:
        """Why the store does not answer (None: it does)."""
        try:
            with anyio.fail_after(PROBE_DEADLINE_S):
                await self.store.peek_many([PROBE_KEY])
        except TimeoutError:
            return f"no answer within {PROBE_DEADLINE_S:g} s"
        except Exception as exc:
            return cause_of(exc)
        return None

    async def watch(self) -> None:
        """While the store is down, ask it again every `RECHECK_S`; say once when it answers."""
        while True:
            await anyio.sleep(RECHECK_S)
            if self.down and await self.probe() is None:
                self.down = False
                self.say(f"mcpcache gateway: the store {self.shown} answers again")


def install_logging(outages: StoreOutages | None) -> None:
    """The gateway process's `mcpcache` loggers write one line per record to stderr (warnings and worse)."""
    handler = logging.StreamHandler()
    handler.setFormatter(OneLine())
    if outages is not None:
        handler.addFilter(outages)
    root = logging.getLogger("mcpcache")
    root.addHandler(handler)
    root.propagate = False
    if root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)
