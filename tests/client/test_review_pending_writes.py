"""What a write still pending behind a patched answer may not undo: a `clear()` that ran meanwhile.

Real parts: the lab's FastMCP server (mcpcache's server half, deltas on) over memory streams, a stock
`mcp.Client`, and the three stores. The patched answer's store write runs after the answer is returned
(`mcpcache.client.keeping`); a `clear()` the caller makes right away must leave nothing behind for another
cache (another process) over the same store to serve.
"""

from __future__ import annotations

import pytest
from stores.backends import Backend, clock_of
from support.transports import MODERN, ServerTarget

from mcpcache.client import ToolCache
from mcpcache.stores import Store

from .harness import connect
from .lab import Lab, build_lab
from .test_deltas import KEY, SERVER_ID, edition

pytestmark = pytest.mark.anyio


async def test_a_clear_right_after_a_patched_answer_is_not_undone_by_its_write(backend: Backend, opened: Store) -> None:
    clock = clock_of(backend)
    cache = ToolCache(opened, trusted=True, clock=clock)
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
    other = ToolCache(opened, trusted=True, clock=clock)
    async with connect("mcp", target, MODERN, other, server_id=SERVER_ID) as conn:
        seen = await conn.call("read", KEY)
        assert seen.outcome.status != "fresh_hit", seen.outcome.reason


async def test_invalidating_the_server_right_after_a_patched_answer_leaves_no_entry(
    backend: Backend, opened: Store
) -> None:
    """`invalidate()` of a server drops its entries so that the next call asks for the whole answer; the
    patched answer's pending write may not put one back."""
    clock = clock_of(backend)
    cache = ToolCache(opened, trusted=True, clock=clock)
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
