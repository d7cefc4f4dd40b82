"""Delta replies from the gateway, in this process, in front of the demo server without mcpcache (an
upstream that never heard of the protocol): the gateway fetches the whole answer and sends a caller that
asks for a delta only the change against the answer it holds, from the history in its store.

The caller is a stock `fastmcp.Client` sending the request `_meta` mcpcache's client sends, and applying
the ops itself (tests/gateway/deltas_support.py)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import fastmcp
import orjson
import pytest
from support.redis_server import Frozen, RedisServer

from mcpcache.delta import FORMATS
from mcpcache.demo.notebooks import generate_notebook
from mcpcache.gateway.config import AuthSettings, StaticToken
from mcpcache.gateway.history import HISTORY_GROUP
from mcpcache.protocol import EXTENSION_ID, META_KEY, conditional_request_meta
from mcpcache.stores import MemoryStore, RedisStore, SQLiteStore, Store
from mcpcache.stores.items import Item, StoreLimits

from .conftest import served_in_thread
from .deltas_support import (
    ARGS,
    NOTEBOOK,
    READ,
    asking,
    delta_gateway,
    delta_of,
    deltas_of,
    edit,
    history_items,
    patched,
    read_settings,
    same_answer,
    tag_of,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder of its own with a 30-cell notebook: the tests edit it."""
    generate_notebook(tmp_path / NOTEBOOK, 30, seed=5)
    return tmp_path


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """The gateway's shared store, of each kind."""
    opened: Store
    if request.param == "memory":
        opened = MemoryStore(StoreLimits(max_bytes=256 * 1024 * 1024))
    elif request.param == "sqlite":
        opened = SQLiteStore(tmp_path / "gateway.db")
    else:
        opened = RedisStore(request.getfixturevalue("redis_url"), namespace="gw-delta-" + uuid.uuid4().hex[:8])
    async with opened:
        yield opened


async def source_of(client: fastmcp.Client[Any], index: int) -> str:
    answer = await client.call_tool_mcp(READ, ARGS)
    source: str = answer.structured_content["cells"][index]["source"]
    return source


async def test_a_caller_that_holds_an_older_answer_gets_the_change_and_rebuilds_the_answer(
    folder: Path, store: Store
) -> None:
    gateway = delta_gateway(folder, store)
    async with fastmcp.Client(gateway) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        await edit(client, 3, held.structured_content["cells"][3]["source"] + "\nprint('edited')")
        reply = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
        full = await client.call_tool_mcp(READ, ARGS)
        # Asked without acceptDelta (a client that cannot apply one), the same old tag gets the full answer.
        unasked = await client.call_tool_mcp(READ, ARGS, meta=conditional_request_meta(tag_of(held)))
        # Only an unknown format accepted: the full answer as well.
        other = await client.call_tool_mcp(
            READ, ARGS, meta=conditional_request_meta(tag_of(held), accept_delta=["someone-elses/9"])
        )

    rebuilt = patched(held, reply)
    assert same_answer(rebuilt, full)
    assert rebuilt.structured_content["cells"][3]["source"].endswith("print('edited')")
    assert reply.structured_content == {"kind": "notebook.read"}
    assert not reply.is_error
    block = (reply.meta or {})[META_KEY]
    assert block["etag"] == tag_of(full)
    assert block["cacheScope"] == "public"
    assert "notModified" not in block
    reply_size = len(orjson.dumps(reply.model_dump(by_alias=True, mode="json", exclude_none=True)))
    full_size = len(orjson.dumps(full.model_dump(by_alias=True, mode="json", exclude_none=True)))
    assert reply_size < full_size / 4
    for answer in (unasked, other):
        assert delta_of(answer) is None
        assert same_answer(answer, full)
    counters = deltas_of(gateway).counters
    assert (counters.sent, counters.declined) == (1, 1)  # the unknown format's request accepted a delta
    assert counters.bytes_saved > 0


async def test_a_delta_against_an_older_version_and_a_chain_of_deltas(folder: Path) -> None:
    store = MemoryStore()
    async with fastmcp.Client(delta_gateway(folder, store)) as client:
        first = await client.call_tool_mcp(READ, ARGS)
        held = first
        for step in range(3):
            await edit(client, step, f"x = {step}")
            held = patched(held, await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held))))
        # A caller three edits behind gets one delta across them.
        skipped = patched(first, await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(first))))
        full = await client.call_tool_mcp(READ, ARGS)
    assert same_answer(held, full)
    assert same_answer(skipped, full)


