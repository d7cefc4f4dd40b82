"""Delta replies from real servers (docs/protocol.md section 11): FastMCP with `install` and the MCP SDK's
`MCPServer` with `RevalidationExtension`, stock clients (`mcp.Client`, `fastmcp.Client`) over memory
streams and streamable HTTP on 127.0.0.1, in both protocol eras.

A client holds an answer; the tool's data changes; the client sends its tag with `acceptDelta`. What comes
back is checked the way the client half will check it: the ops applied to the client's own copy
(`mcpcache.delta.apply` on `document_of`, then `result_of`) give exactly the server's current full answer,
and `answer_digest` of that equals the delta's digest. The rest: no delta unless asked; a base the
server does not hold gives the full answer; errors are neither base nor target; a delta larger than half
the answer is not sent; validators; the per-tool opt-out; the current tag still gets not-modified.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import fastmcp
import mcp_types as mt
import orjson
import pytest
from support.transports import (
    CLIENT_KINDS,
    ERAS,
    MODERN,
    ClientKind,
    Era,
    ServerKind,
    ServerTarget,
    StockClient,
    http_servers,
    stock_client,
)

from mcpcache.delta import FORMAT, apply, document_of, result_of
from mcpcache.etag import answer_digest
from mcpcache.protocol import (
    META_KEY,
    SERVER_INFO_KEY,
    CacheBlock,
    DeltaBlock,
    conditional_request_meta,
    parse_cache_block,
    weak_equal,
)
from server.notes import KIND, SCRIPT, build

pytestmark = pytest.mark.anyio

KINDS: tuple[ServerKind, ...] = ("fastmcp", "sdk")
ACCEPT = [FORMAT]


# Calling as a stock client does ---------------------------------------------------------------------


async def call(
    client: StockClient, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
) -> mt.CallToolResult:
    """A `tools/call` through the client's own public API, with `meta` as the request's `_meta`."""
    if isinstance(client, fastmcp.Client):
        return await client.call_tool_mcp(tool, arguments, meta=meta)
    return await client.call_tool(tool, arguments, meta=meta)  # type: ignore[arg-type]


async def read(client: StockClient, tool: str, key: str, meta: dict[str, Any] | None = None) -> mt.CallToolResult:
    result = await call(client, tool, {"key": key}, meta)
    return result


async def read_since(
    client: StockClient, tool: str, key: str, held: mt.CallToolResult, accept: list[str] | None = ACCEPT
) -> mt.CallToolResult:
    """A conditional read holding `held`'s tag, accepting `accept` (None: no acceptDelta at all)."""
    return await read(client, tool, key, conditional_request_meta(tag(held), accept_delta=accept or ()))


async def edit(client: StockClient, key: str, index: int = 17, text: str = "an edited line") -> None:
    done = await call(client, "edit_notes", {"key": key, "index": index, "text": text})
    assert not done.is_error


def block(result: mt.CallToolResult) -> CacheBlock:
    found = parse_cache_block(result.meta)
    assert found is not None, result
    return found


def tag(result: mt.CallToolResult) -> str:
    etag = block(result).etag
    assert etag is not None
    return etag


def delta_of(result: mt.CallToolResult) -> DeltaBlock:
    found = block(result).delta
    assert isinstance(found, DeltaBlock), f"expected a delta reply, got {result}"
    return found


def is_full(result: mt.CallToolResult) -> bool:
    """A full answer: the notes themselves, with a block that is neither not-modified nor a delta."""
    found = block(result)
    return (
        not result.is_error
        and found.delta is None
        and not found.not_modified
        and isinstance(result.structured_content, dict)
        and "lines" in result.structured_content
    )


def document(result: mt.CallToolResult) -> dict[str, Any]:
    """What the answer says, without what only travels beside it (the block, the SDK's serverInfo)."""
    found = document_of(result)
    meta = {k: v for k, v in found.get("_meta", {}).items() if k != SERVER_INFO_KEY}
    found.pop("_meta", None)
    if meta:
        found["_meta"] = meta
    return found


