"""The gateway's key arguments: declared per tool in its TOML, stamped in its `tools/list`, and used for its own
keys (its store's entries, its front tier, its delta history), in front of an upstream that never heard of
mcpcache. Real gateway (FastMCP proxy and middleware), real upstream, real clients over memory streams."""

from __future__ import annotations

from collections import Counter
from typing import Any

import fastmcp
import mcp_types as mt
import pytest
from support.transports import MODERN, ServerTarget, stock_client

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.gateway.config import ConfigError, parse_config
from mcpcache.protocol import META_KEY
from mcpcache.stores import MemoryStore

from .conftest import gateway_over

pytestmark = pytest.mark.anyio

TOML = """
[upstreams.up]
url = "http://upstream.invalid/mcp"

[upstreams.up.tools.read_doc]
ttl_ms = 60000
scope = "public"
ignore_arguments = ["request_id"]

[upstreams.up.tools.read_kept]
ttl_ms = 0
scope = "public"
key_arguments = ["path"]

[upstreams.up.tools.read_plain]
ttl_ms = 60000
scope = "public"
"""


def plain_upstream(runs: Counter[tuple[str, str]], docs: dict[str, str]) -> fastmcp.FastMCP[Any]:
    """A server without mcpcache: its answers never depend on `request_id`."""
    server: fastmcp.FastMCP[Any] = fastmcp.FastMCP("plain")

    def doc(tool: str, path: str) -> dict[str, Any]:
        runs[(tool, path)] += 1
        return {
            "kind": "doc",
            "path": path,
            "text": docs.setdefault(path, "\n".join(f"line {n} " * 8 for n in range(60))),
        }

    @server.tool
    def read_doc(path: str, request_id: str = "") -> dict[str, Any]:
        return doc("read_doc", path)

    @server.tool
    def read_kept(path: str, request_id: str = "") -> dict[str, Any]:
        return doc("read_kept", path)

    @server.tool
    def read_plain(path: str, request_id: str = "") -> dict[str, Any]:
        return doc("read_plain", path)

    return server


def test_the_toml_declares_key_arguments_per_tool() -> None:
    tools = parse_config(TOML).upstreams["up"].tools
    assert tools["read_doc"].ignore_arguments == ["request_id"]
    assert tools["read_kept"].key_arguments == ["path"]
    assert tools["read_plain"].key_rule() is None
    both = TOML + 'key_arguments = ["path"]\nignore_arguments = ["request_id"]\n'
    with pytest.raises(ConfigError, match=r"line \d+: upstreams.up.tools.read_plain: .*not both"):
        parse_config(both)
    with pytest.raises(ConfigError, match="key_arguments"):
        parse_config(TOML + 'key_arguments = "path"\n')


async def test_the_gateway_keys_and_declares_as_its_toml_says() -> None:
    runs: Counter[tuple[str, str]] = Counter()
    docs: dict[str, str] = {}
    tools = parse_config(TOML).upstreams["up"].tools
    gateway = gateway_over(plain_upstream(runs, docs), tools, store=MemoryStore())
    async with stock_client("mcp", ServerTarget.memory(gateway), MODERN) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert listed["read_doc"].meta is not None
        assert listed["read_doc"].meta[META_KEY]["ignoreArguments"] == ["request_id"]
        assert listed["read_kept"].meta[META_KEY]["keyArguments"] == ["path"]  # type: ignore[index]
        assert "keyArguments" not in ((listed["read_plain"].meta or {}).get(META_KEY) or {})

        # A stock caller (no cache of its own): the gateway's store answers the second call.
        for request_id in ("r1", "r2", "r3"):
            result = await client.call_tool("read_doc", {"path": "a", "request_id": request_id})
            assert result.structured_content is not None
            assert result.structured_content["path"] == "a"
        assert runs[("read_doc", "a")] == 1
        await client.call_tool("read_doc", {"path": "b", "request_id": "r1"})
        assert runs[("read_doc", "b")] == 1
        for request_id in ("r1", "r2"):
            await client.call_tool("read_plain", {"path": "a", "request_id": request_id})
        assert runs[("read_plain", "a")] == 2

    # A caller whose cache trusts the gateway keys on the declaration it stamped, and gets deltas from the
    # gateway's history across a volatile argument.
    cache = ToolCache(MemoryStore(), CacheSettings(trusted=True))
    async with stock_client("fastmcp", ServerTarget.memory(gateway), MODERN) as client:
        view = cache.wrap(client, server_id="test:gateway")
        first = await view.call_mcp("read_doc", {"path": "c", "request_id": "r1"})
        again = await view.call_mcp("read_doc", {"path": "c", "request_id": "r2"})
        assert (first.outcome.status, again.outcome.status) == ("miss", "fresh_hit")
        await view.call_mcp("read_kept", {"path": "k", "request_id": "r1"})
        docs["k"] = docs["k"].replace("line 7", "LINE SEVEN")
        patched = await view.call_mcp("read_kept", {"path": "k", "request_id": "r2"})
        assert patched.outcome.status == "patched", patched.outcome
        assert isinstance(patched.result, mt.CallToolResult)
        assert "LINE SEVEN" in patched.result.structured_content["text"]  # type: ignore[index]
