"""Stale windows declared by a server (docs/server.md, "Serving stale"): `cache_meta(...,
stale_while_revalidate_ms=, stale_if_error_ms=)`, `CachePolicy` and `@policies.cacheable`, checked where the
tool is declared, listed in `tools/list` with the rest of the declaration, and stamped on every answer and
not-modified reply, by the FastMCP middleware and by the MCP SDK server extension.

Real servers, a stock `mcp.Client` over memory streams.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastmcp import FastMCP
from mcp.server.mcpserver import MCPServer
from support.calls import call_conditional, call_raw, raw_block
from support.transports import MODERN, ServerTarget, stock_client

from mcpcache.protocol import META_KEY
from mcpcache.server import CachePolicy, DeclarationError, ToolPolicies, cache_meta
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import policy_from_block
from mcpcache.server.sdk import RevalidationExtension

pytestmark = pytest.mark.anyio

WINDOWS = {"staleWhileRevalidateMs": 30_000, "staleIfErrorMs": 600_000}


def test_cache_meta_declares_the_windows_in_wire_form() -> None:
    meta = cache_meta(ttl_ms=5000, stale_while_revalidate_ms=30_000, stale_if_error_ms=600_000)
    assert meta == {META_KEY: {"ttlMs": 5000, "cacheScope": "private", **WINDOWS}}
    policy = policy_from_block(meta[META_KEY])
    assert policy == CachePolicy(ttl_ms=5000, stale_while_revalidate_ms=30_000, stale_if_error_ms=600_000)
    # No window, no field: a declaration without them is exactly what it was.
    assert cache_meta(ttl_ms=5000, stale_if_error_ms=0) == {META_KEY: {"ttlMs": 5000, "cacheScope": "private"}}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"stale_while_revalidate_ms": -1},
        {"stale_while_revalidate_ms": 1.5},
        {"stale_if_error_ms": True},
        {"stale_if_error_ms": "60000"},
        {"stale_if_error_ms": 86_400_001},
    ],
    ids=repr,
)
def test_a_bad_window_fails_where_the_tool_is_declared(kwargs: dict[str, Any]) -> None:
    name = next(iter(kwargs))
    with pytest.raises((TypeError, ValueError), match=name):
        cache_meta(ttl_ms=5000, **kwargs)
    with pytest.raises((TypeError, ValueError), match=name):
        ToolPolicies().cacheable(**kwargs)
    block = {"ttlMs": 5000, "staleIfErrorMs" if "error" in name else "staleWhileRevalidateMs": kwargs[name]}
    with pytest.raises(DeclarationError, match=re.escape(name)):
        policy_from_block(block)


async def test_a_fastmcp_tool_lists_and_stamps_its_windows() -> None:
    mcp = FastMCP("stale")

    @mcp.tool(meta=cache_meta(ttl_ms=5000, stale_while_revalidate_ms=30_000, stale_if_error_ms=600_000))
    def read(key: str) -> dict[str, Any]:
        return {"kind": "doc", "key": key}

    policies = ToolPolicies()

    @mcp.tool
    @policies.cacheable(ttl_ms=1000, stale_if_error_ms=60_000)
    def peek(key: str) -> dict[str, Any]:
        return {"kind": "doc", "key": key}

    @mcp.tool(meta=cache_meta(ttl_ms=5000))
    def plain(key: str) -> dict[str, Any]:
        return {"kind": "doc", "key": key}

    install(mcp, policies)
    async with stock_client("mcp", ServerTarget.memory(mcp), MODERN) as client:
        listed = {tool.name: (tool.meta or {}).get(META_KEY) for tool in (await client.list_tools()).tools}
        full = await call_raw(client, "read", {"key": "a"})
        block = raw_block(full)
        assert block is not None
        not_modified = raw_block(await call_conditional(client, "read", {"key": "a"}, block["etag"]))
        peeked = raw_block(await call_raw(client, "peek", {"key": "a"}))
        untouched = raw_block(await call_raw(client, "plain", {"key": "a"}))
    assert listed["read"] == {"ttlMs": 5000, "cacheScope": "private", **WINDOWS}
    assert listed["peek"] == {"ttlMs": 1000, "cacheScope": "private", "staleIfErrorMs": 60_000}
    assert {name: block[name] for name in WINDOWS} == WINDOWS
    assert not_modified is not None
    assert not_modified.get("notModified") is True
    assert {name: not_modified[name] for name in WINDOWS} == WINDOWS
    assert peeked is not None
    assert peeked["staleIfErrorMs"] == 60_000
    assert "staleWhileRevalidateMs" not in peeked
    assert untouched is not None
    assert not set(WINDOWS) & set(untouched)


async def test_the_sdk_extension_stamps_the_windows() -> None:
    policies = ToolPolicies(
        {"read": CachePolicy(ttl_ms=5000, stale_while_revalidate_ms=30_000, stale_if_error_ms=600_000)}
    )
    sdk = MCPServer("stale-sdk", extensions=[RevalidationExtension(policies)])

    def read(key: str) -> dict[str, Any]:
        return {"kind": "doc", "key": key}

    sdk.add_tool(read)
    async with stock_client("mcp", ServerTarget.memory(sdk), MODERN) as client:
        block = raw_block(await call_raw(client, "read", {"key": "a"}))
        assert block is not None
        not_modified = raw_block(await call_conditional(client, "read", {"key": "a"}, block["etag"]))
    assert {name: block[name] for name in WINDOWS} == WINDOWS
    assert not_modified is not None
    assert not_modified.get("notModified") is True
    assert {name: not_modified[name] for name in WINDOWS} == WINDOWS
