"""Who may be served an entry: one shared store, two caches with different partitions (docs/protocol.md 5).

Private entries are served only to the partition that stored them. Public entries cross partitions
only when sharing is on, on both sides (the writer puts them where everyone looks; the reader looks
there). A scope the client does not know (jupyter's "session", say) is private.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.transports import MODERN, ServerTarget

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.protocol import META_KEY
from mcpcache.stores import MemoryStore

from .harness import VIEW_KINDS, FakeClock, ViewKind, connect, plain
from .lab import Lab, build_lab

pytestmark = pytest.mark.anyio

K = {"key": "k"}


def caches(store: MemoryStore, clock: FakeClock, alice_shares: bool, bob_shares: bool) -> tuple[ToolCache, ToolCache]:
    return (
        ToolCache(store, CacheSettings(share_public=alice_shares), partition="alice", clock=clock),
        ToolCache(store, CacheSettings(share_public=bob_shares), partition="bob", clock=clock),
    )


@pytest.mark.parametrize(
    ("tool", "alice_shares", "bob_shares", "bob_served"),
    [
        ("read", True, True, False),
        ("read", False, False, False),
        ("read_public", True, True, True),
        ("read_public", True, False, False),
        ("read_public", False, True, False),
        ("read_public", False, False, False),
    ],
)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_who_is_served_what_another_partition_stored(
    view_kind: ViewKind,
    tool: str,
    alice_shares: bool,
    bob_shares: bool,
    bob_served: bool,
    clock: FakeClock,
    store: MemoryStore,
) -> None:
    alice, bob = caches(store, clock, alice_shares, bob_shares)
    lab = Lab()
    target = ServerTarget.memory(build_lab("sdk", lab))
    async with (
        connect(view_kind, target, MODERN, alice, server_id="lab") as alice_conn,
        connect(view_kind, target, MODERN, bob, server_id="lab") as bob_conn,
    ):
        stored = await alice_conn.call(tool, K)
        assert stored.outcome.stored
        mark = bob_conn.mark()
        served = await bob_conn.call(tool, K)
        assert served.outcome.status == ("fresh_hit" if bob_served else "miss")
        assert bob_conn.tool_calls(mark) == (0 if bob_served else 1)
        assert plain(served.result) == plain(stored.result)
        # Whatever bob did, alice is still served her own entry.
        assert (await alice_conn.call(tool, K)).outcome.status == "fresh_hit"
    assert lab.runs(tool, "k") == (1 if bob_served else 2)


async def test_a_shared_public_entry_is_revalidated_for_everyone(clock: FakeClock, store: MemoryStore) -> None:
    alice, bob = caches(store, clock, True, True)
    lab = Lab()
    target = ServerTarget.memory(build_lab("fastmcp", lab))
    async with (
        connect("mcp", target, MODERN, alice, server_id="lab") as alice_conn,
        connect("fastmcp", target, MODERN, bob, server_id="lab") as bob_conn,
    ):
        await alice_conn.call("read_public", K)
        clock.advance(6)
        revalidated = await bob_conn.call("read_public", K)
        assert revalidated.outcome.status == "revalidated"
        # Bob's revalidation restarted the shared entry's freshness for alice too.
        mark = alice_conn.mark()
        assert (await alice_conn.call("read_public", K)).outcome.status == "fresh_hit"
        assert alice_conn.tool_calls(mark) == 0


@pytest.mark.parametrize("scope", ["session", "PUBLIC", "", None, 1])
async def test_an_unknown_scope_is_private(scope: Any, clock: FakeClock, store: MemoryStore) -> None:
    def rescope(result: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
        block = dict(result["_meta"][META_KEY])
        block["cacheScope"] = scope
        return {**result, "_meta": {**result["_meta"], META_KEY: block}}

    alice, bob = caches(store, clock, True, True)
    lab = Lab(rewrite=rescope)
    target = ServerTarget.memory(build_lab("sdk", lab))
    async with (
        connect("mcp", target, MODERN, alice, server_id="lab") as alice_conn,
        connect("mcp", target, MODERN, bob, server_id="lab") as bob_conn,
    ):
        assert (await alice_conn.call("read_public", K)).outcome.stored
        assert (await bob_conn.call("read_public", K)).outcome.status == "miss"
        assert (await alice_conn.call("read_public", K)).outcome.status == "fresh_hit"


async def test_a_public_entry_that_turns_private_stops_crossing(clock: FakeClock, store: MemoryStore) -> None:
    alice, bob = caches(store, clock, True, True)
    lab = Lab()
    target = ServerTarget.memory(build_lab("sdk", lab))
    async with (
        connect("mcp", target, MODERN, alice, server_id="lab") as alice_conn,
        connect("mcp", target, MODERN, bob, server_id="lab") as bob_conn,
    ):
        await alice_conn.call("read_public", K)
        clock.advance(6)

        def now_private(result: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
            block = {**result["_meta"][META_KEY], "cacheScope": "private"}
            return {**result, "_meta": {**result["_meta"], META_KEY: block}}

        lab.rewrite = now_private
        # Alice revalidates; the server now says the answer is private to her.
        assert (await alice_conn.call("read_public", K)).outcome.status == "revalidated"
        lab.rewrite = None
        mark = bob_conn.mark()
        assert (await bob_conn.call("read_public", K)).outcome.status == "miss"
        assert bob_conn.tool_calls(mark) == 1
