"""The client's hot paths (benchmarks/hot_paths.py measures them), and what each must not change.

- a fresh hit from a store in memory (`Store.peek_now`) and the decoded tier, answered without awaiting:
  freshness is still the store's word (its marks, another cache's freshness end);
- a revalidation's record written after the answer is returned: this process's next lookup of the key reads it, `flush`
  and `close` write it, and it never freshens a newer answer another writer stored meanwhile;
- the held copy, copied by a plan of its containers: a caller's changes never reach a later serve;
- `read_only_views=True`, off by default: the held answer itself, with the cost the docs state (a caller's
  change is served to the next caller in this process, never written to the store).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import mcp_types as mt
import pytest
from stores.backends import Backend, FakeClock, clock_of
from support.transports import MODERN, ServerTarget

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.client.background import Deferred
from mcpcache.client.keys import CallIdentity
from mcpcache.client.tier import hold
from mcpcache.stores import Item, MemoryStore, SQLiteStore, Store
from mcpcache.stores.items import body_checksum

from .harness import connect
from .lab import Lab, build_lab
from .test_decoded_tier import assert_pristine, scribble

pytestmark = pytest.mark.anyio

K = {"key": "k"}
SERVER_ID = "lab"
LONG = "long: " + "a notebook's worth of text " * 4000
"""About 110 KB of text in one answer."""


def key_of(cache: ToolCache, arguments: Mapping[str, Any] = K, tool: str = "read") -> str:
    return CallIdentity(SERVER_ID, cache.partition, MODERN, tool, dict(arguments)).key("private")


# -- private copies, and the read-only views a caller can ask for instead ----------------------------------


async def test_a_callers_changes_never_reach_a_later_serve_of_a_large_answer(backend: Backend, opened: Store) -> None:
    clock = clock_of(backend)
    cache = ToolCache(opened, clock=clock)
    assert cache.settings.read_only_views is False  # the default
    lab = Lab()
    lab.docs.write("k", LONG)
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache, server_id=SERVER_ID) as conn:
        statuses = []
        for step in ("miss", "fresh", "revalidate", "revalidate", "fresh", "revalidate"):
            if step == "revalidate":
                clock.advance(6)
            call = await conn.call("read", K)
            statuses.append(call.outcome.status)
            assert_pristine(call.result, LONG)
            scribble(call.result)
            (held,) = cache._tier._held.values()
            assert held.plan is not None
            assert held.size > 64 * 1024
    assert statuses == ["miss", "fresh_hit", "revalidated", "revalidated", "fresh_hit", "revalidated"]


def test_a_planned_copy_shares_nothing_a_caller_can_change() -> None:
    cells = [
        {"index": i, "source": "x = 1\n" * 50, "outputs": [{"data": {"text/plain": "1"}, "metadata": {}}]}
        for i in range(400)
    ]
    answer = {"kind": "notebook", "cells": cells, "metadata": {"kernel": {"name": "python3"}}, "tags": ["a"]}
    result = mt.CallToolResult(content=[mt.TextContent(type="text", text="see structured")], structured_content=answer)
    body = b"{" + b"x" * 40_000 + b"}"  # stands for the stored body
    held = hold(result, body, 'W/"1"', body_checksum(body))
    assert held.plan is not None
    assert held.pickled is None
    pristine = result.model_dump()
    for _ in range(2):
        copy = held.copy()
        assert copy.model_dump() == pristine
        served = copy.structured_content
        assert served is not None
        served["cells"][3]["outputs"][0]["data"]["text/plain"] = "changed"
        served["cells"][3]["outputs"].append({"more": True})
        served["cells"].pop()
        served["metadata"]["kernel"]["name"] = "changed"
        served["tags"].append("changed")
        copy.content.append(mt.TextContent(type="text", text="changed"))
        assert result.model_dump() == pristine


async def test_a_read_only_view_is_the_held_answer_itself_and_never_reaches_the_store(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    cache = ToolCache(store, CacheSettings(read_only_views=True), clock=clock)
    lab = Lab()
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache, server_id=SERVER_ID) as conn:
        first = await conn.call("read", K)
        hit = await conn.call("read", K)
        again = await conn.call("read", K)
        assert (hit.outcome.status, again.outcome.status) == ("fresh_hit", "fresh_hit")
        # No copy: one object, held and served, the very one the miss returned.
        assert hit.result.structured_content is again.result.structured_content is first.result.structured_content
        clock.advance(6)
        revalidated = await conn.call("read", K)
        assert revalidated.outcome.status == "revalidated"
        assert revalidated.result.structured_content is first.result.structured_content
        # What the caller promised not to do, done: the next caller in this process is served the change...
        assert isinstance(hit.result.structured_content, dict)
        hit.result.structured_content["text"] = "changed by a caller"
        changed = await conn.call("read", K)
        assert changed.outcome.status == "fresh_hit"
        assert changed.result.structured_content["text"] == "changed by a caller"  # type: ignore[index]
        # ...but never the store: another cache over it (another process's tier) is served what came.
        other = ToolCache(store, clock=clock)
        async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, other, server_id=SERVER_ID) as c:
            fresh = await c.call("read", K)
            assert fresh.outcome.status == "fresh_hit"
            assert_pristine(fresh.result)


# -- the revalidation's record, written after its answer is returned --------------------------------------


class GatedStore(SQLiteStore):
    """A real SQLite store whose `update_meta` waits at `gate` while one is set, and which logs, in order,
    when an `update_meta` lands and when a metadata read happens."""

    def __init__(self, path: Path, clock: FakeClock) -> None:
        super().__init__(path, clock=clock)
        self.gate: anyio.Event | None = None
        self.events: list[str] = []

    async def update_meta(
        self,
        key: str,
        meta: Mapping[str, Any],
        expires_at: float | None,
        *,
        if_tag: str | None = None,
        stamp: float | None = None,
    ) -> bool:
        self.events.append("update asked")
        if self.gate is not None:
            await self.gate.wait()
        admitted = await super().update_meta(key, meta, expires_at, if_tag=if_tag, stamp=stamp)
        self.events.append(f"update landed: {'admitted' if admitted else 'refused'}")
        return admitted

    async def peek_many(self, keys: Sequence[str]) -> list[Item | None]:
        self.events.append("peek")
        return await super().peek_many(keys)


async def test_a_revalidation_is_recorded_after_its_answer_and_read_by_the_next_lookup(tmp_path: Path) -> None:
    clock = FakeClock()
    store = GatedStore(tmp_path / "cache.db", clock)
    cache = ToolCache(store, CacheSettings(store_deadline_s=30), clock=clock)
    async with connect("mcp", ServerTarget.memory(build_lab("sdk")), MODERN, cache, server_id=SERVER_ID) as conn:
        assert (await conn.call("read", K)).outcome.status == "miss"
        clock.advance(6)
        store.gate = anyio.Event()
        revalidated_at = clock()
        revalidated = await conn.call("read", K)
        assert revalidated.outcome.status == "revalidated"  # returned while its record waits at the gate
        async with SQLiteStore(tmp_path / "cache.db", clock=clock) as reader:  # another process's view
            before = await reader.load(key_of(cache))
        assert before is not None
        assert before.meta["requestedAt"] < revalidated_at
        store.events.clear()
        outcomes: list[str] = []

        async def next_read() -> None:
            outcomes.append((await conn.call("read", K)).outcome.status)

        async with anyio.create_task_group() as tg:
            tg.start_soon(next_read)
            await anyio.wait_all_tasks_blocked()
            store.gate.set()
        # The next lookup of the key waited for this process's own record, and found the entry fresh again.
        assert outcomes == ["fresh_hit"]
        assert store.events[:2] == ["update landed: admitted", "peek"]
    await store.close()


async def test_close_writes_the_records_still_pending(tmp_path: Path) -> None:
    clock = FakeClock()
    store = GatedStore(tmp_path / "cache.db", clock)
    cache = ToolCache(store, CacheSettings(store_deadline_s=30), clock=clock)
    async with connect("mcp", ServerTarget.memory(build_lab("sdk")), MODERN, cache, server_id=SERVER_ID) as conn:
        await conn.call("read", K)
        clock.advance(6)
        store.gate = anyio.Event()
        revalidated_at = clock()
        assert (await conn.call("read", K)).outcome.status == "revalidated"
    async with anyio.create_task_group() as tg:
        tg.start_soon(cache.close)
        await anyio.wait_all_tasks_blocked()
        store.gate.set()
    assert store.events[-1] == "update landed: admitted"
    after = await store.load(key_of(cache))
    assert after is not None
    assert after.meta["requestedAt"] == revalidated_at
    await store.close()


async def test_a_late_record_never_freshens_the_newer_answer_another_process_stored(tmp_path: Path) -> None:
    """Cache A's record of its revalidation of v1 lands after cache B (another process: its own store object on
    the same file) stored v2 for the same call: compare-and-set refuses it, and v2 is what everyone reads."""
    clock = FakeClock()
    path = tmp_path / "cache.db"
    store_a = GatedStore(path, clock)
    store_b = SQLiteStore(path, clock=clock)
    a = ToolCache(store_a, CacheSettings(store_deadline_s=30), clock=clock)
    b = ToolCache(store_b, clock=clock)
    lab = Lab()
    target = ServerTarget.memory(build_lab("sdk", lab))
    async with (
        connect("mcp", target, MODERN, a, server_id=SERVER_ID) as conn_a,
        connect("mcp", target, MODERN, b, server_id=SERVER_ID) as conn_b,
    ):
        assert (await conn_a.call("read", K)).outcome.status == "miss"
        clock.advance(6)
        store_a.gate = anyio.Event()
        assert (await conn_a.call("read", K)).outcome.status == "revalidated"  # its record waits
        lab.docs.write("k", "k: second edition")
        clock.advance(1)
        newer = await conn_b.call("read", K, cache_mode="refresh")
        assert newer.outcome.stored
        store_a.gate.set()
        await a.flush()
        assert store_a.events[-1] == "update landed: refused"
        for conn in (conn_a, conn_b):
            read = await conn.call("read", K)
            assert read.result.structured_content["text"] == "k: second edition", read.outcome  # type: ignore[index]
    await store_a.close()
    await store_b.close()


async def test_a_write_cancelled_before_it_landed_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    deferred = Deferred()
    started = anyio.Event()

    async def write() -> None:
        started.set()
        await anyio.sleep_forever()

    await deferred.start("k", write, "recording a revalidation")
    await started.wait()
    assert deferred.pending("k")
    with caplog.at_level(logging.WARNING, logger="mcpcache.client"):
        for task in list(deferred._all):
            task.cancel()
        await deferred.flush()
    assert not deferred.pending("k")
    assert "recording a revalidation was cancelled before it reached the store" in caplog.text


# -- a fresh hit from memory, answered without awaiting -----------------------------------------------------


async def test_a_fresh_hit_from_memory_still_honours_a_freshness_end_another_cache_recorded(
    clock: FakeClock,
) -> None:
    store = MemoryStore(clock=clock)
    a, b = ToolCache(store, clock=clock), ToolCache(store, clock=clock)
    target = ServerTarget.memory(build_lab("sdk"))
    async with (
        connect("mcp", target, MODERN, a, server_id=SERVER_ID) as conn_a,
        connect("mcp", target, MODERN, b, server_id=SERVER_ID) as conn_b,
    ):
        assert (await conn_a.call("read", K)).outcome.status == "miss"
        assert (await conn_a.call("read", K)).outcome.status == "fresh_hit"
        clock.advance(0.5)
        await b.end_freshness(conn_b.view.server_id, conn_b.client.session.protocol_version)
        clock.advance(0.5)
        assert (await conn_a.call("read", K)).outcome.status == "revalidated"


async def test_a_fresh_hit_is_served_the_answer_of_its_own_arguments_whatever_their_type(
    backend: Backend, opened: Store
) -> None:
    """A fresh hit names its call from a memo of plain arguments (`ToolCache.fresh_hit`): 1, True, "1" and 1.0
    stay four calls, each served its own answer, as the canonical JSON that keys them says."""
    from fastmcp import FastMCP

    from mcpcache.server import CachePolicy, ToolPolicies, install

    server: FastMCP[Any] = FastMCP("echo")
    runs: list[object] = []

    @server.tool
    def echo(value: Any = None) -> str:
        runs.append(value)
        return f"{type(value).__name__}:{value!r}"

    install(server, ToolPolicies({"echo": CachePolicy(ttl_ms=60_000)}))
    cache = ToolCache(opened, clock=clock_of(backend))
    values: list[Any] = [1, True, "1", 1.0, None, [1]]
    async with connect("mcp", ServerTarget.memory(server), MODERN, cache, server_id=SERVER_ID) as conn:
        for _ in range(3):
            for value in values:
                call = await conn.call("echo", {"value": value})
                assert call.result.content[0].text == f"{type(value).__name__}:{value!r}"
        assert len(runs) == len(values)
        assert cache.stats.fresh_hits == 2 * len(values)
        assert (await conn.call("echo", {})).result.content[0].text == "NoneType:None"
        assert (await conn.view.call_tool("echo")).content[0].text == "NoneType:None"  # no arguments: as {}
        assert cache.stats.fresh_hits == 2 * len(values) + 1


async def test_a_fresh_hit_from_sqlite_without_a_thread_hop_still_sees_another_connections_write(
    tmp_path: Path, clock: FakeClock
) -> None:
    """`SQLiteStore.peek_now` answers a fresh hit from what it peeked while SQLite's `data_version` is
    unchanged; a freshness end or an invalidation written through another store on the file (another
    connection, as another process has) is seen on the very next call."""
    path = tmp_path / "shared.db"
    a = ToolCache(SQLiteStore(path, clock=clock), clock=clock)
    b = ToolCache(SQLiteStore(path, clock=clock), clock=clock)
    target = ServerTarget.memory(build_lab("sdk"))
    async with (
        connect("mcp", target, MODERN, a, server_id=SERVER_ID) as conn_a,
        connect("mcp", target, MODERN, b, server_id=SERVER_ID) as conn_b,
    ):
        assert (await conn_a.call("read", K)).outcome.status == "miss"
        for _ in range(3):
            assert (await conn_a.call("read", K)).outcome.status == "fresh_hit"
        assert isinstance(a.store, SQLiteStore)
        assert a.store.peek_now([key_of(a)]) is not None  # answered without a thread hop
        clock.advance(0.5)
        await b.end_freshness(conn_b.view.server_id, conn_b.client.session.protocol_version)
        clock.advance(0.5)
        assert (await conn_a.call("read", K)).outcome.status == "revalidated"
        for _ in range(3):
            assert (await conn_a.call("read", K)).outcome.status == "fresh_hit"
        await conn_b.view.invalidate("read", K)
        assert (await conn_a.call("read", K)).outcome.status != "fresh_hit"
    await a.store.close()
    await b.store.close()


async def test_a_fresh_hit_follows_a_key_rule_declared_after_its_memo_was_filled(
    backend: Backend, opened: Store
) -> None:
    """`ToolCache.fresh_hit` remembers the identity of calls keyed on every argument; a trusted server's
    declaration (keyed on `key` only), read after the first call was remembered so and read again after the
    tools changed, decides every later call's key: no call is answered from the memo's key past its rule."""
    from fastmcp import FastMCP

    from mcpcache.server import CachePolicy, ToolPolicies, install

    server: FastMCP[Any] = FastMCP("keyed")
    runs: list[tuple[str, int]] = []

    @server.tool
    def read(key: str, noise: int = 0) -> str:
        runs.append((key, noise))
        return f"{key}:{noise}:{len(runs)}"

    install(server, ToolPolicies({"read": CachePolicy(ttl_ms=60_000, key_arguments=["key"])}))
    cache = ToolCache(opened, CacheSettings(trusted=True), clock=clock_of(backend))
    async with connect("mcp", ServerTarget.memory(server), MODERN, cache, server_id=SERVER_ID) as conn:
        first = await conn.call("read", {"key": "k", "noise": 1})
        assert first.result.content[0].text == "k:1:1"
        for noise in (2, 1, 3):  # the declaration: noise is not part of the key
            call = await conn.call("read", {"key": "k", "noise": noise})
            assert (call.outcome.status, call.result.content[0].text) == ("fresh_hit", "k:1:1")
        other = await conn.call("read", {"key": "j", "noise": 1})
        assert other.result.content[0].text == "j:1:2"
        cache._key_rules.forget()  # the tools changed: the declarations are listed again
        for noise in (1, 4):
            call = await conn.call("read", {"key": "k", "noise": noise})
            assert (call.outcome.status, call.result.content[0].text) == ("fresh_hit", "k:1:1")
        assert (await conn.call("read", {"key": "j", "noise": 9})).result.content[0].text == "j:1:2"
        assert runs == [("k", 1), ("j", 1)]


# -- a miss names the call once ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["mcp", "session", "fastmcp"])
async def test_a_miss_builds_the_calls_identity_and_key_once_and_checks_freshness_once(
    kind: str, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    """Through a real server in memory: the view's fast path names the call (identity, store key, one copy
    of the arguments) and the driver's slow path takes that name, instead of building it again and running
    the fresh check a second time before the lookup."""
    from mcpcache.client.keyrules import KeyRules
    from mcpcache.client.lookup import Reader

    counts = {"identity": 0, "key": 0, "fresh_now": 0}
    build, key, fresh_now = KeyRules.identity, CallIdentity.key, Reader.fresh_now

    def counted_identity(*args: Any, **kwargs: Any) -> CallIdentity:
        counts["identity"] += 1
        return build(*args, **kwargs)

    def counted_key(self: CallIdentity, *args: Any, **kwargs: Any) -> str:
        if args == ("private",) and not kwargs:
            counts["key"] += 1
        return key(self, *args, **kwargs)

    def counted_fresh_now(self: Reader, *args: Any) -> Any:
        counts["fresh_now"] += 1
        return fresh_now(self, *args)

    monkeypatch.setattr(KeyRules, "identity", staticmethod(counted_identity))
    monkeypatch.setattr(CallIdentity, "key", counted_key)
    monkeypatch.setattr(Reader, "fresh_now", counted_fresh_now)
    cache = ToolCache(MemoryStore(clock=clock), clock=clock)  # a clock that stands still: no ttl runs out
    server = build_lab("fastmcp" if kind == "fastmcp" else "sdk")
    async with connect(kind, ServerTarget.memory(server), MODERN, cache, server_id=SERVER_ID) as conn:  # type: ignore[arg-type]
        arguments = {"key": "k"}
        miss = await conn.call("read", arguments)
        assert miss.outcome.status == "miss"
        assert counts == {"identity": 1, "key": 1, "fresh_now": 1}
        arguments["key"] = "changed after the call"  # the cache kept a copy of its own
        hit = await conn.call("read", K)
        assert hit.outcome.status == "fresh_hit"
