"""Single flight never takes a caller's own timeout or cancellation away (docs/protocol.md section 5).

Two identical calls share one request, but each caller keeps its own read timeout and its own cancel
scope: a follower fails when its own timeout elapses (as the SDK fails a timed-out request), not when the
leader's does, and never waits longer than it asked to; a leader that times out or is cancelled does not
fail its follower, which gets the answer. A call that starts after a mutating call returned never joins a
read sent before it (read-your-writes).

The server is tests/fixture_servers/twins.py, whose `slow` tool answers after the delay it is given; it runs in
this process (memory streams) and in its own (stdio, streamable HTTP on 127.0.0.1). Times are asserted
only as bounds with generous margins, and as the order in which two callers finished.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as mt
import pytest
from fixture_servers.twins import SCRIPT as TWINS_SCRIPT
from fixture_servers.twins import build_twins
from support.transports import MODERN, ServerTarget, TransportKind

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.stores import MemoryStore

from .harness import Conn, ViewKind, connect

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

DELAY = 2.0
"""How long `slow` takes to answer."""
SHORT = 0.5
LONG = 10.0
HUNDRED = 100
MARGIN = 2.0
"""Generous: a bound on how long a caller that asked for `SHORT` may wait, not a speed."""

CELLS: list[tuple[TransportKind, ViewKind]] = [
    ("memory", "mcp"),
    ("memory", "session"),
    ("memory", "fastmcp"),
    ("stdio", "fastmcp"),
    ("http", "mcp"),
    ("http", "fastmcp"),
]


def target(transport: TransportKind, twin_urls: dict[str, str]) -> ServerTarget:
    if transport == "memory":
        return ServerTarget.memory(build_twins("A"))
    if transport == "stdio":
        return ServerTarget.stdio("fastmcp", TWINS_SCRIPT, "stdio")
    return ServerTarget.http("fastmcp", twin_urls["A"])


def fresh_cache(settings: CacheSettings | None = None) -> ToolCache:
    # The real clock: single flight compares when a request was sent with when freshness ended.
    return ToolCache(MemoryStore(), settings)


async def call_view(conn: Conn, tool: str, arguments: dict[str, Any], timeout_s: float | None) -> Any:
    """A call through the cache, with the per-call timeout spelled as each client spells it; returns the
    view's `CachedCall` (its `result` has `structured_content` on every client)."""
    if conn.kind == "fastmcp":
        return await conn.view.call(tool, arguments, timeout=timeout_s)
    return await conn.view.call(tool, arguments, read_timeout_seconds=timeout_s)


async def call_stock(conn: Conn, tool: str, arguments: dict[str, Any], timeout_s: float | None) -> Any:
    """The same call on the stock client, around the cache."""
    if conn.kind == "fastmcp":
        return await conn.client.call_tool(tool, arguments, timeout=timeout_s)
    if conn.kind == "session":
        return await conn.client.session.call_tool(tool, arguments, read_timeout_seconds=timeout_s)
    return await conn.client.call_tool(tool, arguments, read_timeout_seconds=timeout_s)


async def body_runs(conn: Conn, key: str) -> int:
    """How many times the server started `slow` for `key` (asked around the cache)."""
    result = await conn.direct("body_runs", {"key": key})
    structured = result.structured_content or {}
    return int(structured.get("result", 0))


async def until_running(conn: Conn, key: str, runs: int = 1) -> int:
    """Wait until the server has started `runs` bodies for `key`: the leader's request is in flight.
    Returns how many `tools/call` requests the waiting itself sent."""
    polls = 1
    with anyio.fail_after(30):  # a guard against a hang, not a timing assertion
        while await body_runs(conn, key) < runs:
            polls += 1
            await anyio.sleep(0.02)
    return polls


@dataclass
class Outcome:
    """What one caller got, and when it finished (anyio's clock)."""

    started: float
    finished: float = math.inf
    answer: dict[str, Any] | None = None
    coalesced: bool | None = None
    error: BaseException | None = None
    cancelled: bool = False

    @property
    def waited(self) -> float:
        return self.finished - self.started


async def caller(
    conn: Conn, key: str, timeout_s: float | None, out: Outcome, scope: anyio.CancelScope | None = None
) -> None:
    scope = scope if scope is not None else anyio.CancelScope()
    with scope:
        try:
            call = await call_view(conn, "slow", {"key": key, "delay": DELAY}, timeout_s)
            out.answer = call.result.structured_content
            out.coalesced = call.outcome.coalesced
        except Exception as exc:
            out.error = exc
        finally:
            out.finished = anyio.current_time()
    out.cancelled = scope.cancelled_caught


