"""The server half's counters, and one meaning of "bytes saved" on both sides of the wire.

Real FastMCP and MCP SDK servers, each given an SDK meter provider (never set globally), and a real
`ToolCache` client with a provider of its own, over memory streams. For one not-modified reply (and one
delta reply) the client and the server report the same bytes saved: the full answer less the reply, both
as the wire carries them (`mcpcache.sizes`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import mcp_types as mt
import pytest
from fastmcp import FastMCP
from fastmcp.tools.base import ToolResult
from mcp.server.mcpserver import MCPServer
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from stores.backends import FakeClock
from support.metrics import sums
from support.transports import MODERN, ServerTarget, stock_client

from mcpcache.client import ToolCache
from mcpcache.protocol import CacheBlock, NotModifiedReply
from mcpcache.server import CachePolicy, ServerStats, cache_meta
from mcpcache.server.decisions import AnswerSizes
from mcpcache.server.fastmcp import install
from mcpcache.server.sdk import RevalidationExtension
from mcpcache.stores import MemoryStore

pytestmark = pytest.mark.anyio

TTL_MS = 1000
LINES = [f'line {n}: "quoted", back\\slashed, non-ASCII é' for n in range(60)]


@pytest.fixture
def readers() -> Iterator[tuple[InMemoryMetricReader, MeterProvider, InMemoryMetricReader, MeterProvider]]:
    server_reader, client_reader = InMemoryMetricReader(), InMemoryMetricReader()
    server_provider = MeterProvider(metric_readers=[server_reader])
    client_provider = MeterProvider(metric_readers=[client_reader])
    yield server_reader, server_provider, client_reader, client_provider
    server_provider.shutdown()
    client_provider.shutdown()


class Notes:
    """What the tools read: lines that one call edits."""

    def __init__(self) -> None:
        self.lines = list(LINES)

    def answer(self) -> dict[str, Any]:
        return {"kind": "notes", "lines": list(self.lines)}


Shape = str
SHAPES = ["fastmcp-raw", "fastmcp-hashed", "fastmcp-toolresult", "sdk"]


def build(shape: Shape, notes: Notes, meter_provider: MeterProvider) -> tuple[FastMCP | MCPServer, ServerStats]:
    """A server whose `notes` tool answers not-modified by the path `shape` names: FastMCP from the raw
    return value (the answer never built), FastMCP from the built answer, FastMCP from a `ToolResult` the
    tool built itself, the MCP SDK."""
    if shape == "sdk":
        extension = RevalidationExtension({"notes": CachePolicy(ttl_ms=TTL_MS)}, meter_provider=meter_provider)
        sdk = MCPServer("notes", extensions=[extension])

        def notes_tool() -> dict[str, Any]:
            return notes.answer()

        sdk.add_tool(notes_tool, name="notes")
        return sdk, extension.stats
    server = FastMCP("notes")
    if shape == "fastmcp-toolresult":

        @server.tool(name="notes", meta=cache_meta(ttl_ms=TTL_MS))
        def built() -> ToolResult:
            answer = notes.answer()
            return ToolResult(
                content=[mt.TextContent(type="text", text="\n".join(answer["lines"]))], structured_content=answer
            )

    else:

        @server.tool(name="notes", meta=cache_meta(ttl_ms=TTL_MS))
        def plain() -> dict[str, Any]:
            return notes.answer()

    return server, install(server, raw_tags=shape != "fastmcp-hashed", meter_provider=meter_provider).stats


@pytest.mark.parametrize("shape", SHAPES)
async def test_client_and_server_report_the_same_bytes_saved_for_one_not_modified_reply(
    shape: Shape, readers: tuple[InMemoryMetricReader, MeterProvider, InMemoryMetricReader, MeterProvider]
) -> None:
    server_reader, server_provider, client_reader, client_provider = readers
    server, stats = build(shape, Notes(), server_provider)
    clock = FakeClock()
    cache = ToolCache(MemoryStore(clock=clock), clock=clock, meter_provider=client_provider)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        view = cache.wrap(client, server_id="notes")
        await view.call("notes", {})
        clock.advance(TTL_MS / 1000 + 1)
        revalidated = (await view.call("notes", {})).outcome
        clock.advance(TTL_MS / 1000 + 1)
        again = (await view.call("notes", {})).outcome  # the same version: its size is not measured again
    assert again == revalidated
    expected_kind = "not_modified" if shape in ("sdk", "fastmcp-hashed") else "conversion_skipped"
    assert revalidated.status == "revalidated"
    assert revalidated.bytes_saved > 2 * sum(len(line) for line in LINES)  # the lines twice: text and structured
    assert stats.bytes_saved == 2 * revalidated.bytes_saved
    assert sums(server_reader, "mcpcache.server.saved") == {
        (("mcpcache.outcome", expected_kind), ("mcpcache.tool", "notes")): 2 * revalidated.bytes_saved
    }
    client_saved = sums(client_reader, "mcpcache.client.saved")
    assert client_saved == {
        (("mcpcache.outcome", "revalidated"), ("mcpcache.server", "notes"), ("mcpcache.tool", "notes")): (
            2 * revalidated.bytes_saved
        )
    }
    assert sums(server_reader, "mcpcache.server.calls") == {
        (("mcpcache.outcome", "stamped"), ("mcpcache.tool", "notes")): 1,
        (("mcpcache.outcome", expected_kind), ("mcpcache.tool", "notes")): 2,
    }


@pytest.mark.parametrize("shape", ["fastmcp-raw", "sdk"])
async def test_client_and_server_report_the_same_bytes_saved_for_one_delta_reply(
    shape: Shape, readers: tuple[InMemoryMetricReader, MeterProvider, InMemoryMetricReader, MeterProvider]
) -> None:
    server_reader, server_provider, _, client_provider = readers
    notes = Notes()
    server, stats = build(shape, notes, server_provider)
    clock = FakeClock()
    cache = ToolCache(MemoryStore(clock=clock), clock=clock, meter_provider=client_provider)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        view = cache.wrap(client, server_id="notes")
        await view.call("notes", {})
        notes.lines[3] = "an edited line"
        clock.advance(TTL_MS / 1000 + 1)
        patched = (await view.call("notes", {})).outcome
    assert patched.status == "patched"
    assert stats.deltas_sent == 1
    assert stats.bytes_saved == patched.bytes_saved > 0
    assert sums(server_reader, "mcpcache.server.saved") == {
        (("mcpcache.outcome", "delta"), ("mcpcache.tool", "notes")): patched.bytes_saved
    }


async def test_a_reply_whose_body_never_ran_is_counted_with_no_bytes(
    readers: tuple[InMemoryMetricReader, MeterProvider, InMemoryMetricReader, MeterProvider],
) -> None:
    """A validator named the version: the answer was never made, so its size is not known."""
    server_reader, server_provider, _, _ = readers
    server = FastMCP("notes")

    @server.tool(meta=cache_meta(ttl_ms=TTL_MS))
    def notes() -> dict[str, Any]:
        return Notes().answer()

    stats = install(server, validators={"notes": lambda arguments: 1}, meter_provider=server_provider).stats
    clock = FakeClock()
    cache = ToolCache(MemoryStore(clock=clock), clock=clock)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        view = cache.wrap(client, server_id="notes")
        await view.call("notes", {})
        clock.advance(TTL_MS / 1000 + 1)
        assert (await view.call("notes", {})).outcome.bytes_saved > 0  # the client knows what it holds
    assert (stats.body_skipped, stats.bytes_saved) == (1, 0)
    assert sums(server_reader, "mcpcache.server.saved") == {}
    assert (
        sums(server_reader, "mcpcache.server.calls")[(("mcpcache.outcome", "body_skipped"), ("mcpcache.tool", "notes"))]
        == 1
    )


def test_the_size_of_a_version_is_measured_once_per_tag_and_block() -> None:
    sizes = AnswerSizes(kept=2)
    measured: list[str] = []

    def measure(tag: str) -> Callable[[], int]:
        def run() -> int:
            measured.append(tag)
            return 10_000

        return run

    def reply(ttl_ms: int) -> NotModifiedReply:
        return NotModifiedReply.build(CacheBlock(ttl_ms=ttl_ms, etag='W/"1"'), "notes")

    first = sizes.saved('W/"1"', reply(1000), measure("a"))
    assert sizes.saved('W/"1"', reply(1000), measure("a again")) == first
    assert 0 < first < 10_000
    sizes.saved('W/"1"', reply(2000), measure("another block"))  # another block: another full answer
    sizes.saved('W/"2"', reply(1000), measure("b"))  # past `kept`: the oldest goes
    sizes.saved('W/"1"', reply(1000), measure("a, measured again"))
    assert measured == ["a", "another block", "b", "a, measured again"]
