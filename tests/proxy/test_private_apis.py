"""The FastMCP internals the proxy relies on (docs/proxy.md names them and the versions tested).

Each test fails first, and says which, if a FastMCP release moves or changes one of them.
"""

from __future__ import annotations

import inspect

import mcp_types as mt
import pytest
from fastmcp import FastMCP
from fastmcp.server.providers import proxy as fastmcp_proxy
from fastmcp.server.providers.proxy import ProxyClient

pytestmark = pytest.mark.anyio


def test_fastmcp_still_stashes_the_request_context_for_its_relays() -> None:
    # mcpcache.proxy.calls calls it before every upstream call, as FastMCP's ProxyTool.run does, so that the
    # upstream's logging, sampling and elicitation reach the host request that caused them.
    stash = getattr(fastmcp_proxy, "_stash_proxy_request_context", None)
    assert stash is not None, "fastmcp no longer has _stash_proxy_request_context"
    assert list(inspect.signature(stash).parameters) == ["client", "ctx"]
    assert getattr(ProxyClient("http://127.0.0.1:9/mcp"), "_proxy_rc_ref", None) == [None]


async def test_the_proxy_client_session_does_not_check_answers_against_output_schemas() -> None:
    # The proxy's conditional calls go out on this session; a not-modified reply ({"kind": ...}) need not fit
    # the tool's output schema, and the host checks full answers for itself.
    server = FastMCP("strict")

    @server.tool
    def person() -> dict[str, int]:
        return {"age": 3}

    async with ProxyClient(server) as client:
        await client.list_tools()
        stub = mt.CallToolResult(content=[], structured_content={"kind": "x", "age": "not a number"})
        await client.session.validate_tool_result("person", stub)
