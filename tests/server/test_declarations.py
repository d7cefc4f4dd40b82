"""FastMCP declarations where the tool is declared: the tool's own `meta` (`cache_meta`), names that
change (`@mcp.tool(name=...)`, mounting under a namespace), the `tools/list` entry of declared tools, and
warnings for declarations that match no tool.

Real FastMCP servers (one mounting another), a stock `mcp.Client` over memory streams.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import mcp_types as mt
import pytest
from fastmcp import FastMCP
from support.calls import block_of, call_conditional, call_raw
from support.transports import MODERN, ServerTarget, StockClient, stock_client

from mcpcache.protocol import META_KEY
from mcpcache.server import CachePolicy, DeclarationError, ToolPolicies, cache_meta
from mcpcache.server.fastmcp import RevalidationMiddleware, install
from mcpcache.server.policies import policy_from_block

pytestmark = pytest.mark.anyio

SERVER_LOGGER = "mcpcache.server"


def connect(server: FastMCP) -> AbstractAsyncContextManager[StockClient]:
    return stock_client("mcp", ServerTarget.memory(server), MODERN)


async def listed_blocks(client: StockClient, key: str = META_KEY) -> dict[str, Any]:
    """Each listed tool's cache block (None when it lists none), by name."""
    tools = await client.list_tools()
    return {tool.name: (tool.meta or {}).get(key) for tool in tools.tools}


async def revalidates(client: StockClient, tool: str, args: dict[str, Any]) -> tuple[mt.CallToolResult, bool]:
    """A full call, then a conditional one with its tag: (the full answer, whether it got not-modified)."""
    first = await call_raw(client, tool, args)
    block = block_of(first)
    assert block is not None, f"{tool} was not stamped"
    assert block.etag is not None
    reply = await call_conditional(client, tool, args, block.etag)
    replied = block_of(reply)
    return first, replied is not None and replied.not_modified


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == SERVER_LOGGER and r.levelno == logging.WARNING]


# --- the declaration block --------------------------------------------------------------------------


def test_cache_meta_is_the_policy_in_wire_form() -> None:
    for policy in (
        CachePolicy(),
        CachePolicy(ttl_ms=5000, scope="public", kind="notebook.read"),
        CachePolicy(ttl_ms=1, etag=False),
    ):
        meta = cache_meta(ttl_ms=policy.ttl_ms, scope=policy.scope, kind=policy.kind, etag=policy.etag)
        assert meta == {META_KEY: policy.declaration_block()}
        assert policy_from_block(meta[META_KEY]) == policy
    assert cache_meta(ttl_ms=5000) == {META_KEY: {"ttlMs": 5000, "cacheScope": "private"}}
    assert cache_meta(etag=False, meta_key="io.example/cache") == {
        "io.example/cache": {"ttlMs": 0, "cacheScope": "private", "etag": False}
    }


@pytest.mark.parametrize("kwargs", [{"ttl_ms": -1}, {"ttl_ms": 2.5}, {"scope": "session"}, {"kind": 3}], ids=repr)
def test_a_bad_cache_meta_fails_where_the_tool_is_declared(kwargs: dict[str, Any]) -> None:
    with pytest.raises((TypeError, ValueError)):
        cache_meta(**kwargs)


@pytest.mark.parametrize(
    ("block", "names"),
    [
        ("5000", "not an object"),
        ({"ttlMs": "5s"}, "ttl_ms"),
        ({"ttl": 5000}, "unknown field(s) ttl"),
        ({"ttlMs": 1, "etag": "yes"}, "etag"),
        ({"cacheScope": "session"}, "scope"),
    ],
    ids=repr,
)
def test_a_block_that_is_not_a_declaration_says_what_is_wrong(block: object, names: str) -> None:
    with pytest.raises(DeclarationError, match=re.escape(names)):
        policy_from_block(block)


# --- declared in the tool's own meta ----------------------------------------------------------------


