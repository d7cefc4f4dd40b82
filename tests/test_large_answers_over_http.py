"""Answers over 1 MB over streamable HTTP, on protocol 2025-11-25 (where a result is one server-sent event):
the MCP SDK's client refuses an event over 1 MB by default (`max_sse_event_size`), so each of mcpcache's own
connections sets its bound: `mcpcache check`, the proxy's upstream leg, the gateway's upstream leg. And the
docs/client.md advice for a raw `mcp.ClientSession` does what it says.

A real FastMCP server over HTTP on 127.0.0.1 answers 2 MB (uvicorn in a thread of this process).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastmcp
import mcp
import pytest
from gateway.conftest import served_in_thread
from mcp.client.streamable_http import streamable_http_client
from proxy.hosts import fastmcp_host, proxy_args
from test_cli_errors import run

from mcpcache.gateway.app import build_gateway
from mcpcache.gateway.config import quick_config
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy

SIZE = 2_000_000
DOCS = Path(__file__).resolve().parents[1] / "docs" / "client.md"


def big_server() -> fastmcp.FastMCP:
    server: fastmcp.FastMCP = fastmcp.FastMCP("big")

    @server.tool(annotations={"readOnlyHint": True})
    def big() -> dict[str, Any]:
        return {"kind": "big", "text": "x" * SIZE}

    install(server, {"big": CachePolicy(ttl_ms=60_000)})
    return server


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with served_in_thread(big_server()) as address:
        yield address


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content if getattr(block, "text", None))


@pytest.mark.anyio
async def test_a_raw_client_session_fails_over_1_mb_and_the_documented_bound_reads_it(url: str) -> None:
    """The SDK's behaviour docs/client.md describes, then its snippet's bound."""
    async with streamable_http_client(url) as (read, write), mcp.ClientSession(read, write) as session:
        await session.initialize()
        with pytest.raises(mcp.MCPError, match="exceeded the 1048576 byte limit"):
            await session.call_tool("big", {})
    snippet = re.search(r"```python\n(# A raw ClientSession over streamable HTTP.*?)```", DOCS.read_text(), re.S)
    assert snippet is not None, "docs/client.md lost its max_sse_event_size snippet"
    scope: dict[str, Any] = {}
    exec(compile(snippet.group(1), str(DOCS), "exec"), scope)  # defines `connect(url)`
    async with scope["connect"](url) as session:
        result = await session.call_tool("big", {})
    assert len(result.structured_content["text"]) == SIZE


def test_check_reads_an_answer_over_1_mb_on_2025_11_25(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", "--legacy", "--url", url)
    assert "exceeded" not in out + err
    # Nothing failed; the check says "incomplete" (exit 3) because this server has no tool to exercise the
    # error and mutation rules with, which is what it must say of a server it could not fully try.
    assert code == 3, out + err
    assert "nothing failed" in out, out + err


@pytest.mark.anyio
async def test_the_proxy_reads_an_answer_over_1_mb_from_an_http_upstream(url: str, tmp_path: Path) -> None:
    args = proxy_args("--store", str(tmp_path / "proxy.db"), "--url", url)
    async with fastmcp_host(args, mode="legacy") as host:
        result = await host.call_tool("big", {})
    assert len(result.structured_content["text"]) == SIZE  # type: ignore[index]


@pytest.mark.anyio
async def test_the_gateway_reads_an_answer_over_1_mb_from_an_http_upstream(url: str) -> None:
    gateway = build_gateway(quick_config(url=url, command=None, tools=["big=0"]))
    try:
        async with fastmcp.Client(gateway.server, mode="legacy") as caller:  # type: ignore[call-arg]
            result = await caller.call_tool("big", {})
        assert len(result.structured_content["text"]) == SIZE  # type: ignore[index]
    finally:
        await gateway.aclose()
