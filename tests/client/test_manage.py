"""Seeing and managing what a `ToolCache` holds: invalidation and clearing (also with calls in the air), the
readable entries, closing, and what each call leaves in logs and OpenTelemetry spans.

Every test talks to the versioned-documents server (tests/client/versioned.py) over memory streams through
a stock `mcp.Client`, on each of the three real stores. Its read bodies can be held at the server after they
read the version, so an answer to a request sent before an invalidation can be made to land after it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from stores.backends import Backend, FakeClock, redis_backend, sqlite_backend
from support.transports import MODERN, ServerTarget

from mcpcache.client import CachedCall, CacheSettings, ToolCache
from mcpcache.client.keys import CallIdentity
from mcpcache.client.policy import CacheMode
from mcpcache.stores import Item, SQLiteStore, Store

from .harness import Conn, connect, live_clock
from .versioned import Versions, build_versioned

pytestmark = pytest.mark.anyio

TTL_MS = 60_000
SERVER = "versioned"


@dataclass
class Setup:
    clock: FakeClock
    state: Versions
    store: Store
    cache: ToolCache
    conn: Conn

    async def read(self, doc: str = "d1", *, rid: str | None = None, mode: CacheMode = "use") -> CachedCall:
        meta = {"rid": rid} if rid is not None else None
        return await self.conn.call("read", {"doc": doc, "who": "alice"}, meta=meta, cache_mode=mode)

    async def invalidate(self, doc: str = "d1") -> None:
        await self.conn.view.invalidate("read", {"doc": doc, "who": "alice"})

    def key(self, doc: str = "d1") -> str:
        return CallIdentity(SERVER, "alice", MODERN, "read", {"doc": doc, "who": "alice"}).key("private")


def version(call: CachedCall) -> int:
    structured = call.result.structured_content or {}
    value = structured.get("version")
    assert isinstance(value, int), call.result
    return value


@contextlib.asynccontextmanager
async def setup(
    backend: Backend, store: Store | None = None, settings: CacheSettings | None = None
) -> AsyncIterator[Setup]:
    clock = backend.clock if backend.clock is not None else live_clock()
    state = Versions(clock)
    target = ServerTarget.memory(build_versioned(state, TTL_MS))
    async with contextlib.AsyncExitStack() as stack:
        if store is None:
            store = await stack.enter_async_context(backend.open())
        cache = ToolCache(store, settings, partition="alice", clock=clock)
        conn = await stack.enter_async_context(connect("mcp", target, MODERN, cache, server_id=SERVER))
        yield Setup(clock, state, store, cache, conn)
        state.release_all()


class Pending:
    """A read running in a task of its own: `await pending.done()` for its result."""

    def __init__(self, s: Setup, tasks: anyio.abc.TaskGroup, doc: str, rid: str) -> None:
        self.call: CachedCall | None = None
        self._landed = anyio.Event()

        async def read() -> None:
            self.call = await s.read(doc, rid=rid)
            self._landed.set()

        tasks.start_soon(read)

    async def done(self) -> CachedCall:
        # A generous bound: a read that shares a request held at the server never lands, and fails the test.
        with anyio.fail_after(5):
            await self._landed.wait()
        assert self.call is not None
        return self.call


async def held_read(s: Setup, rid: str, tasks: anyio.abc.TaskGroup, doc: str = "d1") -> Pending:
    """Start a read whose body waits at the server, once it has read the version, until `release(rid)`."""
    s.state.hold(rid)
    pending = Pending(s, tasks, doc, rid)
    await s.state.wait_reached(rid)
    return pending


# -- invalidating one call ------------------------------------------------------------------------------


async def test_invalidate_drops_the_entry_and_its_decoded_copy(backend: Backend) -> None:
    async with setup(backend) as s:
        await s.read("d1")
        await s.read("d2")
        assert (await s.read("d1")).outcome.status == "fresh_hit"
        assert s.cache._tier.holds(s.key("d1"))
        s.state.change("d1")  # behind the cache's back: only an invalidation can tell it
        await s.invalidate("d1")
        assert not s.cache._tier.holds(s.key("d1"))
        assert await s.store.load(s.key("d1")) is None
        again = await s.read("d1")
        assert (again.outcome.status, version(again)) == ("miss", 1)
        other = await s.read("d2")
        assert other.outcome.status == "fresh_hit", "another call's entry is left alone"


@pytest.mark.parametrize("landing", ["lands before the next read", "lands after the next read"])
async def test_an_invalidation_is_not_undone_by_an_answer_sent_before_it(backend: Backend, landing: str) -> None:
    """A read sent before the invalidation (it read v0) lands after it: its answer is never served as fresh
    afterwards, and no read that starts after the invalidation shares its request."""
    async with setup(backend) as s:
        async with anyio.create_task_group() as tasks:
            before = await held_read(s, "before", tasks)  # a read-only tool: identical reads may share it
            s.state.change("d1")
            s.clock.advance(0.001)
            await s.invalidate("d1")
            s.clock.advance(0.001)
            if landing == "lands before the next read":
                s.state.release("before")
                await before.done()
                after = await s.read("d1")
            else:
                after = await Pending(s, tasks, "d1", "after").done()
                s.state.release("before")
        assert version(await before.done()) == 0  # its own caller gets what its request was answered
        assert not after.outcome.coalesced, after.outcome
        assert version(after) == 1, after.outcome
        latest = await s.read("d1")
        assert version(latest) == 1, latest.outcome


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def shared_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """A store other processes can open too: a SQLite file, a namespace on the session's redis-server."""
    if request.param == "sqlite":
        return sqlite_backend(tmp_path / "cache.db")
    return redis_backend(request.getfixturevalue("redis_url"))


