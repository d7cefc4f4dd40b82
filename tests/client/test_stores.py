"""The cache's main flows on every store, and two OS processes sharing one SQLite file or one Redis.

The stores come from tests/stores/backends.py: a memory store, a fresh SQLite file, a fresh namespace on
the session's real redis-server. The cache and the store read the same injected clock where the store
keeps time by it; Redis expires by its own clock, so there the injected clock starts at the real time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from stores.backends import Backend, clock_of, redis_backend, sqlite_backend
from support.transports import MODERN, ServerTarget

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.stores import RedisStore, SQLiteStore, Store

from .harness import connect, plain
from .lab import Lab, build_lab

pytestmark = pytest.mark.anyio

K = {"key": "k"}
PEER = Path(__file__).resolve().parent / "peer.py"


async def test_the_main_flows(backend: Backend, opened: Store) -> None:
    clock = clock_of(backend)
    alice = ToolCache(opened, CacheSettings(share_public=True, trusted=True), partition="alice", clock=clock)
    bob = ToolCache(opened, CacheSettings(share_public=True, trusted=True), partition="bob", clock=clock)
    lab = Lab()
    target = ServerTarget.memory(build_lab("sdk", lab))
    async with (
        connect("mcp", target, MODERN, alice, server_id="lab") as a,
        connect("fastmcp", target, MODERN, bob, server_id="lab") as b,
    ):
        first = await a.call("read", K)
        assert (first.outcome.status, first.outcome.stored) == ("miss", True)
        hit = await a.call("read", K)
        assert hit.outcome.status == "fresh_hit"
        assert hit.result == first.result

        clock.advance(6)
        revalidated = await a.call("read", K)
        assert revalidated.outcome.status == "revalidated"
        assert plain(revalidated.result) == plain(first.result)
        assert (await a.call("read", K)).outcome.status == "fresh_hit"  # update_meta restarted it

        # Private for alice; public crosses to bob (both share).
        assert (await b.call("read", K)).outcome.status == "miss"
        await a.call("read_public", K)
        assert (await b.call("read_public", K)).outcome.status == "fresh_hit"

        # A mutating call ends alice's freshness (a mark in the store), not bob's.
        clock.advance(0.5)
        await a.call("edit", {"key": "k", "text": "k: second edition"})
        clock.advance(0.001)
        changed = await a.call("read", K)
        assert (changed.outcome.status, changed.outcome.stored) == ("miss", True)
        assert changed.result.structured_content["text"] == "k: second edition"  # type: ignore[index]
        assert (await b.call("read", K)).outcome.status == "fresh_hit"

        # Errors are never stored.
        lab.failing = True
        for _ in range(2):
            failed = await a.call("flaky", K)
            assert failed.result.is_error
            assert not failed.outcome.stored
        assert lab.runs("flaky", "k") == 2

    assert alice.stats.store_failures == bob.stats.store_failures == 0
    # A new cache object on the same store (a restart) finds what the old one kept. (Alice's freshness
    # ended again with the failing calls: not annotated read-only, answered without a block.)
    restarted = ToolCache(opened, partition="bob", clock=clock)
    async with connect("fastmcp", target, MODERN, restarted, server_id="lab") as b2:
        assert (await b2.call("read", K)).outcome.status == "fresh_hit"


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Backend]:
    if request.param == "sqlite":
        return "sqlite", sqlite_backend(tmp_path / "shared.db")
    return "redis", redis_backend(request.getfixturevalue("redis_url"))


def peer(kind: str, location: str, namespace: str, now: float, *partitions: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, str(PEER), kind, location, namespace, repr(now), *partitions],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow
async def test_another_process_gets_a_fresh_hit_from_the_shared_store(
    shared: tuple[str, Backend], tmp_path: Path
) -> None:
    kind, backend = shared
    clock = clock_of(backend)
    lab = Lab()
    async with backend.open() as store:
        assert isinstance(store, SQLiteStore | RedisStore)
        cache = ToolCache(store, partition="alice", clock=clock)
        target = ServerTarget.memory(build_lab("fastmcp", lab))
        # The server identity is part of the key: both processes name the server the same way.
        async with connect("fastmcp", target, MODERN, cache, server_id="shared-lab") as conn:
            stored = await conn.call("read", K)
        assert stored.outcome.stored
        location = str(store.path) if isinstance(store, SQLiteStore) else backend_url(store)
        namespace = store.namespace

    alice, bob = peer(kind, location, namespace, clock(), "alice", "bob")
    # Alice's entry, from the other process: fresh, so its own server never ran the body.
    assert alice == {"partition": "alice", "status": "fresh_hit", "runs": 0, "answer": stored.result.structured_content}
    # Nothing for another partition: bob's call reached the peer's server.
    assert (bob["status"], bob["runs"]) == ("miss", 1)
    assert lab.runs("read", "k") == 1


def backend_url(store: RedisStore) -> str:
    kwargs = store.client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"
