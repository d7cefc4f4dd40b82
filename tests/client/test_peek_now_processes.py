"""`SQLiteStore.peek_now` serves fresh hits without a thread hop while SQLite's `data_version` is unchanged:
another OS process changing the file (the CLI's `cache clear`, another cache ending freshness) must be seen
by the very next call."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from anyio.streams.text import TextReceiveStream
from stores.backends import FakeClock
from support.transports import MODERN, ServerTarget

from mcpcache.client import ToolCache
from mcpcache.stores import Item, SQLiteStore

from .harness import connect
from .lab import build_lab
from .test_hot_paths import SERVER_ID, K, key_of

pytestmark = pytest.mark.anyio

_END_FRESHNESS = """
import asyncio, sys
from mcpcache.client import ToolCache
from mcpcache.stores import Item, SQLiteStore

async def main() -> None:
    now = float(sys.argv[2])
    store = SQLiteStore(sys.argv[1], clock=lambda: now)
    cache = ToolCache(store, clock=lambda: now)
    await cache.end_freshness(sys.argv[3], sys.argv[4])
    await store.close()

asyncio.run(main())
"""


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


async def _fresh_from_memory(conn: object, cache: ToolCache) -> None:
    for _ in range(3):
        assert (await conn.call("read", K)).outcome.status == "fresh_hit"  # type: ignore[attr-defined]
    assert isinstance(cache.store, SQLiteStore)
    assert cache.store.peek_now([key_of(cache)]) is not None  # what a stale serve would come from


async def test_a_fresh_hit_from_sqlite_sees_another_process_clear_the_cache(tmp_path: Path) -> None:
    clock = FakeClock(time.time())  # the CLI's clock is the real one: nothing it sees has expired
    path = tmp_path / "shared.db"
    cache = ToolCache(SQLiteStore(path, clock=clock), clock=clock)
    async with connect("mcp", ServerTarget.memory(build_lab("sdk")), MODERN, cache, server_id=SERVER_ID) as conn:
        assert (await conn.call("read", K)).outcome.status == "miss"
        await _fresh_from_memory(conn, cache)
        mcpcache = str(Path(sys.executable).with_name("mcpcache"))
        _run(mcpcache, "cache", "clear", "--yes", "--store", str(path))
        assert (await conn.call("read", K)).outcome.status == "miss"
        await _fresh_from_memory(conn, cache)
        clock.advance(0.5)
        _run(sys.executable, "-c", _END_FRESHNESS, str(path), str(clock()), SERVER_ID, MODERN)
        clock.advance(0.5)
        assert (await conn.call("read", K)).outcome.status == "revalidated"
        await _fresh_from_memory(conn, cache)
    await cache.store.close()


_WRITER = """
import asyncio, sys
from mcpcache.stores import Item, SQLiteStore

async def main() -> None:
    store = SQLiteStore(sys.argv[1])
    for i in range(1, int(sys.argv[2]) + 1):
        if i % 3 == 0:  # a new record, a large body (the log grows and is checkpointed)
            await store.save("a", Item({"v": i}, b"b" * 40_000, "g", 1.0, None, f"t{i}", float(i)))
        elif i % 3 == 1:
            await store.update_meta("a", {"v": i}, None, stamp=float(i))
        else:  # another key first: a commit that leaves the peeked record as it is, then the record
            await store.save("m", Item({"v": i}, b"", "g", 1.0, stamp=float(i)))
            await store.update_meta("a", {"v": i}, None, stamp=float(i))
        print(i, flush=True)  # committed
    await store.close()

asyncio.run(main())
"""


async def test_peek_now_never_answers_what_another_process_committed_past(tmp_path: Path) -> None:
    """Another process rewrites a record over and over, saying after each commit that it is done; many
    tasks peek at once all along. No answer of `peek_now` is older than a commit announced before it began."""
    path = tmp_path / "shared.db"
    store = SQLiteStore(path)
    await store.save("a", Item({"v": 0}, b"b", "g", 1.0, None, "t0", 0.0))
    committed, stale, answered = 0, [], 0
    done = anyio.Event()

    async def peeker() -> None:
        nonlocal answered
        while not done.is_set():
            before = committed
            now = store.peek_now(["a", "m"])
            if now is None:
                await store.peek_many(["a", "m"])
            else:
                answered += 1
                seen = now[0].meta["v"] if now[0] is not None else None
                if seen is None or seen < before:
                    stale.append((before, seen))
            await anyio.lowlevel.checkpoint()

    writer = await anyio.open_process([sys.executable, "-c", _WRITER, str(path), "300"])
    async with writer, anyio.create_task_group() as tasks:
        for _ in range(6):
            tasks.start_soon(peeker)
        assert writer.stdout is not None
        async for chunk in TextReceiveStream(writer.stdout):
            for line in chunk.split():
                committed = max(committed, int(line))
        done.set()
    await store.close()
    assert committed == 300
    assert answered > 0  # the kept peeks were used
    assert stale == []