async def test_an_invalidation_by_another_process_reaches_this_one(shared_backend: Backend) -> None:
    """Another cache on the same store (as another process would have it) invalidates the call: this cache
    neither serves its fresh copy nor shares a request it sent before."""
    backend = shared_backend
    async with setup(backend) as s, backend.open() as other_store:
        other = ToolCache(other_store, partition="alice", clock=s.clock)
        await s.read("d2")
        async with anyio.create_task_group() as tasks:
            await held_read(s, "held", tasks)
            s.state.change("d1")
            s.state.change("d2")
            s.clock.advance(0.001)
            for doc in ("d1", "d2"):
                await other.invalidate("read", {"doc": doc, "who": "alice"}, server_id=SERVER)
            s.clock.advance(0.001)
            after = await Pending(s, tasks, "d1", "after").done()  # were it to share the held read, it would wait
            s.state.release("held")
        assert (after.outcome.coalesced, version(after)) == (False, 1), after.outcome
        cached = await s.read("d2")
        assert (cached.outcome.status, version(cached)) != ("fresh_hit", 0), cached.outcome
        assert version(cached) == 1


async def test_invalidating_a_server_ends_everything_cached_from_it(backend: Backend) -> None:
    async with setup(backend) as s:
        other_view = s.cache.wrap(s.conn.client, server_id="elsewhere")
        await s.read("d1")
        await s.read("d2")
        await other_view.call("read", {"doc": "d1", "who": "alice"})
        s.state.change("d1")
        s.state.change("d2")
        await s.conn.view.invalidate()
        assert [entry.server async for entry in s.cache.entries()] == ["elsewhere"]
        assert version(await s.read("d1")) == 1
        assert version(await s.read("d2")) == 1
        untouched = await other_view.call("read", {"doc": "d1", "who": "alice"})
        assert (untouched.outcome.status, version(untouched)) == ("fresh_hit", 0)


async def test_invalidate_refuses_arguments_without_a_tool(backend: Backend) -> None:
    async with setup(backend) as s:
        with pytest.raises(TypeError, match="tool"):
            await s.cache.invalidate(None, {"doc": "d1"}, server_id=SERVER)


# -- clearing -------------------------------------------------------------------------------------------


async def test_clear_removes_every_answer_and_nothing_else(backend: Backend) -> None:
    async with setup(backend) as s:
        await s.read("d1")
        await s.read("d2")
        await s.store.save("ref", Item({"uri": "mcp+cache://x"}, b"a reference", "ref:conv-1"))
        async with anyio.create_task_group() as tasks:
            await held_read(s, "held", tasks, "d3")  # sent before the clear
            s.state.change("d3")
            s.clock.advance(0.001)
            assert await s.cache.clear() == 2
            assert [entry async for entry in s.cache.entries()] == []
            s.clock.advance(0.001)
            after = await Pending(s, tasks, "d3", "after").done()
            s.state.release("held")
        assert (after.outcome.coalesced, version(after)) == (False, 1), after.outcome
        assert version(await s.read("d3")) == 1
        assert await s.store.load("ref") is not None
        assert (await s.read("d1")).outcome.status == "miss"


