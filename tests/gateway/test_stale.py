"""The gateway hands stale windows on (docs/gateway.md, `stale_while_revalidate_ms`, `stale_if_error_ms`): the
configured ones, else the upstream's own, stamped on every answer it serves, directly or from its store, and
on its not-modified replies. It serves nothing stale itself (its callers' caches do, with those windows): an
answer it hands on is always the upstream's current one or a fresh stored one.

Real HTTP on both sides: an upstream in a thread of this process, the gateway on the test's loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import fastmcp
import pytest
from fastmcp.client.transports import StreamableHttpTransport

from mcpcache.client import ToolCache
from mcpcache.gateway.app import build_gateway
from mcpcache.gateway.config import ConfigError, ToolSettings, parse_config
from mcpcache.gateway.decisions import effective_policy
from mcpcache.protocol import META_KEY, CacheBlock
from mcpcache.server import cache_meta
from mcpcache.server.fastmcp import install
from mcpcache.stores import MemoryStore, Store

from .conftest import served_in_thread
from .test_revalidation import served_here

pytestmark = pytest.mark.anyio

UPSTREAM = '[upstreams.up]\nurl = "http://127.0.0.1:8000/mcp"\n'
WINDOWS = ("staleWhileRevalidateMs", "staleIfErrorMs")


def test_the_windows_are_tool_keys_in_milliseconds() -> None:
    text = UPSTREAM + "[upstreams.up.tools.read]\nstale_while_revalidate_ms = 30000\nstale_if_error_ms = 600000\n"
    settings = parse_config(text).upstreams["up"].tools["read"]
    assert (settings.stale_while_revalidate_ms, settings.stale_if_error_ms) == (30_000, 600_000)
    bad = UPSTREAM + '[upstreams.up.tools.read]\nstale_if_error_ms = "10m"\n'
    with pytest.raises(ConfigError) as raised:
        parse_config(bad, "g.toml")
    assert str(raised.value) == (
        "g.toml, line 4: upstreams.up.tools.read.stale_if_error_ms: must be an integer number of milliseconds "
        "between 0 and 86400000 (24 h) (got '10m')"
    )
    with pytest.raises(ConfigError, match="stale_while_revalidate_ms: must be an integer number of milliseconds"):
        parse_config(UPSTREAM + "[upstreams.up.tools.read]\nstale_while_revalidate_ms = -1\n")


def test_a_configured_window_wins_and_the_upstreams_is_handed_on_otherwise() -> None:
    upstream = CacheBlock.model_validate({"ttlMs": 5000, "staleWhileRevalidateMs": 7, "staleIfErrorMs": 9})
    mine = effective_policy(ToolSettings(stale_while_revalidate_ms=30_000), upstream)
    assert (mine.stale_while_revalidate_ms, mine.stale_if_error_ms) == (30_000, 9)
    off = effective_policy(ToolSettings(stale_while_revalidate_ms=0, stale_if_error_ms=0), upstream)
    assert (off.stale_while_revalidate_ms, off.stale_if_error_ms) == (0, 0)
    bare = effective_policy(ToolSettings(), None)
    assert (bare.stale_while_revalidate_ms, bare.stale_if_error_ms) == (0, 0)


def upstream_server(runs: list[str]) -> fastmcp.FastMCP[Any]:
    """`plain` stamps nothing (the gateway declares it, public, so that an anonymous caller's call goes through
    the store); `own` stamps its own windows with mcpcache."""
    server: fastmcp.FastMCP[Any] = fastmcp.FastMCP("up")
    state = {"text": "first"}

    @server.tool
    def plain(key: str) -> dict[str, Any]:
        runs.append("plain")
        return {"kind": "doc", "key": key, "text": state["text"]}

    @server.tool(meta=cache_meta(ttl_ms=0, stale_while_revalidate_ms=7_000, stale_if_error_ms=9_000))
    def own(key: str) -> dict[str, Any]:
        runs.append("own")
        return {"kind": "doc", "key": key, "text": state["text"]}

    @server.tool
    def change(text: str) -> str:
        state["text"] = text
        return "changed"

    install(server)
    return server


TOOLS = """
[upstreams.up.tools.plain]
ttl_ms = 0
scope = "public"
stale_while_revalidate_ms = 600000
stale_if_error_ms = 3600000

[upstreams.up.tools.own]
"""


@contextlib.asynccontextmanager
async def gateway(upstream: str, store: Store | None) -> AsyncIterator[str]:
    built = build_gateway(parse_config(f'[upstreams.up]\nurl = "{upstream}"\n{TOOLS}'), store=store)
    try:
        async with served_here(built.server) as url:
            yield url
    finally:
        await built.aclose()


def windows(result: Any) -> dict[str, Any]:
    block = (result.meta or {}).get(META_KEY) or {}
    return {name: block[name] for name in WINDOWS if name in block}


@pytest.mark.parametrize("with_store", [True, False], ids=["through its store", "direct"])
async def test_the_gateway_stamps_the_windows_and_serves_nothing_stale_itself(with_store: bool) -> None:
    runs: list[str] = []
    with served_in_thread(upstream_server(runs)) as upstream:
        async with (
            gateway(upstream, MemoryStore() if with_store else None) as url,
            fastmcp.Client(StreamableHttpTransport(url)) as client,
        ):
            first = await client.call_tool_mcp("plain", {"key": "k"})
            assert windows(first) == {"staleWhileRevalidateMs": 600_000, "staleIfErrorMs": 3_600_000}
            assert windows(await client.call_tool_mcp("own", {"key": "k"})) == {
                "staleWhileRevalidateMs": 7_000,
                "staleIfErrorMs": 9_000,
            }
            tag = first.meta[META_KEY]["etag"]  # type: ignore[index]
            confirmed = await client.call_tool_mcp("plain", {"key": "k"}, meta={META_KEY: {"etag": tag}})
            assert confirmed.meta[META_KEY]["notModified"] is True  # type: ignore[index]
            assert windows(confirmed) == windows(first)

            # ttl 0 and a long window: the gateway's store holds a stale answer it may not hand on as is.
            await client.call_tool_mcp("change", {"text": "second"})
            again = await client.call_tool_mcp("plain", {"key": "k"})
            assert again.structured_content["text"] == "second"  # type: ignore[index]
            assert runs.count("plain") == 3


async def test_a_callers_cache_serves_stale_with_the_windows_the_gateway_stamped() -> None:
    runs: list[str] = []
    with served_in_thread(upstream_server(runs)) as upstream:
        async with (
            gateway(upstream, MemoryStore()) as url,
            fastmcp.Client(StreamableHttpTransport(url)) as client,
        ):
            cache = ToolCache(MemoryStore())
            view = cache.wrap(client, server_id="gateway")
            assert (await view.call_mcp("plain", {"key": "k"})).outcome.status == "miss"
            stale = await view.call_mcp("plain", {"key": "k"})  # ttl 0: stale at once, within its window
            assert stale.outcome.status == "stale_while_revalidate"
            await cache.flush()
            assert cache.stats.background_revalidations == 1
            assert cache.stats.background_failures == 0
            await cache.close()
