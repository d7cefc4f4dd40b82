"""One harness per store kind, so a single contract suite runs unchanged against all three.

A `Backend` opens stores of its kind on storage that lives as long as the test (a fresh SQLite file, a
fresh Redis namespace on the session's real server), says what time the store sees, knows how to write
garbage underneath the store for the corrupt-record tests, and tells another OS process where to open
the same store.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cachetools import Cache

from mcpcache.stores import MemoryStore, RedisStore, SQLiteStore, Store, StoreLimits

Corruption = Callable[[Store, str], Awaitable[None]]

BYTE_FLIP = "body byte flipped"
"""The corruption every backend offers: one byte inside a stored body changed underneath the store."""


def flip_a_byte(body: bytes) -> bytes:
    """`body` with its middle byte inverted (the body must not be empty)."""
    assert body, "cannot flip a byte of an empty body"
    middle = len(body) // 2
    return body[:middle] + bytes([body[middle] ^ 0xFF]) + body[middle + 1 :]


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
    """Whether anything is still stored under a key, looked up underneath the store."""
    spawn: tuple[str, str, str] | None = None
    """(kind, location, namespace) for another OS process to open the same store; None for memory."""

    def now(self) -> float:
        return self.clock() if self.clock is not None else time.time()


def memory_backend() -> Backend:
    clock = FakeClock()

    # A memory store's records live only in its own tables: no file or server can be altered underneath
    # it, so reaching into those tables (without counting a use) is the only way to corrupt one.
    async def flip_body(store: Store, key: str) -> None:
        assert isinstance(store, MemoryStore)
        record = Cache.__getitem__(store._items, key)
        Cache.__setitem__(store._items, key, dataclasses.replace(record, body=flip_a_byte(record.body)))

    async def raw_exists(store: Store, key: str) -> bool:
        assert isinstance(store, MemoryStore)
        return key in store._items

    return Backend(
        name="memory",
        open=lambda limits=None: MemoryStore(limits if limits is not None else StoreLimits(), clock=clock),
        clock=clock,
        persistent=False,
        corruptions={BYTE_FLIP: flip_body},
        raw_exists=raw_exists,
    )


def sqlite_backend(path: Path) -> Backend:
    clock = FakeClock()

    def open_store(limits: StoreLimits | None = None) -> Store:
        # Generous, as for Redis below: these tests are about contents, and 40 tasks writing on a loaded machine
        # can wait past the 0.25 s default for the write lock (the lock tests set their own timeouts).
        return SQLiteStore(path, limits if limits is not None else StoreLimits(), clock=clock, busy_timeout_s=10.0)

    def sql(statement: str, *params: object) -> Callable[[Store, str], Awaitable[None]]:
        async def corrupt(store: Store, key: str) -> None:
            with sqlite3.connect(path) as conn:
                conn.execute(statement, (*params, key))

        return corrupt

    async def flip_body(store: Store, key: str) -> None:
        with sqlite3.connect(path) as conn:
            where = "WHERE item_id = (SELECT id FROM items WHERE key = ?)"
            (body,) = conn.execute(f"SELECT body FROM bodies {where}", (key,)).fetchone()
            conn.execute(f"UPDATE bodies SET body = ? {where}", (flip_a_byte(body), key))

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
            "checksum not text": sql("UPDATE items SET checksum = 7 WHERE key = ?"),
            "stamp not a number": sql("UPDATE items SET stamp = 'soon' WHERE key = ?"),
            BYTE_FLIP: flip_body,
        },
        raw_exists=raw_exists,
        spawn=("sqlite", str(path), "mcpcache"),
    )


def redis_backend(url: str, name: str = "redis") -> Backend:
    """A fresh namespace on the Redis (one server or a cluster: `name` says which engine) that `url` names."""
    namespace = f"test-{uuid.uuid4().hex[:12]}"

    def open_store(limits: StoreLimits | None = None) -> Store:
        # These tests are about what the store keeps, not how fast: a loaded CI machine can hold a command past
        # the 0.5 s default, which would trip the circuit and turn an agreement test into a timing test.
        return RedisStore(url, namespace=namespace, limits=limits, socket_timeout_s=10.0, connect_timeout_s=10.0)

    def hash_field(name: str, value: bytes) -> Corruption:
        async def corrupt(store: Store, key: str) -> None:
            assert isinstance(store, RedisStore)
            await store.client.hset(store.item_key(key), name, value)

        return corrupt

    def drop_field(name: str) -> Corruption:
        async def corrupt(store: Store, key: str) -> None:
            assert isinstance(store, RedisStore)
            await store.client.hdel(store.item_key(key), name)

        return corrupt

    async def flip_body(store: Store, key: str) -> None:
        assert isinstance(store, RedisStore)
        body = await store.client.hget(store.item_key(key), "b")
        await store.client.hset(store.item_key(key), "b", flip_a_byte(body))

    async def wrong_type(store: Store, key: str) -> None:
        assert isinstance(store, RedisStore)
        await store.client.delete(store.item_key(key))
        await store.client.set(store.item_key(key), b"garbage")

    async def raw_exists(store: Store, key: str) -> bool:
        assert isinstance(store, RedisStore)
        return bool(await store.client.exists(store.item_key(key)))

    return Backend(
        name=name,
        open=open_store,
        clock=None,
        persistent=True,
        corruptions={
            "meta not JSON": hash_field("m", b"not json {"),
            "meta a JSON array": hash_field("m", b"[1, 2]"),
            "created_at not a number": hash_field("c", b"yesterday"),
            "group not UTF-8": hash_field("g", b"\xff\xfe"),
            "body missing": drop_field("b"),
            "checksum missing": drop_field("k"),
            "stamp not a number": hash_field("s", b"soon"),
            "tag not UTF-8": hash_field("t", b"\xff"),
            "not a hash": wrong_type,
            BYTE_FLIP: flip_body,
        },
        raw_exists=raw_exists,
        spawn=("redis", url, namespace),
    )


def clock_of(backend: Backend) -> FakeClock:
    """The backend's injected clock, or one that starts now for a backend that keeps its own time (Redis)."""
    return backend.clock if backend.clock is not None else FakeClock(time.time())