async def test_a_tool_declared_in_its_meta_is_stamped_listed_and_revalidated() -> None:
    versions = {"a": 1}
    mcp = FastMCP("meta")

    @mcp.tool(meta=cache_meta(ttl_ms=5000, scope="public") | {"example.com/own": 1})
    def read(key: str) -> dict[str, Any]:
        return {"kind": "doc", "key": key}

    @mcp.tool(meta=cache_meta(ttl_ms=1000))
    def versioned(key: str) -> dict[str, Any]:
        versions["runs"] = versions.get("runs", 0) + 1
        return {"key": key, "version": versions[key]}

    @mcp.tool
    def plain(key: str) -> str:
        return key

    middleware = install(mcp, validators={"versioned": lambda args: versions[args["key"]]})
    async with connect(mcp) as client:
        listed = await listed_blocks(client)
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        first, not_modified = await revalidates(client, "read", {"key": "a"})
        _, skipped = await revalidates(client, "versioned", {"key": "a"})
        undeclared = await call_raw(client, "plain", {"key": "a"})
    assert listed == {
        "read": {"ttlMs": 5000, "cacheScope": "public"},
        "versioned": {"ttlMs": 1000, "cacheScope": "private"},
        "plain": None,
    }
    assert tools["read"].meta is not None
    assert tools["read"].meta["example.com/own"] == 1  # the tool's other meta is listed as it was
    assert block_of(first) is not None
    assert block_of(first).cache_scope == "public"  # type: ignore[union-attr]
    assert not_modified
    assert skipped
    assert versions["runs"] == 1  # the validator matched: the body ran for the full call only
    assert block_of(undeclared) is None
    assert middleware.stats.body_skipped == 1


async def test_a_name_declared_by_policy_wins_over_the_tools_meta() -> None:
    mcp = FastMCP("both")

    @mcp.tool(meta=cache_meta(ttl_ms=1000))
    def read(key: str) -> dict[str, Any]:
        return {"key": key}

    install(mcp, {"read": CachePolicy(ttl_ms=7, scope="public")})
    async with connect(mcp) as client:
        listed = await listed_blocks(client)
        answer = await call_raw(client, "read", {"key": "a"})
    assert listed["read"] == {"ttlMs": 7, "cacheScope": "public"}
    assert block_of(answer) is not None
    assert block_of(answer).ttl_ms == 7  # type: ignore[union-attr]


async def test_a_declaration_in_meta_under_a_configured_key() -> None:
    key = "io.example/cache"
    mcp = FastMCP("key")

    @mcp.tool(meta=cache_meta(ttl_ms=3, meta_key=key))
    def read(key: str) -> dict[str, Any]:
        return {"key": key}

    install(mcp, meta_key=key)
    async with connect(mcp) as client:
        listed = await listed_blocks(client, key)
        answer = await call_raw(client, "read", {"key": "a"})
    assert listed == {"read": {"ttlMs": 3, "cacheScope": "private"}}
    assert (answer.meta or {})[key]["ttlMs"] == 3
    assert META_KEY not in (answer.meta or {})


async def test_an_unreadable_meta_declaration_warns_and_leaves_the_tool_alone(caplog: pytest.LogCaptureFixture) -> None:
    mcp = FastMCP("typo")

    @mcp.tool(meta={META_KEY: {"ttl": 5000}})  # written by hand, with a typo
    def read(key: str) -> dict[str, Any]:
        return {"key": key}

    install(mcp)
    with caplog.at_level(logging.WARNING, logger=SERVER_LOGGER):
        async with connect(mcp) as client:
            await client.list_tools()
            answer = await call_raw(client, "read", {"key": "a"})
            await call_raw(client, "read", {"key": "b"})
    assert (answer.meta or {}).get(META_KEY) is None
    warned = [m for m in warnings_of(caplog) if "'read'" in m]
    assert len(warned) == 1  # once, not per call
    assert "unknown field(s) ttl" in warned[0]


# --- names that change ------------------------------------------------------------------------------