def rebuilt(held: mt.CallToolResult, reply: mt.CallToolResult) -> mt.CallToolResult:
    """What the client half will do: apply the ops (sent as JSON) to a copy of its held answer's document."""
    ops = orjson.loads(orjson.dumps(delta_of(reply).ops))
    return result_of(apply(document_of(held), ops))


def check_delta(held: mt.CallToolResult, reply: mt.CallToolResult, current: mt.CallToolResult) -> None:
    """`reply` is a delta from `held` to `current`, as docs/protocol.md section 11 says it must be."""
    found = delta_of(reply)
    assert reply.content == []
    assert not reply.is_error
    assert reply.structured_content == {"kind": KIND}
    assert found.format == FORMAT
    assert weak_equal(found.base, tag(held))
    assert not block(reply).not_modified
    assert block(reply).etag == tag(current)
    answer = rebuilt(held, reply)
    assert answer_digest(answer.content, answer.structured_content, answer.meta) == found.digest
    assert document(answer) == document(current)
    assert answer.content == current.content
    assert answer.structured_content == current.structured_content


# Where the servers run --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http_urls() -> Iterator[dict[str, str]]:
    """One notes server of each kind over streamable HTTP on 127.0.0.1 (keys keep the tests apart)."""
    commands = [[sys.executable, str(SCRIPT), kind] for kind in KINDS]
    with http_servers(commands) as urls:
        yield dict(zip(KINDS, urls, strict=True))


def connect_to(target: ServerTarget, client_kind: ClientKind, era: Era) -> AbstractAsyncContextManager[StockClient]:
    return stock_client(client_kind, target, era)


# The round trip, everywhere --------------------------------------------------------------------------


async def round_trip(client: StockClient, key: str) -> None:
    """Read, change, get a delta, check it; the new tag gets not-modified; a second change gives a delta
    against the first delta's answer (which the server recorded); a stock read gets the full answer."""
    held = await read(client, "notes", key)
    assert is_full(held)
    await edit(client, key)
    reply = await read_since(client, "notes", key, held)
    current = await read(client, "notes", key)
    check_delta(held, reply, current)

    again = await read_since(client, "notes", key, current)
    assert block(again).not_modified
    assert block(again).delta is None

    await edit(client, key, 3, "a second edit")
    second = await read_since(client, "notes", key, current)
    newest = await read(client, "notes", key)
    check_delta(current, second, newest)
    assert is_full(newest)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("client_kind", CLIENT_KINDS)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_change_comes_back_as_a_delta_over_memory_streams(
    kind: ServerKind, client_kind: ClientKind, era: Era
) -> None:
    server, layer = build(kind)
    async with connect_to(ServerTarget.memory(server), client_kind, era) as client:
        await round_trip(client, "mem")
    assert layer.stats.deltas_sent == 2
    assert layer.stats.deltas_declined == 0


@pytest.mark.slow
@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("client_kind", CLIENT_KINDS)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_change_comes_back_as_a_delta_over_http(
    http_urls: dict[str, str], kind: ServerKind, client_kind: ClientKind, era: Era
) -> None:
    async with connect_to(ServerTarget.http(kind, http_urls[kind]), client_kind, era) as client:
        await round_trip(client, f"http-{client_kind}-{era}")


# No delta unless asked ---------------------------------------------------------------------------------


@asynccontextmanager
async def memory_server(kind: ServerKind, **kwargs: Any) -> AsyncIterator[tuple[StockClient, Any]]:
    """A notes server of `kind` in process, a stock `mcp.Client` on it, and its mcpcache layer."""
    server, layer = build(kind, **kwargs)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        yield client, layer


