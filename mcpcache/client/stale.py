"""Serving stale answers (docs/protocol.md section 12): RFC 5861's two windows, as a server grants them in
the cache block (`staleWhileRevalidateMs`, `staleIfErrorMs`).

- stale-while-revalidate: a call whose stored answer went stale by its ttl less than the window ago is
  served that answer at once (outcome `stale_while_revalidate`), and the answer is revalidated in the
  background: one request per entry at a time however many callers read it meanwhile (`Background`), at
  most `background_revalidations` at once in one cache (past that a call revalidates in the foreground,
  as without the window), each bounded in time, all cancelled and awaited by `ToolCache.close()`. A
  background revalidation's failure is counted and logged, never raised to anybody.
- stale-if-error: a call that fails because the server could not answer (unreachable, the connection
  lost, a timeout, a JSON-RPC error: `server_failure`) is served the stored answer when it went stale
  less than the window ago (outcome `stale_if_error`, the failure in its reason). A tool's own `isError`
  answer is an answer, not a failure: it never reaches this path, and is returned as it came.

Neither ever serves an entry whose freshness a write ended (a call that is not read-only, a change
notification, `invalidate`, `clear`): `mcpcache.client.policy.decide_stale` says no whatever the server
allows, so a caller always reads its own writes. The decisions are there; this module does what they say.

`StaleServing` is a part `ToolCache` (`mcpcache.client.cache`) owns: it reads through the cache's `Reader`
(`mcpcache.client.lookup`), and is handed the two driver steps it uses (sending a call as the lookup decided,
and finishing a served call) as functions when the driver builds it.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, assert_never

import anyio
import mcp_types as mt
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import CallToolResult

from mcpcache.canonical import CanonicalizationError
from mcpcache.client.contracts import Connection
from mcpcache.client.keyrules import KeyRules
from mcpcache.client.keys import CallIdentity
from mcpcache.client.lookup import Reader
from mcpcache.client.outcomes import CallOutcome
from mcpcache.client.path import Looked, Served
from mcpcache.client.policy import CacheMode, NotStale, ServeFresh, ServeStale, decide_stale
from mcpcache.client.shelf import Shelf

__all__ = [
    "DEFAULT_BACKGROUND_TIMEOUT_S",
    "Background",
    "Finish",
    "Send",
    "StaleServing",
    "server_failure",
]

Send = Callable[
    [Connection, CallIdentity, str, CacheMode, dict[str, Any] | None, Looked, float | None], Awaitable[Served]
]
"""The driver's step that sends a call as its lookup decided (a conditional request, or a full fetch), and keeps
the answer (`ToolCache._send`)."""

Finish = Callable[[CallIdentity, CallToolResult, CallOutcome], Served]
"""The driver's last step of a served call: its outcome counted and logged (`ToolCache._finish`)."""

logger = logging.getLogger("mcpcache.client")

DEFAULT_BACKGROUND_TIMEOUT_S = 60.0
"""The bound of a background revalidation whose caller's connection sets no read timeout of its own."""

_CONNECTION_FAILURES: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
)


def _transport_failures() -> tuple[type[BaseException], ...]:
    """The HTTP clients' own transport errors (the MCP SDK's and FastMCP's), when they are installed."""
    found: list[type[BaseException]] = []
    for module in ("httpx", "httpx2"):
        try:
            error = importlib.import_module(module).TransportError
        except (ImportError, AttributeError):
            continue
        if isinstance(error, type) and issubclass(error, BaseException):
            found.append(error)
    return tuple(found)


_HTTP_FAILURES: tuple[type[BaseException], ...] | None = None


