"""A write whose outcome is unknown ends freshness exactly as an answered write does, in the store too
(docs/protocol.md section 5): a write that times out after the server applied it, whose connection is lost
after the server read it, or whose caller cancels it once the server applied it.

A real FastMCP server over streamable HTTP on 127.0.0.1, stamped by mcpcache: `read` answers the value of a
key, fresh for a minute and servable stale-if-error for ten; `write` (no hints: a write) sets it, then holds
its answer for as long as it is asked to. Cache A calls through a TCP relay (tests/support/relay.py) that can
lose an exchange; cache B is a second `ToolCache` on the same store (SQLite file, Redis namespace), on a
connection of its own, as another process would be. Both hold the key's answer fresh before A's write.
After it, neither serves the old answer, fresh or stale-if-error: both ask the server and get the new one.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp
import mcp_types as mt
import pytest
from fastmcp import FastMCP
from gateway.conftest import served_in_thread
from mcp.shared.exceptions import MCPError
from support.relay import Relay

from mcpcache.client import ToolCache
from mcpcache.client.policy import EndFreshness, KeepFreshness, decide_unanswered
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.stores import RedisStore, SQLiteStore
from mcpcache.stores.base import Store

pytestmark = pytest.mark.anyio

SERVER_ID = "unknown-outcome"
HOLD_S = 30.0
"""How long `write` holds its answer when asked to: past any timeout here; a cancelled call ends it sooner."""
GENEROUS_S = 30.0


@dataclass
class State:
    values: dict[str, str] = field(default_factory=dict)
    applied: dict[str, threading.Event] = field(default_factory=dict)
    released: dict[str, threading.Event] = field(default_factory=dict)
    """Set when a held write may answer (the test is over with it)."""

    def applied_event(self, key: str) -> threading.Event:
        return self.applied.setdefault(key, threading.Event())

    def released_event(self, key: str) -> threading.Event:
        return self.released.setdefault(key, threading.Event())


def build_server(state: State) -> FastMCP[Any]:
    server: FastMCP[Any] = FastMCP("unknown-outcome")

    @server.tool
    def read(key: str) -> dict[str, str]:
        return {"key": key, "value": state.values.get(key, "old")}

    @server.tool
    async def write(key: str, value: str, hold: bool = False) -> dict[str, str]:
        state.values[key] = value
        state.applied_event(key).set()
        if hold:  # until the test is over with it, or the call is cancelled (a thread of the server's own waits)
            await anyio.to_thread.run_sync(state.released_event(key).wait, HOLD_S, abandon_on_cancel=True)
        return {"key": key, "value": value}

    install(server, ToolPolicies({"read": CachePolicy(ttl_ms=60_000, stale_if_error_ms=600_000)}))
    return server


@dataclass(frozen=True)
class Served:
    state: State
    url: str


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    state = State()
    with served_in_thread(build_server(state)) as url:
        yield Served(state, url)


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def two_stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Store, Store]]:
    """Two stores on one place, as two processes would open it."""
    if request.param == "sqlite":
        first: Store = SQLiteStore(tmp_path / "shared.db")
        second: Store = SQLiteStore(tmp_path / "shared.db")
    else:
        url = request.getfixturevalue("redis_url")
        namespace = f"unknown-outcome-{tmp_path.name}"
        first, second = RedisStore(url, namespace=namespace), RedisStore(url, namespace=namespace)
    async with first, second:
        yield first, second


async def value_of(view: Any, key: str) -> tuple[str, str]:
    call = await view.call("read", {"key": key})
    assert not call.result.is_error, call.result
    return call.result.structured_content["value"], call.outcome.status


@pytest.mark.parametrize("outcome", ["timeout", "lost", "cancelled"])
async def test_a_write_whose_outcome_is_unknown_ends_freshness_here_and_in_the_store(
    outcome: str, served: Served, two_stores: tuple[Store, Store], tmp_path: Path
) -> None:
    key = f"{outcome}-{tmp_path.name}"
    port = int(served.url.rsplit(":", 1)[1].split("/", 1)[0])
    relay = Relay("127.0.0.1", port)
    ours, theirs = ToolCache(two_stores[0]), ToolCache(two_stores[1])
    try:
        await _lose_a_write_then_read(outcome, key, served, relay, ours, theirs)
    finally:
        served.state.released_event(key).set()


async def _lose_a_write_then_read(
    outcome: str, key: str, served: Served, relay: Relay, ours: ToolCache, theirs: ToolCache
) -> None:
    async with relay.running() as base, mcp.Client(f"{base}/mcp") as lossy, mcp.Client(served.url) as direct:
        mine, other = ours.wrap(lossy, server_id=SERVER_ID), theirs.wrap(direct, server_id=SERVER_ID)
        assert await value_of(mine, key) == ("old", "miss")
        assert await value_of(mine, key) == ("old", "fresh_hit")
        assert await value_of(other, key) == ("old", "fresh_hit")  # from the store the first cache wrote

        arguments = {"key": key, "value": "new", "hold": outcome != "lost"}
        if outcome == "timeout":
            with pytest.raises(MCPError) as failed:
                await mine.call("write", arguments, read_timeout_seconds=1.0)
            assert failed.value.code == mt.REQUEST_TIMEOUT
        elif outcome == "lost":
            relay.lose_next("drop_after_read")
            with pytest.raises(MCPError) as failed:
                await mine.call("write", arguments)
            assert failed.value.code == mt.CONNECTION_CLOSED
        else:
            async with anyio.create_task_group() as tg:
                tg.start_soon(mine.call, "write", arguments)
                # Cancelled once the server applied it: the request had long left.
                applied = served.state.applied_event(key)
                assert await anyio.to_thread.run_sync(applied.wait, GENEROUS_S)
                tg.cancel_scope.cancel()

        # The server applied it, or (a timeout on a very slow machine) not yet: either way neither cache may
        # serve the answer it held; each asks, and gets what the server holds now.
        await anyio.to_thread.run_sync(served.state.applied_event(key).wait, GENEROUS_S)
        now = served.state.values[key]
        assert now == "new"
        if outcome != "lost":
            # Not stale-if-error either: the next read's exchange is lost, and the old answer is not served.
            relay.lose_next("drop_after_read", on_any_connection=True)
            with pytest.raises(MCPError):
                await mine.call("read", {"key": key})
        # The other cache learns it from the store alone (the first cache has stored nothing new yet).
        value, status = await value_of(other, key)
        assert (value, status) == (now, "miss")  # asked with the old tag; the server's answer changed
        value, status = await value_of(mine, key)
        assert value == now  # asked, or the new answer the other cache just stored, fresh


def test_a_call_whose_outcome_is_unknown_ends_freshness_unless_it_is_a_read() -> None:
    """The pure rule: what an answered call of the same tool would have done."""
    untrusted = decide_unanswered(failure="the call timed out", read_only=True, trusted=False, stored=False)
    assert isinstance(untrusted, EndFreshness)
    assert "outcome is unknown" in untrusted.reason
    assert isinstance(decide_unanswered(failure="x", read_only=False, trusted=True, stored=False), EndFreshness)
    assert isinstance(decide_unanswered(failure="x", read_only=None, trusted=True, stored=False), EndFreshness)
    read_only = decide_unanswered(failure="x", read_only=True, trusted=True, stored=False)
    assert isinstance(read_only, KeepFreshness)
    assert "annotated read-only by a trusted server" in read_only.reason
    # Its stored answer came with a cache block: the server called this call a read when it answered it.
    stored = decide_unanswered(failure="x", read_only=None, trusted=False, stored=True)
    assert isinstance(stored, KeepFreshness)