# -- what an entry says about itself ---------------------------------------------------------------------


async def test_entries_read_as_a_person_would_want(backend: Backend) -> None:
    async with setup(backend, settings=CacheSettings(trusted=True)) as s:
        await s.read("d1")
        s.clock.advance(2.0)
        [entry] = [entry async for entry in s.cache.entries()]
        assert (entry.server, entry.tool, entry.arguments) == (SERVER, "read", '{"doc":"d1","who":"alice"}')
        assert (entry.fresh, entry.freshness) == (True, "fresh, 58.0 s left")
        assert (entry.etag or "").startswith('W/"')
        assert entry.size > 0
        assert [e.key async for e in s.cache.entries(server=SERVER, tool="read")] == [entry.key]
        assert [e async for e in s.cache.entries(tool="edit")] == []
        # A mutation through the cache ends the freshness of the server's entries; the listing says so.
        await s.conn.call("edit", {"doc": "d2", "who": "alice", "n": 1})
        s.clock.advance(3.0)
        [ended] = [entry async for entry in s.cache.entries()]
        assert (ended.fresh, ended.freshness) == (False, "stale: invalidated 3.0 s ago")
        s.clock.advance(3600)
        [expired] = [entry async for entry in s.cache.entries()]
        assert (expired.fresh, expired.freshness) == (False, "stale: invalidated 1.0 h ago")


async def test_an_entry_stored_by_an_earlier_version_is_still_served(backend: Backend) -> None:
    async with setup(backend) as s:
        call = await s.read("d1")
        stored = await s.store.load(s.key())
        assert stored is not None
        earlier = {k: v for k, v in stored.meta.items() if k not in ("args", "marks")}
        older = Item(earlier, stored.body, "tools", stored.created_at, None, stored.tag, stored.stamp)
        await s.store.save(s.key(), older)
        fresh = ToolCache(s.store, partition="alice", clock=s.clock)  # no decoded copy: read from the store
        view = fresh.wrap(s.conn.client, server_id=SERVER)
        again = await view.call("read", {"doc": "d1", "who": "alice"})
        assert (again.outcome.status, version(again)) == ("fresh_hit", version(call))
        [entry] = [entry async for entry in fresh.entries()]
        assert (entry.server, entry.tool, entry.arguments) == ("", "read", "")


# -- closing --------------------------------------------------------------------------------------------


async def test_close_closes_only_a_store_the_cache_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCPCACHE_DIR", str(tmp_path))
    async with ToolCache() as cache:
        opened = cache.store
        assert isinstance(opened, SQLiteStore)
        await opened.save("k", Item({}, b"body"))
    with pytest.raises(RuntimeError, match="closed"):
        await opened.load("k")
    async with SQLiteStore(tmp_path / "mine.db") as mine:
        async with ToolCache(mine):
            pass
        assert await mine.save("k", Item({}, b"still open"))


# -- what a call leaves behind ---------------------------------------------------------------------------


async def test_span_attributes_and_log_lines_name_the_outcome_tool_and_server(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    caplog.set_level(logging.DEBUG, logger="mcpcache.client")
    async with setup(backend) as s:
        with tracer.start_as_current_span("first"):
            await s.read("d1")
        with tracer.start_as_current_span("second"):
            await s.read("d1")
        await s.read("d1")  # no span: nothing to annotate, nothing fails
    spans = {span.name: span for span in exporter.get_finished_spans()}
    first, second = dict(spans["first"].attributes or {}), dict(spans["second"].attributes or {})
    assert first["mcpcache.client.outcome"] == "miss"
    assert first["mcpcache.client.stored"] is True
    assert first["mcpcache.client.bytes_saved"] == 0
    assert second["mcpcache.client.outcome"] == "fresh_hit"
    assert second["mcpcache.client.bytes_saved"] > 0
    for attributes in (first, second):
        assert (attributes["mcpcache.client.tool"], attributes["mcpcache.client.server"]) == ("read", SERVER)
    assert [event.name for event in spans["second"].events] == ["mcpcache.client.tool_call"]
    lines = [r.getMessage() for r in caplog.records if r.name == "mcpcache.client" and "'read' on" in r.getMessage()]
    assert any(line.startswith(f"tool 'read' on {SERVER}: fresh_hit (fresh:") for line in lines), lines