async def test_a_renamed_tool_keeps_its_cacheable_declaration(caplog: pytest.LogCaptureFixture) -> None:
    """`@mcp.tool(name="read")` above `@policies.cacheable(...)`: the function declared as `read_file`
    is the tool called `read`."""
    policies = ToolPolicies()
    mcp = FastMCP("renamed")

    @mcp.tool(name="read")
    @policies.cacheable(ttl_ms=5000)
    def read_file(key: str) -> dict[str, Any]:
        return {"key": key}

    install(mcp, policies)
    with caplog.at_level(logging.WARNING, logger=SERVER_LOGGER):
        async with connect(mcp) as client:
            first = await call_raw(client, "read", {"key": "a"})  # called before any listing
            listed = await listed_blocks(client)
            _, not_modified = await revalidates(client, "read", {"key": "a"})
    assert block_of(first) is not None
    assert listed == {"read": {"ttlMs": 5000, "cacheScope": "private"}}
    assert not_modified
    assert warnings_of(caplog) == []


async def test_a_renamed_tool_stays_declared_behind_fastmcps_response_memo() -> None:
    """The memo lists plain `Tool` copies, which no longer carry the function; the match made from the
    tool itself holds."""
    from fastmcp.server.middleware.caching import ResponseCachingMiddleware

    policies = ToolPolicies()
    mcp = FastMCP("memo")

    @mcp.tool(name="read")
    @policies.cacheable(ttl_ms=5000)
    def read_file(key: str) -> dict[str, Any]:
        return {"key": key}

    mcp.add_middleware(ResponseCachingMiddleware())
    install(mcp, policies)
    async with connect(mcp) as client:
        first = await call_raw(client, "read", {"key": "a"})
        listed = [await listed_blocks(client) for _ in range(2)]  # the second listing is the memo's
        again = await call_raw(client, "read", {"key": "b"})
    assert block_of(first) is not None
    assert listed == [{"read": {"ttlMs": 5000, "cacheScope": "private"}}] * 2
    assert block_of(again) is not None


async def test_a_tool_renamed_by_a_transform_keeps_its_cacheable_declaration() -> None:
    """A `ToolTransform` rename makes a new tool whose `parent_tool` is the declared function's."""
    from fastmcp.server.transforms.tool_transform import ToolTransform
    from fastmcp.tools.tool_transform import ToolTransformConfig

    policies = ToolPolicies()
    mcp = FastMCP("transformed")

    @mcp.tool
    @policies.cacheable(ttl_ms=5000)
    def read_file(key: str) -> dict[str, Any]:
        return {"key": key}

    mcp.add_transform(ToolTransform({"read_file": ToolTransformConfig(name="read")}))
    install(mcp, policies)
    async with connect(mcp) as client:
        listed = await listed_blocks(client)
        _, not_modified = await revalidates(client, "read", {"key": "a"})
    assert listed == {"read": {"ttlMs": 5000, "cacheScope": "private"}}
    assert not_modified


async def test_declarations_that_match_no_tool_warn_at_the_first_listing(caplog: pytest.LogCaptureFixture) -> None:
    mcp = FastMCP("typos")

    @mcp.tool
    def read_notebook(path: str) -> dict[str, Any]:
        return {"path": path}

    install(
        mcp,
        {"read_noteboook": CachePolicy(ttl_ms=5000)},
        validators={"write_notebook": lambda args: 1, "read_notebook": lambda args: 1},
    )
    with caplog.at_level(logging.WARNING, logger=SERVER_LOGGER):
        async with connect(mcp) as client:
            await client.list_tools()
            await client.list_tools()
    warned = warnings_of(caplog)
    assert len(warned) == 3, warned  # each once, however often the server is listed
    typo = next(m for m in warned if "'read_noteboook'" in m)
    assert "cache declaration" in typo
    assert "matches no tool of server 'typos'" in typo
    assert "did you mean 'read_notebook'?" in typo
    assert any("validator 'write_notebook' matches no tool" in m for m in warned)
    # A validator for a tool that exists but is not declared cacheable is not silently ignored either.
    assert any("'read_notebook' has a validator but no cache declaration" in m for m in warned)


# --- mounted servers --------------------------------------------------------------------------------