def server_failure(exc: BaseException) -> str | None:
    """How a call failed, when the failure is the server's not answering (what stale-if-error covers): its
    JSON-RPC error (a timeout and a lost connection are such errors in the MCP SDK), or a transport that
    could not reach it. None for anything else: a cancellation, a bug, an answer that fails the client's
    checks, and a server's demand that the user act first (`UrlElicitationRequiredError`: serving a stored
    answer in its place would hide the demand from the user)."""
    global _HTTP_FAILURES
    if isinstance(exc, UrlElicitationRequiredError):
        return None
    if isinstance(exc, MCPError):
        if exc.code == mt.REQUEST_TIMEOUT:
            return "the request timed out"
        if exc.code == mt.CONNECTION_CLOSED:
            return "the connection to the server closed"
        return f"the server answered JSON-RPC error {exc.code}: {str(exc)[:200]}"
    if _HTTP_FAILURES is None:
        _HTTP_FAILURES = _transport_failures()
    if isinstance(exc, _CONNECTION_FAILURES + _HTTP_FAILURES):
        return f"the server could not be reached ({type(exc).__name__})"
    return None


def _loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (the MCP SDKs run on asyncio; trio is not a target): nothing runs beside
        return None


class Background:
    """The revalidations one cache runs beside its calls, by store key: one per key at a time, at most
    `limit` at once. `close()` cancels and awaits them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_key: dict[str, asyncio.Task[None]] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def running(self, key: str) -> bool:
        return key in self._by_key

    def start(self, key: str, work: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        """Run `work()` beside the caller for `key`; False when it cannot (one already runs for the key, the
        bound is reached, or the loop is not asyncio's), and then nothing was started."""
        loop = _loop()
        if loop is None or key in self._by_key or len(self._by_key) >= self.limit:
            return False
        task = loop.create_task(work(), name=f"mcpcache background revalidation {key[:24]}")
        self._by_key[key] = task
        task.add_done_callback(lambda done: self._forget(key, done))
        return True

    def _forget(self, key: str, task: asyncio.Task[None]) -> None:
        if self._by_key.get(key) is task:
            del self._by_key[key]
        if not task.cancelled() and task.exception() is not None:  # pragma: no cover - `work` catches its failures
            logger.warning("tool cache: a background revalidation failed", exc_info=task.exception())

    async def wait(self) -> None:
        """Wait until no revalidation runs (those started meanwhile included); never cancels one."""
        while self._by_key:
            await asyncio.wait(list(self._by_key.values()))

    async def close(self) -> None:
        """Cancel every revalidation running and wait until each has stopped (whatever it was doing: a store
        write it started is bounded by the store's deadline)."""
        while self._by_key:
            tasks = list(self._by_key.values())
            for task in tasks:
                task.cancel()
            # asyncio.wait, not gather: a closer cancelled while it waits does not cancel anything else.
            await asyncio.wait(tasks)


class StaleServing:
    """Serving stale for one cache: the stale-while-revalidate serve and its background revalidation, and the
    stale-if-error serve in place of a failed call."""

    def __init__(
        self, shelf: Shelf, reader: Reader, key_rules: KeyRules, background: Background, *, send: Send, finish: Finish
    ) -> None:
        self.clock = shelf.clock
        self.stats = shelf.stats
        self.partition = shelf.partition
        self.serve_stale = shelf.settings.serve_stale
        self._reader = reader
        self._key_rules = key_rules
        self._background = background
        self._send = send
        self._finish = finish

    async def serve_while_revalidating(
        self,
        conn: Connection,
        identity: CallIdentity,
        key: str,
        mode: CacheMode,
        user_meta: dict[str, Any] | None,
        looked: Looked,
    ) -> Served | None:
        """A stored answer that is no longer fresh, served at once while a background revalidation (this call's,
        or one already running for the entry) brings it up to date; None when the call goes on as without the
        window (no window, past it, a write ended its freshness, the answer could not be loaded, or the
        background is at its bound, so this call revalidates in the foreground)."""
        found = looked.found
        if mode != "use" or found is None or not self.serve_stale or isinstance(looked.decision, ServeFresh):
            return None
        if not found.entry.stale_while_revalidate_ms:
            return None  # the common case, decided without a reason to build
        choice = decide_stale("stale_while_revalidate", found.entry, self.clock(), looked.ended_at)
        match choice:
            case NotStale():
                logger.debug("tool %r: %s", identity.tool, choice.reason)
                return None
            case ServeStale():
                pass
            case _:
                assert_never(choice)
        if not self._background.running(key) and len(self._background) >= self._background.limit:
            logger.info("tool %r: %s revalidations run in the background already; revalidating in the foreground",
                        identity.tool, len(self._background))  # fmt: skip
            return None
        stored = await self._reader.answer_of(found)
        if not isinstance(stored, CallToolResult):
            return None  # the ordinary path meets the same trouble and deals with it
        # Started once the answer is in hand, nothing awaited between the check and the start: one per key.
        if not self._background.running(key):
            if not self._background.start(key, lambda: self._revalidate_behind(conn, identity, key, user_meta, looked)):
                return None  # the bound was reached meanwhile (or the loop is not asyncio's): the foreground's turn
            self.stats.background_revalidations += 1
        return stored, CallOutcome("stale_while_revalidate", False, choice.reason)

    async def _revalidate_behind(
        self,
        conn: Connection,
        identity: CallIdentity,
        key: str,
        user_meta: dict[str, Any] | None,
        looked: Looked,
    ) -> None:
        """The revalidation a stale-while-revalidate serve started: what the lookup decided (a conditional
        request with the entry's tag, or a full fetch), kept as any answer is kept. Bounded by the caller's
        read timeout (or `DEFAULT_BACKGROUND_TIMEOUT_S`); its failure stays here."""
        timeout_s = conn.timeout_s if conn.timeout_s is not None else DEFAULT_BACKGROUND_TIMEOUT_S
        try:
            with anyio.fail_after(timeout_s):
                _, outcome = await self._send(conn, identity, key, "use", user_meta, looked, timeout_s)
        except asyncio.CancelledError:
            self.stats.background_failures += 1
            logger.debug("tool %r: the background revalidation was cancelled", identity.tool)
            raise
        except Exception as exc:
            self.stats.background_failures += 1
            why = server_failure(exc) or f"{type(exc).__name__}: {str(exc)[:200]}"
            logger.info("tool %r: the background revalidation failed (%s); the stored answer stays", identity.tool, why)
            return
        logger.debug("tool %r: background revalidation: %s (%s)", identity.tool, outcome.status, outcome.reason)

    async def serve_if_error(
        self,
        conn: Connection,
        name: str,
        arguments: Mapping[str, Any] | None,
        mode: CacheMode,
        variant: str,
        exc: Exception,
    ) -> Served | None:
        """The stored answer in place of a call that failed because the server could not answer, when its
        stale-if-error window allows; None: the failure is the caller's, as without the cache.

        The entry is looked up again (one metadata read): what the call found before it was sent may have
        been replaced meanwhile, and a freshness end recorded meanwhile must be seen (read-your-writes)."""
        failure = server_failure(exc)
        if failure is None or mode != "use" or not self.serve_stale:
            return None
        rule = self._key_rules.known(conn.server_id, name)
        args = dict(arguments or {})
        identity = KeyRules.identity(rule, conn.server_id, self.partition, conn.era, name, args, variant)
        try:
            key = identity.key("private")
        except CanonicalizationError:
            return None
        looked = await self._reader.look(identity, key, "use")
        found = looked.found
        if found is None or not found.entry.stale_if_error_ms:
            return None
        choice = decide_stale("stale_if_error", found.entry, self.clock(), looked.ended_at)
        match choice:
            case NotStale():
                logger.debug("tool %r: %s; %s", name, failure, choice.reason)
                return None
            case ServeStale():
                pass
            case _:
                assert_never(choice)
        stored = await self._reader.answer_of(found)
        if not isinstance(stored, CallToolResult):
            return None
        logger.info("tool %r: %s; %s", name, failure, choice.reason)
        outcome = CallOutcome("stale_if_error", False, f"{failure}; {choice.reason}")
        return self._finish(identity, stored, outcome)
