"""The gateway gives freed memory back to the system after a large answer (mcpcache/gateway/memory.py)."""

from __future__ import annotations

import platform
from typing import Any

import fastmcp
import mcp_types as mt
import pytest
from fastmcp.tools.base import ToolResult

from mcpcache.gateway.config import ToolSettings
from mcpcache.gateway.memory import ReleaseMemoryAfterLargeAnswers, answer_chars, release_freed_memory
from mcpcache.stores import MemoryStore

from .conftest import gateway_over

pytestmark = pytest.mark.anyio


def test_an_answer_is_measured_by_its_text_and_data() -> None:
    result = ToolResult(
        content=[
            mt.TextContent(type="text", text="x" * 1000),
            mt.ImageContent(type="image", data="QUJD" * 50, mime_type="image/png"),
            mt.EmbeddedResource(type="resource", resource=mt.TextResourceContents(uri="a://b", text="ignored")),
        ]
    )
    assert answer_chars(result) == 1200


def sized_server() -> fastmcp.FastMCP[Any]:
    server: fastmcp.FastMCP[Any] = fastmcp.FastMCP("sized")

    @server.tool
    def text(chars: int) -> str:
        return "y" * chars

    return server


async def test_memory_is_released_after_a_large_answer_only() -> None:
    released: list[int] = []
    server = sized_server()
    server.middleware.insert(0, ReleaseMemoryAfterLargeAnswers(lambda: released.append(1), threshold=10_000))
    async with fastmcp.Client(server) as client:
        for chars in (100, 20_000, 9_000, 10_000):
            result = await client.call_tool_mcp("text", {"chars": chars})
            assert not result.is_error
    assert released == [1, 1]  # after the 20,000 and the 10,000 characters


async def test_a_release_that_fails_never_fails_the_call() -> None:
    def broken() -> None:
        raise OSError("no")

    server = sized_server()
    server.middleware.insert(0, ReleaseMemoryAfterLargeAnswers(broken, threshold=1))
    async with fastmcp.Client(server) as client:
        result = await client.call_tool_mcp("text", {"chars": 10})
    assert result.content[0].text == "y" * 10  # type: ignore[union-attr]


def test_the_gateway_releases_memory_outermost() -> None:
    gateway = gateway_over(sized_server(), {"text": ToolSettings(ttl_ms=1000, scope="public")}, store=MemoryStore())
    assert isinstance(gateway.middleware[0], ReleaseMemoryAfterLargeAnswers)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_glibc_has_its_trim() -> None:
    assert release_freed_memory is not None
    release_freed_memory()