async def test_callers_of_two_replicas_at_once_each_get_a_delta_that_rebuilds_the_answer(folder: Path) -> None:
    # Two gateways over one store, as two replicas: every caller holds the first answer, one edit, then
    # all ask at once through both replicas (the new version is recorded by whichever is first).
    store = MemoryStore()
    replicas = (delta_gateway(folder, store), delta_gateway(folder, store))
    async with fastmcp.Client(replicas[0]) as one, fastmcp.Client(replicas[1]) as two:
        held = await one.call_tool_mcp(READ, ARGS)
        await edit(one, 6, "both = 'replicas'")
        replies: list[Any] = []

        async def ask(client: fastmcp.Client[Any]) -> None:
            replies.append(await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held))))

        async with anyio.create_task_group() as group:
            for client in (one, two, one, two, one, two):
                group.start_soon(ask, client)
        full = await two.call_tool_mcp(READ, ARGS)
    assert len(replies) == 6
    for reply in replies:
        assert same_answer(patched(held, reply), full)
    versions = [key for key, _ in await history_items(store) if key.count(":") == 2]
    assert len(versions) == 2, "the first answer and the edited one, each kept once"


async def test_the_current_tag_still_gets_not_modified(folder: Path) -> None:
    async with fastmcp.Client(delta_gateway(folder, MemoryStore())) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        again = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
    assert (again.meta or {})[META_KEY]["notModified"] is True
    assert delta_of(again) is None


async def test_the_gateway_advertises_the_format_only_when_it_keeps_a_history(folder: Path) -> None:
    async def advertised(gateway: fastmcp.FastMCP[Any]) -> Any:
        async with fastmcp.Client(gateway) as client:
            discovered = client.session.discover_result
            assert discovered is not None
            return discovered.capabilities.extensions[EXTENSION_ID].get("deltaFormats")

    assert await advertised(delta_gateway(folder, MemoryStore())) == list(FORMATS)
    assert await advertised(delta_gateway(folder, MemoryStore(), history_bytes=0)) is None
    assert await advertised(delta_gateway(folder, None)) is None


# Bad input: every doubt is a full answer -------------------------------------------------------------


async def test_a_base_never_sent_gets_the_full_answer(folder: Path) -> None:
    async with fastmcp.Client(delta_gateway(folder, MemoryStore())) as client:
        full = await client.call_tool_mcp(READ, ARGS)
        reply = await client.call_tool_mcp(READ, ARGS, meta=asking('W/"' + "7" * 32 + '"'))
    assert delta_of(reply) is None
    assert same_answer(reply, full)
    assert (reply.meta or {})[META_KEY]["etag"] == tag_of(full)


async def test_an_evicted_base_gets_the_full_answer(folder: Path) -> None:
    store = MemoryStore()
    gateway = delta_gateway(folder, store)
    async with fastmcp.Client(gateway) as client:
        first = await client.call_tool_mcp(READ, ARGS)
        # Four newer versions push the first out of its call's versions (four kept per call).
        for step in range(4):
            await edit(client, 0, f"y = {step}")
            await client.call_tool_mcp(READ, ARGS)
        pushed_out = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(first)))
        second = await client.call_tool_mcp(READ, ARGS)
        await edit(client, 0, "y = 'last'")
        # The whole history gone from the store (another replica's trimming, an operator, Redis's eviction).
        await store.remove_group(HISTORY_GROUP)
        removed = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(second)))
        full = await client.call_tool_mcp(READ, ARGS)
    assert delta_of(pushed_out) is None
    assert delta_of(removed) is None
    assert same_answer(removed, full)
    assert deltas_of(gateway).counters.sent == 0


async def test_a_tool_that_opts_out_gets_full_answers_and_keeps_no_history(folder: Path) -> None:
    store = MemoryStore()
    async with fastmcp.Client(delta_gateway(folder, store, tools=read_settings(deltas=False))) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        await edit(client, 1, "z = 1")
        reply = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
    assert delta_of(reply) is None
    assert reply.content
    assert await history_items(store) == []


async def test_a_private_answer_to_an_anonymous_caller_is_never_a_base(folder: Path) -> None:
    # The store never keeps a private answer for callers the gateway cannot tell apart: nor does the history.
    store = MemoryStore()
    async with fastmcp.Client(delta_gateway(folder, store, tools=read_settings(scope="private"))) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        await edit(client, 1, "z = 2")
        reply = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
    assert delta_of(reply) is None
    assert reply.content
    assert await history_items(store) == []


class HistoryFails(MemoryStore):
    """A store whose history operations raise (its tool cache entries work): a broken shard, say."""

    @staticmethod
    def _history(key: str) -> None:
        if key.startswith("h:"):
            raise ConnectionError("the history's shard is down")

    async def peek_many(self, keys: Any) -> list[Item | None]:
        for key in keys:
            self._history(key)
        return await super().peek_many(keys)

    async def load(self, key: str) -> Item | None:
        self._history(key)
        return await super().load(key)

    async def save(self, key: str, item: Item) -> bool:
        self._history(key)
        return await super().save(key, item)


