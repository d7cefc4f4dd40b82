"""Delta replies from the gateway under attack (issue 21 review). Whatever a caller sends and whatever the
store holds, a reply is either the full answer a plain read gets, or a delta whose ops, applied to what the
caller holds, give that answer with the digest matching: never a wrong answer.

Real parts: the gateway (its FastMCP proxy and middleware) in this process in front of the demo server
without mcpcache, a stock `fastmcp.Client` asking as mcpcache's client will, the history in a SQLite file
or on a real redis-server, corrupted where they keep it.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import fastmcp
import mcp_types as mt
import orjson
import pytest
import redis.asyncio as aioredis

from mcpcache.delta import FORMAT, DeltaError, apply, document_of, result_of
from mcpcache.demo.notebooks import generate_notebook
from mcpcache.etag import answer_digest
from mcpcache.gateway.config import ToolSettings
from mcpcache.protocol import META_KEY, conditional_request_meta
from mcpcache.stores import MemoryStore, RedisStore, SQLiteStore

from .deltas_support import (
    ARGS,
    NOTEBOOK,
    READ,
    asking,
    delta_gateway,
    delta_of,
    deltas_of,
    edit,
    patched,
    read_settings,
    same_answer,
    tag_of,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    generate_notebook(tmp_path / NOTEBOOK, 30, seed=9)
    generate_notebook(tmp_path / "other.ipynb", 30, seed=9)  # the same notebook under another name
    return tmp_path


def never_wrong(held: mt.CallToolResult, reply: mt.CallToolResult, full: mt.CallToolResult) -> str:
    """What `reply` is for a caller holding `held`, when a plain read gives `full`: "full" (the whole answer),
    "delta" (ops that rebuild `full`, digest matching) or "refused" (ops that do not apply, or whose digest
    does not match: the caller repeats the call). Fails on a wrong answer."""
    found = delta_of(reply)
    if found is None:
        assert not reply.is_error, reply
        assert same_answer(reply, full), "a full reply that is not the current answer"
        return "full"
    try:
        rebuilt = result_of(apply(document_of(held), found.ops))
    except DeltaError:
        return "refused"
    if answer_digest(rebuilt.content, rebuilt.structured_content, rebuilt.meta) != found.digest:
        return "refused"
    assert same_answer(rebuilt, full), "ops that give a wrong answer whose digest matches"
    return "delta"


# The history corrupted where the store keeps it ------------------------------------------------------


async def test_a_corrupted_sqlite_history_is_never_a_wrong_answer(folder: Path, tmp_path: Path) -> None:
    path = tmp_path / "gateway.db"
    store = SQLiteStore(path)
    async with store, fastmcp.Client(delta_gateway(folder, store)) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        await edit(client, 3, "corrupted = 'maybe'")
        # Flip bytes inside every history body (a bad disk, a bad copy): in a cell's source, so the body
        # still reads as JSON, and its length is unchanged.
        with sqlite3.connect(path) as db:
            rows = db.execute(
                "SELECT b.item_id, b.body FROM bodies b JOIN items i ON i.id = b.item_id WHERE i.grp = 'deltas'"
            ).fetchall()
            assert rows
            for item_id, body in rows:
                at = bytes(body).find(b"import")
                flipped = bytes(body[:at]) + b"IMPORT" + bytes(body[at + 6 :]) if at >= 0 else bytes(body)
                db.execute("UPDATE bodies SET body = ? WHERE item_id = ?", (flipped, item_id))
        reply = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
        full = await client.call_tool_mcp(READ, ARGS)
    assert never_wrong(held, reply, full) == "full"  # the store's checksum: the corrupted base is not held


@pytest.mark.redis
async def test_a_corrupted_redis_history_is_never_a_wrong_answer(folder: Path, redis_url: str) -> None:
    namespace = "gw-corrupt-" + uuid.uuid4().hex[:8]
    store = RedisStore(redis_url, namespace=namespace)
    raw = aioredis.from_url(redis_url)
    try:
        async with store, fastmcp.Client(delta_gateway(folder, store)) as client:
            held = await client.call_tool_mcp(READ, ARGS)
            await edit(client, 3, "corrupted = 'maybe'")
            touched = 0
            async for key in raw.scan_iter(match=f"*{namespace}*"):
                if await raw.type(key) != b"hash":
                    continue
                for field, value in (await raw.hgetall(key)).items():
                    at = value.find(b"import")
                    if at >= 0 and len(value) > 10_000:
                        await raw.hset(key, field, value[:at] + b"IMPORT" + value[at + 6 :])
                        touched += 1
            assert touched
            reply = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
            full = await client.call_tool_mcp(READ, ARGS)
        assert never_wrong(held, reply, full) in ("full", "refused")
    finally:
        await raw.aclose()


# Bases the caller names --------------------------------------------------------------------------------


async def test_a_tag_from_other_arguments_or_another_tool_is_never_a_base(folder: Path) -> None:
    # The caller names a tag it really holds, but of another call: another notebook with the same cells, or
    # another tool. Neither is a version of this call, so the reply is the full answer.
    tools = {**read_settings(), "read_cell": ToolSettings(ttl_ms=0, scope="public", kind="notebook.cell")}
    async with fastmcp.Client(delta_gateway(folder, MemoryStore(), tools=tools)) as client:
        other = await client.call_tool_mcp(READ, {"path": "other.ipynb"})
        cell = await client.call_tool_mcp("read_cell", {"path": NOTEBOOK, "index": 0})
        held = await client.call_tool_mcp(READ, ARGS)
        await edit(client, 2, "changed = True")
        full = await client.call_tool_mcp(READ, ARGS)
        replies = [await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(stranger))) for stranger in (other, cell)]
    assert tag_of(other) != tag_of(held)
    for reply in replies:
        assert delta_of(reply) is None
        assert same_answer(reply, full)


@pytest.mark.parametrize(
    "tag",
    [
        'W/"' + "z" * 200 + '"',
        '"h:colons:in:it"',
        'W/"../../etc"',
        '"*"',
        'W/""',
        "not a tag at all",
        'W/"\u00e9\U0001f9ea"',
    ],
)
async def test_a_made_up_tag_gets_the_full_answer(folder: Path, tag: str) -> None:
    async with fastmcp.Client(delta_gateway(folder, MemoryStore())) as client:
        await client.call_tool_mcp(READ, ARGS)
        await edit(client, 1, "made_up = 1")
        reply = await client.call_tool_mcp(READ, ARGS, meta=asking(tag))
        full = await client.call_tool_mcp(READ, ARGS)
    assert not reply.is_error
    assert delta_of(reply) is None
    assert same_answer(reply, full)


@pytest.mark.parametrize(
    "accept",
    [FORMAT, [], [1, 2], [None], [FORMAT.upper()], ["x" * 10_000], {"format": FORMAT}, [FORMAT] * 1000],
    ids=["a string", "empty", "numbers", "null", "upper case", "huge", "an object", "repeated"],
)
async def test_an_odd_accept_delta_is_a_full_answer_or_a_good_delta(folder: Path, accept: Any) -> None:
    async with fastmcp.Client(delta_gateway(folder, MemoryStore())) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        await edit(client, 4, "odd = 'accept'")
        meta = conditional_request_meta(tag_of(held))
        meta[META_KEY]["acceptDelta"] = accept
        reply = await client.call_tool_mcp(READ, ARGS, meta=meta)
        full = await client.call_tool_mcp(READ, ARGS)
    assert never_wrong(held, reply, full) in ("full", "delta")


# Answers ----------------------------------------------------------------------------------------------


async def test_non_ascii_edits_rebuild_the_answer(folder: Path) -> None:
    async with fastmcp.Client(delta_gateway(folder, MemoryStore())) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        for step, source in enumerate(["café ☕ = 'π'", "🧪🧪 = '中文'\n# \u2028 line sep", "\x00\x1f\"\\ = 'é'", ""]):
            await edit(client, step, source)
            reply = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
            full = await client.call_tool_mcp(READ, ARGS)
            assert never_wrong(held, reply, full) == "delta"
            held = patched(held, reply)
            assert held.structured_content["cells"][step]["source"] == source


async def test_an_upstream_error_between_versions(folder: Path) -> None:
    store = MemoryStore()
    gateway = delta_gateway(folder, store)
    async with fastmcp.Client(gateway) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        text = (folder / NOTEBOOK).read_bytes()
        (folder / NOTEBOOK).write_bytes(b"{not json")
        broken = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
        assert broken.is_error
        assert "delta" not in (broken.meta or {}).get(META_KEY, {})  # an error is sent whole, never a delta
        (folder / NOTEBOOK).write_bytes(text)
        await edit(client, 5, "after = 'the error'")
        reply = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
        full = await client.call_tool_mcp(READ, ARGS)
    assert never_wrong(held, reply, full) == "delta"


async def test_a_delta_is_never_more_than_half_the_answer(folder: Path) -> None:
    # Edits dense in what JSON escapes (quotes, backslashes, control characters) and in multi-byte
    # characters: the ops' JSON grows faster than their characters. Whatever goes must stay within half.
    gateway = delta_gateway(folder, MemoryStore())
    kinds = []
    async with fastmcp.Client(gateway) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        for step in range(10):
            unit = '"\\\x01\x02é中🧪'[step % 7 :] + '"\\\x01\x02é中🧪'[: step % 7] + str(step)
            source = (unit * (600 * (step + 1)))[: 2000 * (step + 1)]
            for index in range(step % 3, 30, 1 if step >= 6 else 3):
                await edit(client, index, source + str(index))
            reply = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
            full = await client.call_tool_mcp(READ, ARGS)
            kinds.append(never_wrong(held, reply, full))
            found = delta_of(reply)
            if found is not None:
                wire = len(orjson.dumps(full.model_dump(by_alias=True, mode="json", exclude_none=True)))
                assert len(orjson.dumps(found.ops)) <= wire // 2, "ops larger than half the answer"
            held = patched(held, reply) if kinds[-1] == "delta" else full
    assert "delta" in kinds
    assert "full" in kinds
    assert deltas_of(gateway).counters.declined >= 1


def shuffling_server(version: dict[str, int]) -> fastmcp.FastMCP[Any]:
    """An upstream that never heard of mcpcache, whose answer is the same JSON each time with its members in
    another order (a dict built from a set, a map iterated in hash order), and one field that moves."""
    import random

    server: fastmcp.FastMCP[Any] = fastmcp.FastMCP("shuffling")
    calls = {"n": 0}

    @server.tool(annotations={"readOnlyHint": True})
    def table(name: str) -> dict[str, Any]:
        calls["n"] += 1
        rng = random.Random(calls["n"])
        rows = [{"id": i, "name": f"row {i} ✓", "value": i * 1.5, "flag": i % 2 == 0} for i in range(300)]
        for row in rows:
            items = list(row.items())
            rng.shuffle(items)
            row.clear()
            row.update(items)
        answer = {"kind": "table", "name": name, "rows": rows, "edited": version["n"]}
        items = list(answer.items())
        rng.shuffle(items)
        return dict(items)

    return server


async def test_an_upstream_whose_member_order_moves_is_never_a_wrong_answer() -> None:
    from .conftest import gateway_over

    version = {"n": 0}
    gateway = gateway_over(
        shuffling_server(version), {"table": ToolSettings(ttl_ms=0, scope="public", kind="table")}, store=MemoryStore()
    )
    kinds = []
    async with fastmcp.Client(gateway) as client:
        held = await client.call_tool_mcp("table", {"name": "t"})
        for step in range(8):
            version["n"] = step // 2
            reply = await client.call_tool_mcp("table", {"name": "t"}, meta=asking(tag_of(held)))
            full = await client.call_tool_mcp("table", {"name": "t"})  # another order again: compare as JSON
            found = delta_of(reply) if (reply.meta or {}).get(META_KEY) else None
            if found is None:
                assert reply.structured_content == full.structured_content
                kinds.append("full")
                held = reply
                continue
            rebuilt = result_of(apply(document_of(held), found.ops))
            assert answer_digest(rebuilt.content, rebuilt.structured_content, rebuilt.meta) == found.digest
            assert rebuilt.structured_content == full.structured_content
            assert orjson.loads(rebuilt.content[0].text) == full.structured_content  # type: ignore[union-attr]
            kinds.append("delta")
            held = patched(held, reply)
    assert kinds
