"""A cache that fails is a miss: never a failed call, never a wrong answer.

Each row breaks the store a different way (a real store subclassed to raise; a redis-server killed in
the middle of a run; a SQLite file locked by another process; garbage written under the real key) and
asserts exactly what the caller got: the server's current answer, with `stats.store_failures` counting
what the store could not do.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from stores.backends import FakeClock, sqlite_backend
from stores.test_faults import LockHolder
from support.redis_server import RedisServer
from support.transports import MODERN, ServerTarget

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.client.keys import CallIdentity
from mcpcache.stores import Item, MemoryStore, RedisStore, SQLiteStore

from .harness import Conn, connect, live_clock, plain
from .lab import Lab, build_lab

pytestmark = pytest.mark.anyio

K = {"key": "k"}
SERVER_ID = "lab"


class BrokenStore(MemoryStore):
    """A real memory store whose named operations raise, as a broken disk or a dead server would."""

    def __init__(self, clock: FakeClock, failing: set[str]) -> None:
        super().__init__(clock=clock)
        self.failing = failing
        self.attempts: dict[str, int] = {}

    def _maybe_fail(self, op: str) -> None:
        self.attempts[op] = self.attempts.get(op, 0) + 1
        if op in self.failing:
            raise OSError(f"store {op} failed")

    async def load(self, key: str) -> Item | None:
        self._maybe_fail("load")
        return await super().load(key)

    async def load_many(self, keys: Sequence[str]) -> list[Item | None]:
        self._maybe_fail("load")
        return await super().load_many(keys)

    async def peek_many(self, keys: Sequence[str]) -> list[Item | None]:
        self._maybe_fail("load")  # a load without the bodies: it fails as loads do
        return await super().peek_many(keys)

    async def save(self, key: str, item: Item) -> bool:
        self._maybe_fail("save")
        return await super().save(key, item)

    async def update_meta(
        self,
        key: str,
        meta: Mapping[str, Any],
        expires_at: float | None,
        *,
        if_tag: str | None = None,
        stamp: float | None = None,
    ) -> bool:
        self._maybe_fail("update_meta")
        return await super().update_meta(key, meta, expires_at, if_tag=if_tag, stamp=stamp)

    async def remove(self, key: str) -> None:
        self._maybe_fail("remove")
        await super().remove(key)


async def script(conn: Conn, lab: Lab, clock: FakeClock) -> list[tuple[str, str]]:
    """A run touching every store operation; returns (status, text) per call, and checks every answer
    against what the server holds at that moment (or held when the entry was fresh)."""
    seen: list[tuple[str, str]] = []

    async def read(expected: str) -> None:
        call = await conn.call("read", K)
        assert not call.result.is_error
        assert call.result.structured_content["text"] == expected  # type: ignore[index]
        seen.append((call.outcome.status, expected))

    await read("k: first edition")  # load, save
    await read("k: first edition")  # load (a fresh hit when the store works)
    clock.advance(6)
    await read("k: first edition")  # revalidation: update_meta
    await read("k: first edition")
    lab.docs.write("k", "k: second edition")
    clock.advance(6)
    await read("k: second edition")  # a full answer replaces the entry: save
    # A changed answer that comes without a cache block: the superseded entry is removed.
    lab.docs.write("k", "k: third edition")
    lab.rewrite = lambda result, meta: {**result, "_meta": {}}
    clock.advance(6)
    await read("k: third edition")
    lab.rewrite = None
    await read("k: third edition")
    return seen


WORKING = [
    ("miss", "k: first edition"),
    ("fresh_hit", "k: first edition"),
    ("revalidated", "k: first edition"),
    ("fresh_hit", "k: first edition"),
    ("miss", "k: second edition"),
    ("miss", "k: third edition"),
    ("miss", "k: third edition"),
]


@pytest.mark.parametrize(
    ("failing", "statuses"),
    [
        (set(), [s for s, _ in WORKING]),
        ({"load"}, ["miss"] * 7),
        ({"save"}, ["miss"] * 7),
        # The revalidated copy is served, but its freshness could not be restarted.
        ({"update_meta"}, ["miss", "fresh_hit", "revalidated", "revalidated", "miss", "miss", "miss"]),
        # The superseded entry could not be dropped; its tag is stale and is revalidated as such.
        ({"remove"}, [s for s, _ in WORKING]),
        ({"load", "save", "update_meta", "remove"}, ["miss"] * 7),
    ],
    ids=["nothing", "load", "save", "update_meta", "remove", "everything"],
)
async def test_a_store_that_raises(failing: set[str], statuses: list[str], clock: FakeClock) -> None:
    store = BrokenStore(clock, failing)
    cache = ToolCache(store, clock=clock)
    lab = Lab()
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache, server_id=SERVER_ID) as conn:
        seen = await script(conn, lab, clock)
    assert [status for status, _ in seen] == statuses
    expected_failures = sum(n for op, n in store.attempts.items() if op in failing)
    assert cache.stats.store_failures == expected_failures
    assert (expected_failures > 0) is bool(failing)


@pytest.mark.redis
async def test_a_redis_server_killed_in_the_middle_of_a_run(own_redis_server: RedisServer) -> None:
    clock = live_clock()
    lab = Lab()
    async with RedisStore(own_redis_server.url, namespace="killed") as store:
        cache = ToolCache(store, clock=clock)
        async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
            assert (await conn.call("read", K)).outcome.status == "miss"
            assert (await conn.call("read", K)).outcome.status == "fresh_hit"

            own_redis_server.kill()
            for _ in range(3):
                call = await conn.call("read", K)
                assert call.outcome.status == "miss"
                assert call.result.structured_content["text"] == "k: first edition"  # type: ignore[index]
            assert cache.stats.store_failures >= 3
            failures = cache.stats.store_failures

            own_redis_server.start()  # the same port, empty: the store reconnects on its own
            assert (await conn.call("read", K)).outcome.status == "miss"
            assert (await conn.call("read", K)).outcome.status == "fresh_hit"
            assert cache.stats.store_failures == failures
    assert lab.runs("read", "k") == 5


async def test_a_sqlite_file_locked_by_another_process(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    clock = FakeClock()
    path = tmp_path / "locked.db"
    lab = Lab()
    async with SQLiteStore(path, busy_timeout_s=0.05, clock=clock) as store:
        cache = ToolCache(store, clock=clock)
        async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
            await conn.call("read", K)
            await conn.call("read", {"key": "stale"})
            clock.advance(4)
            await conn.call("read", K)  # refreshes nothing; k is still fresh for a second
            holder = LockHolder(path)
            try:
                # WAL readers do not wait for the writer: what is stored is still served.
                assert (await conn.call("read", K)).outcome.status == "fresh_hit"
                # Writes fail after the busy timeout, and each is only a miss.
                new = await conn.call("read", {"key": "new"})
                assert (new.outcome.status, new.result.structured_content["key"]) == ("miss", "new")  # type: ignore[index]
                clock.advance(2)
                stale = await conn.call("read", {"key": "stale"})
                assert stale.outcome.status == "revalidated"  # served, though its freshness was not restarted
                await cache.flush()  # the revalidation's record is written after the answer is returned
                assert cache.stats.store_failures >= 2
                locked = f"{path}: the write lock is held by another connection"
                assert f"not stored: the store failed (SQLiteBusyError: {locked}" in new.outcome.reason
                # One line for the outage, whatever the number of writes it cost; never a traceback.
                [failed] = [record for record in caplog.records if record.name == "mcpcache.client"]
                assert f"tool cache store (SQLiteStore): save failed (SQLiteBusyError: {locked}" in failed.message
                assert failed.exc_info is None
            finally:
                holder.release()
            assert (await conn.call("read", {"key": "new"})).outcome.status == "miss"
            assert (await conn.call("read", {"key": "new"})).outcome.status == "fresh_hit"
            failed, back = [record.message for record in caplog.records if record.name == "mcpcache.client"]
            assert "tool cache store (SQLiteStore) answers again after" in back


# -- garbage under the real key -------------------------------------------------------------------


def identity(tool: str = "read", arguments: dict[str, Any] = K) -> CallIdentity:
    return CallIdentity(SERVER_ID, "", MODERN, tool, arguments)


def entry_meta(clock: FakeClock, **changes: Any) -> dict[str, Any]:
    meta = {
        "tool": "read",
        "scope": "private",
        "ttlMs": 5000,
        "etag": None,
        "requestedAt": clock(),
        "receivedAt": clock(),
        "size": 10,
    }
    meta.update(changes)
    return meta


def a_result(text: str) -> bytes:
    return orjson.dumps(
        {"content": [{"type": "text", "text": text}], "structuredContent": {"kind": "doc", "text": text}}
    )


GARBAGE: dict[str, Any] = {
    "a body that is not JSON": lambda clock: (entry_meta(clock), b"\x00\xff not json"),
    "a body that is JSON but no result": lambda clock: (entry_meta(clock), b"[1, 2, 3]"),
    "meta that is not ours": lambda clock: ({"hello": "world"}, a_result("planted")),
    "meta with a negative ttl": lambda clock: (entry_meta(clock, ttlMs=-1), a_result("planted")),
    "meta with string times": lambda clock: (entry_meta(clock, receivedAt="now"), a_result("planted")),
    "meta with a bool size": lambda clock: (entry_meta(clock, size=True), a_result("planted")),
    "meta with an unknown scope": lambda clock: (entry_meta(clock, scope="session"), a_result("planted")),
    "meta naming another tool": lambda clock: (entry_meta(clock, tool="read_zero"), a_result("planted")),
}


@pytest.mark.parametrize("case", list(GARBAGE))
async def test_garbage_under_the_real_key_is_a_miss(case: str, clock: FakeClock, store: MemoryStore) -> None:
    cache = ToolCache(store, clock=clock)
    meta, body = GARBAGE[case](clock)
    key = identity().key("private")
    await store.save(key, Item(meta=meta, body=body, group="tools", created_at=clock()))
    lab = Lab()
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache, server_id=SERVER_ID) as conn:
        call = await conn.call("read", K)
        assert (call.outcome.status, call.outcome.stored) == ("miss", True)
        assert call.result.structured_content["text"] == "k: first edition"  # type: ignore[index]
        assert (await conn.call("read", K)).outcome.status == "fresh_hit"
    assert cache.stats.store_failures == 0


async def test_a_planted_copy_that_fails_the_schema_is_never_served(clock: FakeClock, store: MemoryStore) -> None:
    # Right meta, right tag, a body that decodes as a result but carries no structured content: the
    # server confirms the tag, the client's check refuses the copy, and the whole answer is fetched.
    cache = ToolCache(store, clock=clock)
    lab = Lab()
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache, server_id=SERVER_ID) as conn:
        honest = await conn.call("read", K)
        key = identity().key("private")
        item = await store.load(key)
        assert item is not None
        planted = orjson.dumps({"content": [{"type": "text", "text": "planted"}]})
        replanted = Item(
            meta=item.meta, body=planted, group="tools", created_at=clock(), tag=item.tag, stamp=item.stamp
        )
        assert await store.save(key, replanted)
        clock.advance(6)
        lab.seen_meta.clear()
        call = await conn.call("read", K)
        assert [bool(m and "io.modelcontextprotocol/cache" in m) for m in lab.seen_meta] == [True, False]
    assert plain(call.result) == plain(honest.result)
    assert (call.outcome.status, call.outcome.stored) == ("miss", True)
    assert "could not be served" in call.outcome.reason


@pytest.mark.parametrize("corruption", list(sqlite_backend(Path("unused")).corruptions))
async def test_a_record_corrupted_inside_sqlite_is_a_miss(corruption: str, tmp_path: Path) -> None:
    backend = sqlite_backend(tmp_path / "cache.db")
    assert backend.clock is not None
    clock = backend.clock
    async with backend.open() as store:
        # The store's own corruption handling, as the driver meets it: no decoded copy in front of the store
        # (with one, a body corrupted underneath is not even read: tests/client/test_decoded_tier.py).
        cache = ToolCache(store, CacheSettings(decoded_tier_bytes=0), clock=clock)
        async with connect("mcp", ServerTarget.memory(build_lab("sdk")), MODERN, cache, server_id=SERVER_ID) as conn:
            await conn.call("read", K)
            await backend.corruptions[corruption](store, identity().key("private"))
            call = await conn.call("read", K)
            assert (call.outcome.status, call.outcome.stored) == ("miss", True)
            assert call.result.structured_content["text"] == "k: first edition"  # type: ignore[index]
            assert (await conn.call("read", K)).outcome.status == "fresh_hit"


@pytest.mark.parametrize("ended_at", ["yesterday", None, True, [1], -1e300])
async def test_a_garbage_freshness_mark_is_no_mark(ended_at: Any, clock: FakeClock, store: MemoryStore) -> None:
    cache = ToolCache(store, clock=clock)
    await store.save(identity().mark_key(), Item(meta={"endedAt": ended_at}, body=b"", group="marks"))
    async with connect("mcp", ServerTarget.memory(build_lab("sdk")), MODERN, cache, server_id=SERVER_ID) as conn:
        await conn.call("read", K)
        assert (await conn.call("read", K)).outcome.status == "fresh_hit"


async def test_a_store_that_fails_the_write_behind_a_patched_answer(clock: FakeClock) -> None:
    """The patched answer is written after it is returned; when that write fails the caller already has the
    right answer, the counters say it was not stored, and the next read still gets the current answer (the
    stored one is the older version, so the server sends the change again)."""
    long = " ".join(f"line {n}: the quick brown fox jumps over the lazy dog" for n in range(150))
    store = BrokenStore(clock, set())
    cache = ToolCache(store, CacheSettings(trusted=True), clock=clock)
    lab = Lab()
    lab.docs.write("k", f"{long}\nedition 1")
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache, server_id=SERVER_ID) as conn:
        assert (await conn.call("read", K)).outcome.status == "miss"
        store.failing = {"save"}
        for edition in (2, 3):
            lab.docs.write("k", f"{long}\nedition {edition}")
            clock.advance(6)
            call = await conn.call("read", K)
            assert call.outcome.status == "patched", call.outcome.reason
            assert call.result.structured_content["text"] == f"{long}\nedition {edition}"  # type: ignore[index]
            await cache.flush()
    assert (cache.stats.stored, cache.stats.not_stored) == (1, 2)
    assert cache.stats.store_failures == store.attempts["save"] - 1 == 2
