"""What ends the freshness of stored answers before their ttl: calls that may change the server's state,
and the server's own change notifications (docs/protocol.md section 5; the rule is `policy.ends_freshness`).

Ending freshness is not forgetting: the next read revalidates with its tag, and an answer that did not
change comes back not-modified. Only the partition (and server) whose state may have changed is affected.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as mt
import pytest
from support.transports import ERAS, LEGACY, MODERN, Era, ServerTarget

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.stores import MemoryStore

from .harness import VIEW_KINDS, Conn, FakeClock, ViewKind, connect
from .lab import SERVER_KINDS, Lab, ServerKind, build_lab

pytestmark = pytest.mark.anyio

K = {"key": "k"}


async def status_of(conn: Conn, arguments: dict[str, Any] = K) -> str:
    call = await conn.call("read", arguments)
    assert not call.result.is_error
    return call.outcome.status


@pytest.mark.parametrize("server_kind", SERVER_KINDS)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_trusted_annotations(
    view_kind: ViewKind, server_kind: ServerKind, clock: FakeClock, store: MemoryStore
) -> None:
    alice = ToolCache(store, CacheSettings(trusted=True), partition="alice", clock=clock)
    bob = ToolCache(store, CacheSettings(trusted=True), partition="bob", clock=clock)
    lab = Lab()
    server = build_lab(server_kind, lab)
    async with (
        connect(view_kind, ServerTarget.memory(server), MODERN, alice, server_id="lab") as conn,
        connect(view_kind, ServerTarget.memory(server), MODERN, bob, server_id="lab") as bob_conn,
        connect(view_kind, ServerTarget.memory(server), MODERN, alice, server_id="elsewhere") as other_server,
    ):
        assert await status_of(conn) == "miss"
        assert await status_of(bob_conn) == "miss"
        assert await status_of(other_server) == "miss"
        assert await status_of(conn) == "fresh_hit"

        # A tool announced read-only, from a trusted server: freshness stands.
        await conn.call("peek", {"key": "other"})
        assert await status_of(conn) == "fresh_hit"
        # A read answered with a cache block is a read: freshness stands.
        await conn.call("read", {"key": "other"})
        assert await status_of(conn) == "fresh_hit"

        for mutation in ("edit", "touch"):  # marked mutating; not marked at all
            clock.advance(0.5)
            await conn.call(mutation, {"key": "other", "text": f"changed by {mutation}"})
            # A request sent at the very instant of a change cannot be ordered after it; move past it.
            clock.advance(0.001)
            mark = conn.mark()
            call = await conn.call("read", K)
            # Revalidated, cheaply: the answer for `k` did not change, so the server said not-modified.
            assert call.outcome.status == "revalidated", mutation
            assert "freshness ended" in call.outcome.reason
            assert conn.tool_calls(mark) == 1
            assert await status_of(conn) == "fresh_hit"  # and its freshness restarts

        # Other partitions and other servers are untouched.
        assert await status_of(bob_conn) == "fresh_hit"
        assert await status_of(other_server) == "fresh_hit"


@pytest.mark.parametrize("tool", ["peek", "edit", "touch"])
async def test_untrusted_annotations_are_not_believed(tool: str, clock: FakeClock, cache: ToolCache) -> None:
    # ends_freshness: without trust, any call answered without a cache block may have changed something.
    assert not cache.settings.trusted
    async with connect("mcp", ServerTarget.memory(build_lab("fastmcp")), MODERN, cache) as conn:
        assert await status_of(conn) == "miss"
        await conn.call("read", {"key": "other"})  # answered with a block: a read, even untrusted
        assert await status_of(conn) == "fresh_hit"
        clock.advance(0.5)
        await conn.call(tool, {"key": "other"} if tool == "peek" else {"key": "other", "text": "x"})
        assert await status_of(conn) == "revalidated"


async def test_an_ended_freshness_survives_a_store_that_failed_to_record_it(clock: FakeClock) -> None:
    class FailsWhileTold(MemoryStore):
        failing = False

        async def save(self, key: str, item: Any) -> None:
            if self.failing:
                raise ConnectionError("the store is away")
            await super().save(key, item)

    store = FailsWhileTold(clock=clock)
    cache = ToolCache(store, CacheSettings(trusted=True), clock=clock)
    async with connect("mcp", ServerTarget.memory(build_lab("sdk")), MODERN, cache) as conn:
        assert await status_of(conn) == "miss"
        store.failing = True
        clock.advance(0.5)
        await conn.call("edit", {"key": "k", "text": "k: second edition"})
        store.failing = False
        changed = await conn.call("read", K)
    # The stored entry is still there and within its ttl, but the server said its state changed.
    assert changed.outcome.status == "miss"
    assert changed.result.structured_content["text"] == "k: second edition"  # type: ignore[index]
    # The mark is tried a few times (a freshness end is what other processes depend on), each one counted.
    assert cache.stats.store_failures == 3


class Announcements:
    """A client message handler that tells the test when a change notification has been handled.

    The cache's hook runs before the handler it wraps, so once this one has seen the notification, the
    cache has recorded it.
    """

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._arrived = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification | mt.ResourceUpdatedNotification):
            self.seen.append(type(message).__name__)
            self._arrived.set()

    async def wait(self) -> None:
        with anyio.fail_after(10):  # a guard against a hang, not a timing assertion
            await self._arrived.wait()
        self._arrived = anyio.Event()


@asynccontextmanager
async def listening(conn: Conn, server_kind: ServerKind, era: Era) -> AsyncIterator[None]:
    """On 2026-07-28 an MCPServer sends change notifications only on a `subscriptions/listen` stream."""
    if server_kind == "sdk" and era == MODERN:
        from mcp.client.subscriptions import listen

        async with listen(conn.client.session, tools_list_changed=True, resource_subscriptions=["docs://lab"]):
            yield
    else:
        yield


@pytest.mark.parametrize("what", ["tools", "resource"])
@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("server_kind", SERVER_KINDS)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_change_notifications_end_freshness(
    what: str, era: Era, server_kind: ServerKind, view_kind: ViewKind, clock: FakeClock, store: MemoryStore
) -> None:
    alice = ToolCache(store, partition="alice", clock=clock)
    bob = ToolCache(store, partition="bob", clock=clock)
    heard = Announcements()
    server = build_lab(server_kind)
    target = ServerTarget.memory(server)
    async with (
        connect(view_kind, target, era, alice, message_handler=heard) as conn,
        connect(view_kind, target, era, bob) as bob_conn,
        listening(conn, server_kind, era),
    ):
        assert await status_of(conn) == "miss"
        assert await status_of(bob_conn) == "miss"
        clock.advance(0.5)
        # Around the cache, as another part of the application (or another agent) would change things.
        await conn.direct("announce", {"key": "other", "text": "changed", "what": what})
        await heard.wait()
        clock.advance(0.001)
        assert await status_of(conn) == "revalidated"
        assert await status_of(conn) == "fresh_hit"
        assert await status_of(bob_conn) == "fresh_hit"
    expected = "ToolListChangedNotification" if what == "tools" else "ResourceUpdatedNotification"
    assert heard.seen == [expected]


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_notification_before_the_first_call_is_not_missed(
    view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    server = build_lab("fastmcp")
    async with connect(view_kind, ServerTarget.memory(server), LEGACY, cache, server_id="lab") as conn:
        assert await status_of(conn) == "miss"
    clock.advance(0.5)
    heard = Announcements()
    # A new connection, wrapped but not yet used: the server says something changed.
    async with connect(
        view_kind, ServerTarget.memory(server), LEGACY, cache, server_id="lab", message_handler=heard
    ) as conn:
        await conn.direct("announce", {"key": "other", "text": "changed", "what": "resource"})
        await heard.wait()
        clock.advance(0.001)
        assert await status_of(conn) == "revalidated"


async def test_a_tool_list_change_rereads_the_annotations(clock: FakeClock, store: MemoryStore) -> None:
    lab = Lab()
    server = build_lab("fastmcp", lab)
    cache = ToolCache(store, CacheSettings(trusted=True), clock=clock)
    heard = Announcements()
    async with connect("mcp", ServerTarget.memory(server), LEGACY, cache, message_handler=heard) as conn:
        assert await status_of(conn) == "miss"
        await conn.call("peek", K)  # read-only: freshness stands, and the annotations are now known
        assert await status_of(conn) == "fresh_hit"

        # The server now says peek is not read-only, and says its tool list changed.
        tool = await server.get_tool("peek")
        assert tool is not None
        tool.annotations = mt.ToolAnnotations(read_only_hint=False)
        clock.advance(0.5)
        await conn.direct("announce", {"key": "other", "text": "x", "what": "tools"})
        await heard.wait()
        clock.advance(0.5)
        assert await status_of(conn) == "revalidated"
        assert await status_of(conn) == "fresh_hit"

        clock.advance(0.5)
        await conn.call("peek", K)
        clock.advance(0.5)
        assert await status_of(conn) == "revalidated", "peek is no longer believed read-only"


async def test_many_views_of_one_client_hear_a_notification_once_per_cache(clock: FakeClock) -> None:
    class CountingMarks(MemoryStore):
        marks = 0

        async def save(self, key: str, item: Any) -> None:
            if key.startswith("m:"):
                self.marks += 1
            await super().save(key, item)

    store = CountingMarks(clock=clock)
    one, other = ToolCache(store, partition="one", clock=clock), ToolCache(store, partition="two", clock=clock)
    heard = Announcements()
    async with connect("mcp", ServerTarget.memory(build_lab("fastmcp")), LEGACY, one, message_handler=heard) as conn:
        # A view per request, from two caches, in turns: a common way to use wrap().
        for turn in range(20):
            view = (one if turn % 2 else other).wrap(conn.client)
            await view.call("read", K)
        await conn.direct("announce", {"key": "other", "text": "changed", "what": "tools"})
        await heard.wait()
    assert store.marks == 2, "one freshness end per cache, however many views were made"