class HistoryHangs(MemoryStore):
    """A store that never answers a history operation once `hang` is set (a frozen shard)."""

    hang = False

    async def peek_many(self, keys: Any) -> list[Item | None]:
        if self.hang and any(key.startswith("h:") for key in keys):
            await anyio.sleep_forever()
        return await super().peek_many(keys)


async def test_a_failing_history_is_a_full_answer_never_a_failed_call(folder: Path) -> None:
    store = HistoryFails()
    gateway = delta_gateway(folder, store)
    async with fastmcp.Client(gateway) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        await edit(client, 2, "w = 1")
        reply = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
        full = await client.call_tool_mcp(READ, ARGS)
    assert not held.is_error
    assert delta_of(reply) is None
    assert same_answer(reply, full)
    assert deltas_of(gateway).history.counters.failures > 0


async def test_a_history_that_does_not_answer_costs_one_deadline(folder: Path) -> None:
    store = HistoryHangs()
    gateway = delta_gateway(folder, store)
    async with fastmcp.Client(gateway) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        await edit(client, 2, "w = 2")
        store.hang = True
        started = time.monotonic()
        replies = [await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held))) for _ in range(3)]
        took = time.monotonic() - started
    assert all(delta_of(reply) is None and reply.content for reply in replies)
    # One deadline (1 s), then the history is not asked for a while: three calls, far from three deadlines
    # each (a generous bound: this is about not stalling, not about speed).
    assert took < 30
    assert deltas_of(gateway).history.counters.failures == 1


@pytest.mark.redis
@pytest.mark.slow
async def test_a_frozen_redis_is_a_full_answer_within_the_deadlines(
    folder: Path, own_redis_server: RedisServer
) -> None:
    store = RedisStore(own_redis_server.url, namespace="gw-frozen")
    async with store, fastmcp.Client(delta_gateway(folder, store)) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        await edit(client, 2, "w = 3")
        with Frozen(own_redis_server):
            started = time.monotonic()
            reply = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
            took = time.monotonic() - started
        full = await client.call_tool_mcp(READ, ARGS)
    assert delta_of(reply) is None
    assert same_answer(reply, full)
    assert took < 30  # the tool cache's deadline and the history's, not a hang


# Partitions ----------------------------------------------------------------------------------------

TOKENS = {"alice": "alice-" + "a" * 24, "bob": "bob-" + "b" * 24}


@pytest.fixture
def auth() -> AuthSettings:
    return AuthSettings(
        kind="static", tokens=[StaticToken(token=token, client_id=who) for who, token in TOKENS.items()]
    )


@pytest.fixture
def served(folder: Path, auth: AuthSettings) -> Iterator[tuple[str, MemoryStore]]:
    """The gateway with two callers' tokens over streamable HTTP, and its store."""
    store = MemoryStore()
    with served_in_thread(delta_gateway(folder, store, tools=read_settings(scope="private"), auth=auth)) as url:
        yield url, store


async def test_a_delta_never_crosses_partitions(served: tuple[str, MemoryStore]) -> None:
    url, store = served
    async with (
        fastmcp.Client(url, auth=TOKENS["alice"]) as alice,
        fastmcp.Client(url, auth=TOKENS["bob"]) as bob,
    ):
        bobs = await bob.call_tool_mcp(READ, ARGS)
        await edit(bob, 4, "secret = 'bob'")
        # Alice never received the answer bob holds: she is sent the full answer, not ops against his.
        alices = await alice.call_tool_mcp(READ, ARGS, meta=asking(tag_of(bobs)))
        # Bob, who did, gets the change.
        bob_patched = patched(bobs, await bob.call_tool_mcp(READ, ARGS, meta=asking(tag_of(bobs))))
        # Alice holds the same answer as bob now, under the same tag, kept in her own history: her next
        # change is a delta against her own copy.
        await edit(alice, 5, "mine = 'alice'")
        alice_patched = patched(alices, await alice.call_tool_mcp(READ, ARGS, meta=asking(tag_of(alices))))
        full = await alice.call_tool_mcp(READ, ARGS)
    assert delta_of(alices) is None
    assert alices.content
    assert same_answer(alices, bob_patched)
    assert same_answer(alice_patched, full)
    keys = {key.split(":")[1] for key, _ in await history_items(store)}
    assert len(keys) == 2, "one history key per caller: the same call in two partitions"