def kid_server(runs: dict[str, int], *, meta: Mapping[str, Any] | None = None) -> FastMCP:
    kid = FastMCP("kid")

    @kid.tool(meta=dict(meta) if meta is not None else None)
    def leaf(key: str) -> dict[str, Any]:
        runs[key] = runs.get(key, 0) + 1
        return {"kind": "leaf", "key": key}

    return kid


async def test_a_mounted_tool_declared_in_its_meta_is_stamped_by_the_parent() -> None:
    runs: dict[str, int] = {}
    parent = FastMCP("parent")
    parent.mount(kid_server(runs, meta=cache_meta(ttl_ms=2000)), namespace="kid")
    middleware = install(parent)
    async with connect(parent) as client:
        listed = await listed_blocks(client)
        _, not_modified = await revalidates(client, "kid_leaf", {"key": "a"})
    assert listed == {"kid_leaf": {"ttlMs": 2000, "cacheScope": "private"}}
    assert not_modified
    assert middleware.stats.stamped == 1
    assert middleware.stats.not_modified == 1


async def test_a_mounted_tool_declared_on_the_parent_under_its_mounted_name() -> None:
    runs: dict[str, int] = {}
    parent = FastMCP("parent")
    parent.mount(kid_server(runs), namespace="kid")
    install(parent, {"kid_leaf": CachePolicy(ttl_ms=2000)})
    async with connect(parent) as client:
        listed = await listed_blocks(client)
        _, not_modified = await revalidates(client, "kid_leaf", {"key": "a"})
    assert listed == {"kid_leaf": {"ttlMs": 2000, "cacheScope": "private"}}
    assert not_modified


async def test_a_parent_declaring_the_childs_own_name_is_told_the_mounted_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    parent = FastMCP("parent")
    parent.mount(kid_server({}), namespace="kid")
    install(parent, {"leaf": CachePolicy(ttl_ms=2000)})
    with caplog.at_level(logging.WARNING, logger=SERVER_LOGGER):
        async with connect(parent) as client:
            await client.list_tools()
    (warned,) = warnings_of(caplog)
    assert "'leaf' matches no tool of server 'parent'" in warned
    assert "did you mean 'kid_leaf'?" in warned


async def test_with_mcpcache_on_both_servers_the_one_nearest_the_tool_stamps() -> None:
    """The child declares `leaf` with a validator on its own middleware; its listing carries the block to
    the parent, which has a middleware too. The child answers (its validator skips the body) and the
    parent sends the child's answers as they are, never re-stamping a not-modified reply as an answer."""
    runs: dict[str, int] = {}
    kid = kid_server(runs)
    kid_middleware = install(kid, {"leaf": CachePolicy(ttl_ms=2000, validator=lambda args: "v1")})
    parent = FastMCP("parent")
    parent.mount(kid, namespace="kid")
    parent_middleware = install(parent)
    async with connect(parent) as client:
        listed = await listed_blocks(client)
        first, not_modified = await revalidates(client, "kid_leaf", {"key": "a"})
        again = await call_conditional(client, "kid_leaf", {"key": "a"}, block_of(first).etag)  # type: ignore[union-attr]
    assert listed == {"kid_leaf": {"ttlMs": 2000, "cacheScope": "private"}}
    assert not_modified
    assert block_of(again).not_modified  # type: ignore[union-attr]
    assert again.content == []
    assert runs == {"a": 1}  # the child's validator skipped the body twice
    assert kid_middleware.stats.stamped == 1
    assert kid_middleware.stats.body_skipped == 2
    assert parent_middleware.stats.stamped == 0
    assert parent_middleware.stats.passed_through == 3


async def test_a_middleware_added_by_hand_reads_meta_declarations_too() -> None:
    """`mcp.add_middleware(RevalidationMiddleware())` (without `install`) still reads the tools' meta;
    it sits where it was added and advertises nothing, which is why `install` is the documented way."""
    mcp = FastMCP("by-hand")

    @mcp.tool(meta=cache_meta(ttl_ms=10))
    def read(key: str) -> dict[str, Any]:
        return {"key": key}

    mcp.add_middleware(RevalidationMiddleware())
    async with connect(mcp) as client:
        _, not_modified = await revalidates(client, "read", {"key": "a"})
    assert not_modified