@pytest.mark.parametrize("kind", KINDS)
async def test_no_delta_unless_the_request_accepts_a_format_the_server_sends(kind: ServerKind) -> None:
    async with memory_server(kind) as (client, layer):
        held = await read(client, "notes", "asked")
        await edit(client, "asked")
        plain = await read(client, "notes", "asked")
        without = await read_since(client, "notes", "asked", held, accept=None)
        empty = await read(client, "notes", "asked", {META_KEY: {"etag": tag(held), "acceptDelta": []}})
        not_a_list = await read(client, "notes", "asked", {META_KEY: {"etag": tag(held), "acceptDelta": FORMAT}})
        unknown = await read_since(client, "notes", "asked", held, accept=["json-merge-patch/9"])
        untagged = await read(client, "notes", "asked", {META_KEY: {"acceptDelta": [FORMAT]}})
        for full in (plain, without, empty, not_a_list, unknown, untagged):
            assert is_full(full)
            assert document(full) == document(plain)
        assert layer.stats.deltas_declined == 1  # only the unknown format asked for one
        # The caller's order of preference, among the formats the server knows.
        preferred = await read_since(client, "notes", "asked", held, accept=["json-merge-patch/9", FORMAT])
        check_delta(held, preferred, plain)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_base_the_server_does_not_hold_gives_the_full_answer(kind: ServerKind) -> None:
    async with memory_server(kind) as (client, layer):
        other = await read(client, "notes", "other")
        first = await read(client, "notes", "held")
        held = [first]
        for n in range(5):  # five more versions: the first falls out of the key's four
            await edit(client, "held", n, f"edit {n}")
            held.append(await read(client, "notes", "held"))
        unknown_tag = 'W/"0123456789abcdef0123456789abcdef"'
        never_sent = await read(client, "notes", "held", conditional_request_meta(unknown_tag, accept_delta=ACCEPT))
        for_other_arguments = await read_since(client, "notes", "held", other)
        evicted = await read_since(client, "notes", "held", first)
        still_held = await read_since(client, "notes", "held", held[2])
        assert layer.stats.deltas_declined == 3
    for full in (never_sent, for_other_arguments, evicted):
        assert is_full(full)
        assert document(full) == document(held[-1])
    check_delta(held[2], still_held, held[-1])


@pytest.mark.parametrize("kind", KINDS)
async def test_with_no_history_nothing_is_kept_and_no_delta_is_advertised(kind: ServerKind) -> None:
    async with memory_server(kind, delta_history_bytes=0) as (client, layer):
        held = await read(client, "notes", "off")
        await edit(client, "off")
        full = await read_since(client, "notes", "off", held)
        settings = client.server_capabilities.extensions  # type: ignore[union-attr]
    assert is_full(full)
    assert layer.history is None
    assert layer.stats.deltas_declined == 1
    assert settings is not None
    assert "deltaFormats" not in next(iter(settings.values()))


# Partitions ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_urls() -> Iterator[dict[str, str]]:
    """A notes server of each kind over HTTP that requires one of `notes.TOKENS` as a bearer token."""
    commands = [[sys.executable, str(SCRIPT), kind, "--auth"] for kind in KINDS]
    with http_servers(commands) as urls:
        yield dict(zip(KINDS, urls, strict=True))


@asynccontextmanager
async def as_caller(url: str, token: str) -> AsyncIterator[fastmcp.Client[Any]]:
    async with fastmcp.Client(url, auth=token) as client:
        yield client


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
async def test_a_delta_never_crosses_partitions(auth_urls: dict[str, str], kind: ServerKind) -> None:
    """Alice's private answer is never the base of a delta sent to Bob, even when Bob sends its tag; a
    public tool's answers are everybody's, so Bob gets a delta against the answer Alice was sent."""
    url = auth_urls[kind]
    async with as_caller(url, "t-alice") as alice, as_caller(url, "t-bob") as bob:
        private = await read(alice, "notes", "shared")
        public = await read(alice, "notes_public", "shared")
        await edit(alice, "shared")
        bob_private = await read_since(bob, "notes", "shared", private)
        bob_public = await read_since(bob, "notes_public", "shared", public)
        alice_private = await read_since(alice, "notes", "shared", private)
        current = await read(alice, "notes", "shared")
        current_public = await read(bob, "notes_public", "shared")
    assert is_full(bob_private)
    assert document(bob_private) == document(current)
    check_delta(private, alice_private, current)
    check_delta(public, bob_public, current_public)


