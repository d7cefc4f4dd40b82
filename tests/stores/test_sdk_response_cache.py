"""Our stores as the MCP SDK's own response cache: a real `mcp.Client` against a real `MCPServer`.

The server marks `tools/list` cacheable for a minute. The number of `tools/list` requests the server
actually handles shows what the client served from our store, including from a new client (and a new
store object) on the same SQLite file or Redis namespace, which is what persistence buys.
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.client import CacheConfig
from mcp.server.caching import CacheHint
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer

from mcpcache.stores import Store
from mcpcache.stores.sdk import SDK_GROUP

from .backends import Backend

pytestmark = pytest.mark.anyio


class MethodCounter:
    """Server middleware that counts the requests reaching the server, by method."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        self.calls[ctx.method] = self.calls.get(ctx.method, 0) + 1
        return await call_next(ctx)


def make_server(counter: MethodCounter) -> MCPServer:
    server = MCPServer("catalog", cache_hints={"tools/list": CacheHint(ttl_ms=60_000, scope="private")})

    @server.tool()
    def echo(text: str) -> str:
        """Say it back."""
        return text

    server.middleware.append(counter)
    return server


def client(server: MCPServer, store: Store, partition: str = "p") -> Client:
    return Client(server, cache=CacheConfig(store=store, partition=partition, target_id="t"))


async def test_the_second_listing_is_served_from_our_store(persistent_backend: Backend) -> None:
    counter = MethodCounter()
    server = make_server(counter)
    async with persistent_backend.open() as store, client(server, store) as first:
        listed = await first.list_tools()
        again = await first.list_tools()
        assert counter.calls.get("tools/list") == 1
        assert [tool.name for tool in again.tools] == [tool.name for tool in listed.tools] == ["echo"]
        assert (await store.usage(SDK_GROUP)).items == 1

    # A new client and a new store object on the same file or namespace: still no second request.
    async with persistent_backend.open() as reopened, client(server, reopened) as second:
        assert [tool.name for tool in (await second.list_tools()).tools] == ["echo"]
        assert counter.calls.get("tools/list") == 1

        await second.list_tools(cache_mode="refresh")  # the SDK's own verbs still reach the server
        assert counter.calls.get("tools/list") == 2


async def test_private_entries_stay_in_their_partition(persistent_backend: Backend) -> None:
    counter = MethodCounter()
    server = make_server(counter)
    async with persistent_backend.open() as store:
        async with client(server, store, partition="alice") as alice:
            await alice.list_tools()
        async with client(server, store, partition="bob") as bob:
            await bob.list_tools()
        assert counter.calls.get("tools/list") == 2
        assert (await store.usage(SDK_GROUP)).items == 2


async def test_clearing_the_sdk_entries_sends_the_next_listing_to_the_server(backend: Backend) -> None:
    counter = MethodCounter()
    server = make_server(counter)
    async with backend.open() as store, client(server, store) as sdk_client:
        await sdk_client.list_tools()
        await store.clear()
        await sdk_client.list_tools()
        assert counter.calls.get("tools/list") == 2
