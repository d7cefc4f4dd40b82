"""The private parts of the MCP SDK and FastMCP the client half relies on, each checked by name.

Each is used because no public API offers it (the reason is beside each use in mcpcache/client). If an
SDK or FastMCP release moves one of them, this file fails first and names it, instead of the cache
quietly losing a behaviour. Versions tested are listed in docs/client.md.
"""

from __future__ import annotations

import inspect

import fastmcp
import mcp_types as mt
import pytest
from mcp import Client, ClientSession
from mcp.client._memory import InMemoryTransport
from mcp.server.mcpserver import MCPServer

from mcpcache.client.wrappers import _call_tool_adapter, _session_default_timeout

pytestmark = pytest.mark.anyio


def _server() -> MCPServer:
    server = MCPServer("private-apis")

    @server.tool()
    def echo(text: str) -> str:
        return text

    return server


async def test_the_session_keeps_its_default_read_timeout_where_the_cache_reads_it() -> None:
    async with Client(_server(), read_timeout_seconds=7.5) as client:
        assert isinstance(client.session, ClientSession)
        assert hasattr(client.session, "_session_read_timeout_seconds")
        assert _session_default_timeout(client.session) == 7.5


async def test_the_session_parses_tool_answers_with_its_own_adapter() -> None:
    async with Client(_server()) as client:
        adapter = getattr(client.session, "_call_tool_adapter", None)
        assert adapter is not None, "ClientSession._call_tool_adapter is gone"
        assert _call_tool_adapter(client.session) is adapter
        parsed = adapter.validate_python({"content": [{"type": "text", "text": "x"}]})
        assert isinstance(parsed, mt.CallToolResult)


async def test_the_session_routes_notifications_through_its_message_handler() -> None:
    async with Client(_server()) as client:
        assert callable(getattr(client.session, "_message_handler", None)), "ClientSession._message_handler is gone"


async def test_fastmcp_parses_results_with_the_method_the_view_calls() -> None:
    parse = getattr(fastmcp.Client, "_parse_call_tool_result", None)
    assert parse is not None, "fastmcp.Client._parse_call_tool_result is gone"
    assert list(inspect.signature(parse).parameters)[:3] == ["self", "name", "result"]
    assert "raise_on_error" in inspect.signature(parse).parameters


async def test_fastmcp_keeps_its_client_wide_progress_handler_where_the_view_reads_it() -> None:
    def handler(progress: float, total: float | None, message: str | None) -> None: ...

    client = fastmcp.Client(_server(), progress_handler=handler)
    assert getattr(client, "_progress_handler", None) is handler, "fastmcp.Client._progress_handler is gone"


def test_in_memory_transport_is_where_the_tests_expect_it() -> None:
    assert InMemoryTransport is not None