# What is never a base or a target ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_errors_are_neither_base_nor_target(kind: ServerKind) -> None:
    async with memory_server(kind) as (client, layer):
        held = await read(client, "notes_or_error", "e")
        assert layer.history is not None
        kept = layer.history.snapshot().versions
        assert (await call(client, "break_notes", {"key": "e", "broken": True})).is_error is False
        failed = await read_since(client, "notes_or_error", "e", held)
        assert failed.is_error
        assert parse_cache_block(failed.meta) is None
        assert layer.history.snapshot().versions == kept  # the error was not recorded
        await call(client, "break_notes", {"key": "e", "broken": False})
        await edit(client, "e")
        reply = await read_since(client, "notes_or_error", "e", held)  # the base is still the last answer
        current = await read(client, "notes_or_error", "e")
    check_delta(held, reply, current)
    assert layer.stats.errors_passed == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_a_delta_larger_than_half_the_answer_is_not_sent(kind: ServerKind) -> None:
    async with memory_server(kind) as (client, layer):
        held = await read(client, "notes", "big-change")
        assert (await call(client, "rewrite_notes", {"key": "big-change"})).is_error is False
        full = await read_since(client, "notes", "big-change", held)
        current = await read(client, "notes", "big-change")
    assert is_full(full)
    assert document(full) == document(current)
    assert layer.stats.deltas_declined == 1
    assert layer.stats.deltas_sent == 0


@pytest.mark.parametrize("kind", KINDS)
async def test_an_answer_with_no_digest_form_is_sent_in_full(kind: ServerKind) -> None:
    async with memory_server(kind) as (client, layer):
        held = await read(client, "notes_huge", "n")
        await edit(client, "n")
        full = await read_since(client, "notes_huge", "n", held)
    assert is_full(full)
    assert full.structured_content["serial"] == 2**60 + 1
    assert layer.stats.deltas_declined == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_a_tool_that_opted_out_never_sends_a_delta(kind: ServerKind) -> None:
    async with memory_server(kind) as (client, layer):
        assert layer.history is not None
        held = await read(client, "notes_no_delta", "o")
        assert layer.history.snapshot().versions == 0  # nothing of it is kept
        await edit(client, "o")
        full = await read_since(client, "notes_no_delta", "o", held)
        not_modified = await read_since(client, "notes_no_delta", "o", full)
        listing = await client.list_tools()
        assert not isinstance(listing, list)
        listed = {tool.name: tool for tool in listing.tools}
    assert is_full(full)
    assert block(not_modified).not_modified  # the opt-out is from deltas only
    if kind == "fastmcp":  # the SDK lists no declarations
        assert listed["notes_no_delta"].meta[META_KEY]["deltas"] is False  # type: ignore[index]
        assert "deltas" not in listed["notes"].meta[META_KEY]  # type: ignore[index]


# Validators -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_validator_tool_sends_deltas_under_the_validator_s_tags(kind: ServerKind) -> None:
    async with memory_server(kind) as (client, layer):
        held = await read(client, "notes_versioned", "v")
        await edit(client, "v")
        reply = await read_since(client, "notes_versioned", "v", held)
        confirmed = await read_since(client, "notes_versioned", "v", reply)  # the delta's own tag
        current = await read(client, "notes_versioned", "v")
    check_delta(held, reply, current)
    assert block(confirmed).not_modified
    assert layer.stats.body_skipped == 1  # the new tag matched before the body ran
