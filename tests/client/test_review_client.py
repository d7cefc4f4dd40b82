"""What a review of the client side broke, and now holds: a write still pending behind a patched answer may
not undo a `clear()` or a server's `invalidate()` that ran meanwhile; an invalidation by a cache that has not
read the server's key arguments yet still reaches the entry other caches keep under them.

Real parts: the lab's and the keyed fixture's FastMCP servers (mcpcache's server half) over memory streams,
a stock `mcp.Client`, and the three stores; two caches over one store stand for two processes.
"""

from __future__ import annotations

import pytest
from stores.backends import Backend, clock_of
from support.transports import MODERN, ServerTarget

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.stores import Store

from .harness import connect
from .lab import Lab, build_lab
from .test_deltas import KEY, SERVER_ID, edition

pytestmark = pytest.mark.anyio


async def test_a_clear_right_after_a_patched_answer_is_not_undone_by_its_write(backend: Backend, opened: Store) -> None:
    clock = clock_of(backend)
    cache = ToolCache(opened, CacheSettings(trusted=True), clock=clock)
    lab = Lab()
    lab.docs.write("k", edition(1))
    target = ServerTarget.memory(build_lab("fastmcp", lab))
    async with connect("mcp", target, MODERN, cache, server_id=SERVER_ID) as conn:
        await conn.call("read", KEY)
        await conn.call("edit", {"key": "k", "text": edition(2)})
        clock.advance(0.001)
        patched = await conn.call("read", KEY)
        assert patched.outcome.status == "patched", patched.outcome.reason
        await cache.clear()
        await cache.flush()
        assert [entry async for entry in cache.entries()] == []
    other = ToolCache(opened, CacheSettings(trusted=True), clock=clock)
    async with connect("mcp", target, MODERN, other, server_id=SERVER_ID) as conn:
        seen = await conn.call("read", KEY)
        assert seen.outcome.status != "fresh_hit", seen.outcome.reason


async def test_invalidating_the_server_right_after_a_patched_answer_leaves_no_entry(
    backend: Backend, opened: Store
) -> None:
    """`invalidate()` of a server drops its entries so that the next call asks for the whole answer; the
    patched answer's pending write may not put one back."""
    clock = clock_of(backend)
    cache = ToolCache(opened, CacheSettings(trusted=True), clock=clock)
    lab = Lab()
    lab.docs.write("k", edition(1))
    target = ServerTarget.memory(build_lab("fastmcp", lab))
    async with connect("mcp", target, MODERN, cache, server_id=SERVER_ID) as conn:
        await conn.call("read", KEY)
        await conn.call("edit", {"key": "k", "text": edition(2)})
        clock.advance(0.001)
        patched = await conn.call("read", KEY)
        assert patched.outcome.status == "patched", patched.outcome.reason
        await conn.view.invalidate()
        await cache.flush()
        assert [entry async for entry in cache.entries()] == []


async def test_an_invalidation_by_a_cache_that_has_not_listed_the_tools_reaches_the_projected_entry(
    backend: Backend, opened: Store
) -> None:
    """Another process invalidates a call by its full arguments before it has called anything: it has not
    read the server's key arguments yet, and the entry the first cache keeps is under the projected key."""
    from fixture_servers.keyed import build_keyed

    clock = clock_of(backend)
    first = ToolCache(opened, CacheSettings(trusted=True), clock=clock)
    second = ToolCache(opened, CacheSettings(trusted=True), clock=clock)
    target = ServerTarget.memory(build_keyed())
    async with (
        connect("mcp", target, MODERN, first, server_id="keyed") as one,
        connect("mcp", target, MODERN, second, server_id="keyed") as two,
    ):
        await one.call("read_doc", {"path": "a.txt", "request_id": "r1"})
        assert (await one.call("read_doc", {"path": "a.txt", "request_id": "r2"})).outcome.status == "fresh_hit"
        clock.advance(0.001)
        await two.view.invalidate("read_doc", {"path": "a.txt", "request_id": "r7"})
        clock.advance(0.001)
        after = await one.call("read_doc", {"path": "a.txt", "request_id": "r3"})
        # Asked of the server again (the second cache cannot name the entry to remove it; its tag is kept).
        assert after.outcome.status in ("miss", "revalidated"), after.outcome.reason
