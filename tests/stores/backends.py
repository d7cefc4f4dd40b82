"""One harness per store kind, so a single contract suite runs unchanged against all three.

A `Backend` opens stores of its kind on storage that lives as long as the test (a fresh SQLite file, a
fresh Redis namespace on the session's real server), says what time the store sees, and knows how to
write garbage underneath the store for the corrupt-record tests.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mcpcache.stores import MemoryStore, RedisStore, SQLiteStore, Store, StoreLimits

Corruption = Callable[[Store, str], Awaitable[None]]


class FakeClock:
    """Epoch seconds that move only when told to."""

    def __init__(self, now: float = 1_750_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Backend:
    name: str
    open: Callable[..., Store]
    """open(limits=None) -> a new store on this test's storage (SQLite: same file; Redis: same namespace)."""
    clock: FakeClock | None
    """The store's injected clock; None where the backend keeps time itself (Redis expires by its clock)."""
    persistent: bool
    corruptions: Mapping[str, Corruption] = field(default_factory=dict)
    raw_exists: Callable[[Store, str], Awaitable[bool]] | None = None

    def now(self) -> float:
        return self.clock() if self.clock is not None else time.time()


def memory_backend() -> Backend:
    clock = FakeClock()
    return Backend(
        name="memory",
        open=lambda limits=None: MemoryStore(limits if limits is not None else StoreLimits(), clock=clock),
        clock=clock,
        persistent=False,
    )


def sqlite_backend(path: Path) -> Backend:
    clock = FakeClock()

    def open_store(limits: StoreLimits | None = None) -> Store:
        return SQLiteStore(path, limits if limits is not None else StoreLimits(), clock=clock)

    def sql(statement: str, *params: object) -> Callable[[Store, str], Awaitable[None]]:
        async def corrupt(store: Store, key: str) -> None:
            with sqlite3.connect(path) as conn:
                conn.execute(statement, (*params, key))

        return corrupt

    async def raw_exists(store: Store, key: str) -> bool:
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT count(*) FROM items WHERE key = ?", (key,)).fetchone()[0] > 0

    return Backend(
        name="sqlite",
        open=open_store,
        clock=clock,
        persistent=True,
        corruptions={
            "meta not JSON": sql("UPDATE items SET meta = CAST('not json {' AS BLOB) WHERE key = ?"),
            "meta a JSON array": sql("UPDATE items SET meta = CAST('[1, 2]' AS BLOB) WHERE key = ?"),
            "created_at not a number": sql("UPDATE items SET created_at = 'yesterday' WHERE key = ?"),
            "group not text": sql("UPDATE items SET grp = x'fffe' WHERE key = ?"),
            "body missing": sql("DELETE FROM bodies WHERE item_id = (SELECT id FROM items WHERE key = ?)"),
            "body not a blob": sql(
                "UPDATE bodies SET body = 'text' WHERE item_id = (SELECT id FROM items WHERE key = ?)"
            ),
        },
        raw_exists=raw_exists,
    )


def redis_backend(url: str) -> Backend:
    namespace = f"test-{uuid.uuid4().hex[:12]}"

    def open_store(limits: StoreLimits | None = None) -> Store:
        return RedisStore(url, namespace=namespace, limits=limits)

    def hash_field(name: str, value: bytes) -> Corruption:
        async def corrupt(store: Store, key: str) -> None:
            assert isinstance(store, RedisStore)
            await store.client.hset(store.item_key(key), name, value)

        return corrupt

    async def drop_body(store: Store, key: str) -> None:
        assert isinstance(store, RedisStore)
        await store.client.hdel(store.item_key(key), "b")

    async def wrong_type(store: Store, key: str) -> None:
        assert isinstance(store, RedisStore)
        await store.client.delete(store.item_key(key))
        await store.client.set(store.item_key(key), b"garbage")

    async def raw_exists(store: Store, key: str) -> bool:
        assert isinstance(store, RedisStore)
        return bool(await store.client.exists(store.item_key(key)))

    return Backend(
        name="redis",
        open=open_store,
        clock=None,
        persistent=True,
        corruptions={
            "meta not JSON": hash_field("m", b"not json {"),
            "meta a JSON array": hash_field("m", b"[1, 2]"),
            "created_at not a number": hash_field("c", b"yesterday"),
            "group not UTF-8": hash_field("g", b"\xff\xfe"),
            "body missing": drop_body,
            "not a hash": wrong_type,
        },
        raw_exists=raw_exists,
    )
