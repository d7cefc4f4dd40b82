"""`CallOutcome.fresh_for_ms`: on a fresh hit, how much longer the served answer stays fresh (what a cache
serving other clients, such as `mcpcache gateway`, hands on as their ttlMs); None for anything else."""

from __future__ import annotations

import pytest
from support.transports import MODERN, ServerTarget

from mcpcache.client import ToolCache

from .harness import FakeClock, connect
from .lab import build_lab

pytestmark = pytest.mark.anyio


async def test_a_fresh_hit_says_how_much_freshness_is_left(cache: ToolCache, clock: FakeClock) -> None:
    async with connect("mcp", ServerTarget.memory(build_lab("fastmcp")), MODERN, cache, server_id="lab") as conn:
        first = await conn.call("read", {"key": "k"})  # ttl 5000 ms
        clock.advance(1.25)
        hit = await conn.call("read", {"key": "k"})
        clock.advance(3.75)
        stale = await conn.call("read", {"key": "k"})
    assert (first.outcome.status, first.outcome.fresh_for_ms) == ("miss", None)
    assert (hit.outcome.status, hit.outcome.fresh_for_ms) == ("fresh_hit", 3750)
    assert stale.outcome.status == "revalidated"
    assert stale.outcome.fresh_for_ms is None