async def leader_then_follower(
    conn: Conn,
    key: str,
    leader_timeout: float | None,
    follower_timeout: float | None,
    *,
    cancel: Callable[[anyio.CancelScope, anyio.CancelScope], None] | None = None,
) -> tuple[Outcome, Outcome]:
    """A leader whose request is in flight at the server, then an identical follower; `cancel` is given
    both cancel scopes once both are waiting."""
    leader, follower = Outcome(anyio.current_time()), Outcome(0.0)
    leader_scope, follower_scope = anyio.CancelScope(), anyio.CancelScope()
    async with anyio.create_task_group() as group:
        group.start_soon(caller, conn, key, leader_timeout, leader, leader_scope)
        await until_running(conn, key)
        follower.started = anyio.current_time()
        group.start_soon(caller, conn, key, follower_timeout, follower, follower_scope)
        await anyio.wait_all_tasks_blocked()
        if cancel is not None:
            cancel(leader_scope, follower_scope)
    return leader, follower


def assert_times_out_like_stock(out: Outcome, stock: BaseException) -> None:
    assert out.error is not None, f"expected {stock!r}, got {out.answer!r}"
    assert type(out.error) is type(stock), (out.error, stock)
    assert getattr(out.error, "code", None) == getattr(stock, "code", None) == mt.REQUEST_TIMEOUT
    assert str(out.error) == str(stock)


def assert_answer(out: Outcome, key: str) -> None:
    assert out.error is None, f"expected the answer, got {out.error!r}"
    assert not out.cancelled
    assert out.answer is not None
    assert (out.answer["key"], out.answer["text"]) == (key, f"{key}: first edition")


@pytest.mark.parametrize(("transport", "view_kind"), CELLS)
async def test_each_caller_keeps_its_own_timeout_and_cancellation_and_one_request_is_shared(
    transport: TransportKind, view_kind: ViewKind, twin_urls: dict[str, str]
) -> None:
    prefix = f"timeouts-{transport}-{view_kind}"
    # Trusted, so that `slow` (annotated read-only) is a read: a call of a tool that may write ends the
    # partition's freshness when it times out or is cancelled (its outcome is unknown), and then a follower
    # of another scenario on this connection, coming later, would rightly not share its leader's request.
    async with connect(
        view_kind, target(transport, twin_urls), MODERN, fresh_cache(CacheSettings(trusted=True))
    ) as conn:
        await body_runs(conn, "warm-up")  # the first call on a connection may pay for one-time set-up
        # What the stock client raises for this timeout, so the cache is held to exactly that.
        with pytest.raises(Exception, match="timed out") as stock_timeout:
            await call_stock(conn, "slow", {"key": f"{prefix}-stock", "delay": DELAY}, SHORT)
        stock = stock_timeout.value
        assert getattr(stock, "code", None) == mt.REQUEST_TIMEOUT, stock

        outcomes: dict[str, tuple[Outcome, Outcome]] = {}

        def scenario(
            name: str, make: Callable[[], Awaitable[tuple[Outcome, Outcome]]]
        ) -> Callable[[], Awaitable[None]]:
            async def run() -> None:
                outcomes[name] = await make()

            return run

        # The scenarios run side by side on the one connection, each on a key of its own (so each is its
        # own flight): the cell costs one `slow` answer or two, not one per scenario.
        keys = {
            name: f"{prefix}-{name}"
            for name in ("short-leader", "short-follower", "untimed-leader", "follower-cancelled", "leader-cancelled")
        }
        runs = [
            scenario("short-leader", lambda: leader_then_follower(conn, keys["short-leader"], SHORT, LONG)),
            scenario("short-follower", lambda: leader_then_follower(conn, keys["short-follower"], 4.0, SHORT)),
            scenario("untimed-leader", lambda: leader_then_follower(conn, keys["untimed-leader"], None, SHORT)),
            scenario(
                "follower-cancelled",
                lambda: leader_then_follower(
                    conn, keys["follower-cancelled"], None, None, cancel=lambda lead, follow: follow.cancel()
                ),
            ),
            scenario(
                "leader-cancelled",
                lambda: leader_then_follower(
                    conn, keys["leader-cancelled"], None, None, cancel=lambda lead, follow: lead.cancel()
                ),
            ),
        ]
        with anyio.fail_after(60):  # a guard against a hang, not a timing assertion
            async with anyio.create_task_group() as group:
                for run in runs:
                    group.start_soon(run)
        started = {name: await body_runs(conn, key) for name, key in keys.items()}

        # A hundred identical calls in one partition: exactly one tools/call on the wire.
        hundred_key = f"{prefix}-hundred"
        hundred: list[Any] = [None] * HUNDRED
        mark = conn.mark()

        async def one(index: int) -> None:
            hundred[index] = await call_view(conn, "slow", {"key": hundred_key, "delay": 0.5}, LONG)

        with anyio.fail_after(60):  # a guard against a hang
            async with anyio.create_task_group() as group:
                for index in range(HUNDRED):
                    group.start_soon(one, index)
        hundred_calls = conn.tool_calls(mark)
        hundred_runs = await body_runs(conn, hundred_key)

    # Leader 0.5 s, follower 10 s: the leader fails as the stock client fails; the follower gets the
    # answer (its own request, sent when the leader gave up: the leader's timeout was not its own).
    leader, follower = outcomes["short-leader"]
    assert_times_out_like_stock(leader, stock)
    assert_answer(follower, keys["short-leader"])
    assert started["short-leader"] == 2

    # Leader 4 s, follower 0.5 s: the follower fails with the timeout error, before the leader's answer
    # arrived and within its own bound; the leader gets the answer, and only one request was sent.
    leader, follower = outcomes["short-follower"]
    assert_answer(leader, keys["short-follower"])
    assert_times_out_like_stock(follower, stock)
    assert follower.finished < leader.finished
    assert follower.waited <= SHORT + MARGIN
    assert started["short-follower"] == 1

    # Leader with no timeout, follower 0.5 s: the follower still fails within its own bound.
    leader, follower = outcomes["untimed-leader"]
    assert_answer(leader, keys["untimed-leader"])
    assert_times_out_like_stock(follower, stock)
    assert follower.finished < leader.finished
    assert follower.waited <= SHORT + MARGIN
    assert started["untimed-leader"] == 1

    # A cancelled follower leaves the leader alone.
    leader, follower = outcomes["follower-cancelled"]
    assert follower.cancelled
    assert (follower.error, follower.answer) == (None, None)
    assert_answer(leader, keys["follower-cancelled"])
    assert leader.coalesced is False
    assert started["follower-cancelled"] == 1

    # A cancelled leader does not fail its follower: the follower gets the answer.
    leader, follower = outcomes["leader-cancelled"]
    assert leader.cancelled
    assert (leader.error, leader.answer) == (None, None)
    assert_answer(follower, keys["leader-cancelled"])

    assert (hundred_calls, hundred_runs) == (1, 1)
    assert all(c.result.structured_content["text"] == f"{hundred_key}: first edition" for c in hundred)
    assert sum(1 for c in hundred if not c.outcome.coalesced) == 1


