"""What the gateway's delta tests share: a gateway in this process in front of the demo server without
mcpcache, a caller that asks for deltas as mcpcache's client will (the request `_meta` of
`conditional_request_meta(tag, accept_delta=[FORMAT])`, the ops applied to its own copy and the digest
checked), and the history's items as the store holds them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fastmcp
import mcp_types as mt
from fastmcp.server.providers.proxy import ProxyClient

from mcpcache.delta import FORMAT, apply, document_of, result_of
from mcpcache.demo.server import build_demo_server
from mcpcache.etag import answer_digest
from mcpcache.gateway.app import Upstream, assemble_gateway, build_auth
from mcpcache.gateway.config import AuthSettings, GatewayConfig, StoreSettings, ToolSettings, UpstreamSettings
from mcpcache.gateway.deltas import GatewayDeltas
from mcpcache.gateway.history import HISTORY_GROUP
from mcpcache.gateway.middleware import GatewayMiddleware
from mcpcache.protocol import META_KEY, DeltaBlock, MalformedDelta, Scope, conditional_request_meta, parse_cache_block
from mcpcache.stores.base import Store
from mcpcache.stores.items import Match

NOTEBOOK = "nb.ipynb"
ARGS = {"path": NOTEBOOK}
READ = "read_notebook"


def read_settings(*, scope: Scope = "public", deltas: bool = True) -> dict[str, ToolSettings]:
    return {READ: ToolSettings(ttl_ms=0, scope=scope, kind="notebook.read", deltas=deltas)}


def delta_gateway(
    folder: Path,
    store: Store | None,
    *,
    tools: Mapping[str, ToolSettings] | None = None,
    history_bytes: int | None = None,
    auth: AuthSettings | None = None,
) -> fastmcp.FastMCP[Any]:
    """The gateway (its real FastMCP proxy and middleware) over the demo server without mcpcache serving
    `folder`, with `store` as its shared store."""
    settings = UpstreamSettings(url="http://upstream.invalid/mcp", tools=dict(tools or read_settings()))
    store_settings = (
        StoreSettings(memory=True)
        if history_bytes is None
        else StoreSettings(memory=True, delta_history_bytes=history_bytes)
    )
    config = GatewayConfig(upstreams={"up": settings}, store=store_settings, auth=auth or AuthSettings())
    base: ProxyClient[Any] = ProxyClient(build_demo_server(folder, revalidation=False))
    upstream = Upstream("up", settings, "test:demo", base.new, None)
    return assemble_gateway(config, [upstream], store=store, auth=build_auth(config.auth, {}))


def deltas_of(gateway: fastmcp.FastMCP[Any]) -> GatewayDeltas:
    for middleware in gateway.middleware:
        if isinstance(middleware, GatewayMiddleware) and middleware.deltas is not None:
            return middleware.deltas
    raise AssertionError("the gateway sends no deltas")


def tag_of(result: mt.CallToolResult) -> str:
    block = parse_cache_block(result.meta)
    assert block is not None, result.meta
    assert block.etag is not None, result.meta
    return block.etag


def delta_of(result: mt.CallToolResult) -> DeltaBlock | None:
    block = parse_cache_block(result.meta)
    assert block is not None, result.meta
    assert not isinstance(block.delta, MalformedDelta), block.delta
    return block.delta


def asking(tag: str) -> dict[str, Any]:
    """The request `_meta` of a caller that holds the answer under `tag` and can apply deltas."""
    return conditional_request_meta(tag, accept_delta=[FORMAT])


def patched(held: mt.CallToolResult, reply: mt.CallToolResult) -> mt.CallToolResult:
    """What a client builds from the answer it holds and a delta reply: the ops applied to a copy of its
    document, checked against the reply's digest (as mcpcache's client will)."""
    found = delta_of(reply)
    assert found is not None, f"not a delta reply: {reply.meta}"
    assert reply.content == []
    assert found.base == tag_of(held)
    assert found.format == FORMAT
    rebuilt = result_of(apply(document_of(held), found.ops))
    assert answer_digest(rebuilt.content, rebuilt.structured_content, rebuilt.meta) == found.digest
    # Held from now on under the reply's tag, as a client keeps it.
    block = {key: value for key, value in (reply.meta or {})[META_KEY].items() if key != "delta"}
    return rebuilt.model_copy(update={"meta": {**(rebuilt.meta or {}), META_KEY: block}})


def same_answer(a: mt.CallToolResult, b: mt.CallToolResult) -> bool:
    return a.content == b.content and a.structured_content == b.structured_content


async def edit(client: fastmcp.Client[Any], index: int, source: str) -> None:
    edited = await client.call_tool_mcp("edit_cell", {"path": NOTEBOOK, "index": index, "source": source})
    assert not edited.is_error, edited


async def history_items(store: Store) -> list[tuple[str, int]]:
    """(key, size) of every item of the history's group."""
    return [(listed.key, listed.size) async for listed in store.entries(Match(HISTORY_GROUP))]
