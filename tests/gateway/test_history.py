"""The gateway's history in its store (`mcpcache.gateway.history`): bounded in bytes and in versions per
call, over every kind of store, one record for callers that bring one new answer at once, and within its
bounds through a thousand edits."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import fastmcp
import mcp_types as mt
import pytest
from support.redis_server import free_port

from mcpcache.demo.notebooks import generate_notebook
from mcpcache.gateway.history import HISTORY_GROUP, CallKey, StoreHistory
from mcpcache.protocol import META_KEY
from mcpcache.stores import MemoryStore, RedisStore, SQLiteStore, Store
from mcpcache.stores.items import StoreLimits

from .deltas_support import ARGS, NOTEBOOK, READ, asking, delta_gateway, deltas_of, edit, history_items, patched, tag_of

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    opened: Store
    if request.param == "memory":
        opened = MemoryStore()
    elif request.param == "sqlite":
        opened = SQLiteStore(tmp_path / "gateway.db")
    else:
        opened = RedisStore(request.getfixturevalue("redis_url"), namespace="gw-history-" + uuid.uuid4().hex[:8])
    async with opened:
        yield opened


def answer(text: str) -> mt.CallToolResult:
    """An answer as the gateway sends it: with its cache block, which the history leaves out."""
    return mt.CallToolResult(
        content=[mt.TextContent(type="text", text=text)],
        _meta={META_KEY: {"ttlMs": 0, "cacheScope": "private", "etag": 'W/"x"'}, "other": 1},
    )


def tag(number: int) -> str:
    return f'W/"{number:032x}"'


def call(partition: str = "caller:a", arguments: bytes = b'{"path":"a"}') -> CallKey:
    return CallKey(partition, "url:http://upstream/mcp", "2026-07-28", "read", arguments)


async def test_a_version_comes_back_as_it_was_sent_without_its_block(store: Store) -> None:
    history = StoreHistory(store)
    assert await history.record(call(), tag(1), answer("one")) is not None
    base = await history.base(call(), tag(1))
    assert base is not None
    assert base.content == [mt.TextContent(type="text", text="one")]
    assert base.meta == {"other": 1}
    # Only under its own call, partition and tag.
    assert await history.base(call(), tag(2)) is None
    assert await history.base(call(partition="caller:b"), tag(1)) is None
    assert await history.base(call(arguments=b'{"path":"b"}'), tag(1)) is None
    assert await history.base(call(), "not a tag") is None


async def test_a_call_keeps_its_newest_versions_only(store: Store) -> None:
    history = StoreHistory(store, versions_per_key=4)
    for number in range(10):
        await history.record(call(), tag(number), answer(f"version {number}"))
    held = [number for number in range(10) if await history.base(call(), tag(number)) is not None]
    assert held == [6, 7, 8, 9]
    assert len(await history_items(store)) == 5  # four versions and the call's index
    assert history.counters.dropped == 6


async def test_the_history_stays_within_its_bytes(store: Store) -> None:
    bound = 40_000
    history = StoreHistory(store, max_bytes=bound)
    for number in range(40):
        await history.record(call(arguments=f'{{"n":{number}}}'.encode()), tag(number), answer("x" * 3000))
        assert (await store.usage(HISTORY_GROUP)).bytes <= bound
    assert history.counters.trimmed > 0
    # The most recent versions are the ones kept.
    assert await history.base(call(arguments=b'{"n":39}'), tag(39)) is not None
    assert await history.base(call(arguments=b'{"n":0}'), tag(0)) is None
    # An answer larger than half the bound is not kept: a delta needs two.
    assert await history.record(call(), tag(99), answer("y" * (bound // 2))) is None
    assert history.counters.refused == 1
    # Nor one larger than the largest answer the store keeps.
    smaller = StoreHistory(store, max_bytes=bound, max_answer_bytes=1000)
    assert await smaller.record(call(), tag(100), answer("z" * 2000)) is None
    assert await smaller.base(call(), tag(100)) is None


async def test_callers_bringing_one_new_answer_at_once_record_it_once() -> None:
    store = MemoryStore()
    history = StoreHistory(store)
    sizes: list[int | None] = []

    async def record() -> None:
        sizes.append(await history.record(call(), tag(1), answer("the same answer" * 1000)))

    async with anyio.create_task_group() as group:
        for _ in range(8):
            group.start_soon(record)
    assert len(set(sizes)) == 1
    assert sizes[0] is not None
    assert history.counters.recorded == 1


@pytest.mark.redis
async def test_a_redis_with_nothing_listening_is_no_history_and_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with RedisStore(f"redis://127.0.0.1:{free_port()}/0", namespace="gw-nobody") as store:
        history = StoreHistory(store)
        for number in range(3):
            assert await history.record(call(), tag(number), answer("sent")) is None
            assert await history.base(call(), tag(number)) is None
    assert history.counters.failures == 6  # a read for each record and each base, each counted
    [failed] = caplog.text.splitlines()  # one line, no traceback
    assert "delta history store (RedisStore): read failed (ConnectionError: Error 111 connecting to" in failed


async def test_two_processes_sharing_a_store_share_the_history(tmp_path: Path) -> None:
    # Two histories over one SQLite file, as two gateway replicas on one host have.
    async with SQLiteStore(tmp_path / "shared.db") as one, SQLiteStore(tmp_path / "shared.db") as two:
        await StoreHistory(one).record(call(), tag(1), answer("sent by one"))
        base = await StoreHistory(two).base(call(), tag(1))
    assert base is not None
    assert base.content == [mt.TextContent(type="text", text="sent by one")]


@pytest.mark.slow
async def test_a_thousand_edits_keep_the_history_within_its_bound(tmp_path: Path) -> None:
    generate_notebook(tmp_path / NOTEBOOK, 6, seed=3, images=False)
    bound = 24 * 1024
    store = MemoryStore(StoreLimits(max_bytes=64 * 1024 * 1024))
    gateway = delta_gateway(tmp_path, store, history_bytes=bound)
    async with fastmcp.Client(gateway) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        for step in range(1000):
            await edit(client, step % 6, f"value = {step}")
            held = patched(held, await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held))))
            if step % 50 == 0:
                items = await history_items(store)
                assert sum(size for _, size in items) <= bound
                assert len(items) <= 5  # one call: at most four versions and its index
        full = await client.call_tool_mcp(READ, ARGS)
    assert held.content == full.content
    assert held.structured_content == full.structured_content
    usage = await store.usage(HISTORY_GROUP)
    assert usage.bytes <= bound
    assert deltas_of(gateway).counters.sent == 1000
    assert deltas_of(gateway).history.counters.recorded == 1001
    assert deltas_of(gateway).history.counters.trimmed > 0, "the byte bound was never reached"