@pytest.mark.parametrize(("transport", "view_kind"), [("memory", "mcp"), ("http", "fastmcp")])
async def test_a_read_started_after_a_write_does_not_join_a_read_sent_before_it(
    transport: TransportKind, view_kind: ViewKind, twin_urls: dict[str, str]
) -> None:
    key = f"ryw-{transport}-{view_kind}"
    args = {"key": key, "delay": DELAY}
    async with connect(
        view_kind, target(transport, twin_urls), MODERN, fresh_cache(CacheSettings(trusted=True))
    ) as conn:
        await conn.view.call_tool("whoami", {})  # connected, and the tools' annotations are known
        mark = conn.mark()
        first: dict[str, Any] = {}
        second: dict[str, Any] = {}

        async def read(into: dict[str, Any]) -> None:
            call = await call_view(conn, "slow", args, LONG)
            into.update(text=call.result.structured_content["text"], outcome=call.outcome)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(read, first)
                polls = await until_running(conn, key)  # R1's body has read the first edition and is answering
                # A mutating call through the cache completes while R1 is in flight ...
                written = await call_view(conn, "write", {"key": key, "text": f"{key}: second edition"}, LONG)
                assert not written.result.is_error
                # ... and only then does the identical read R2 start.
                group.start_soon(read, second)
        reads = conn.tool_calls(mark) - polls - 1  # less the polls, and the write's one tools/call
        runs = await body_runs(conn, key)
        again = await call_view(conn, "slow", args, LONG)

    # R1 answers what was current when it was sent; R2 what a stock client would get after the write.
    assert first["text"] == f"{key}: first edition"
    assert second["text"] == f"{key}: second edition"
    assert second["outcome"].coalesced is False
    assert (reads, runs) == (2, 2)
    # What R1 stored later never shadows R2's newer answer.
    assert again.outcome.status == "fresh_hit"
    assert again.result.structured_content["text"] == f"{key}: second edition"
