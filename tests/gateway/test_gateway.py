"""The gateway in this process, in front of real FastMCP upstreams, seen by stock clients and by mcpcache's.

The upstream is the demo server without mcpcache (it never heard of the protocol), the demo server with
mcpcache (it stamps its own tags), or the counting server; the callers are the stock `mcp.Client` and
`fastmcp.Client` over in-memory transports, in both protocol eras.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fastmcp
import mcp_types as mt
import pytest
from fastmcp.server.dependencies import fastmcp_request_ctx
from fastmcp.server.middleware import Middleware
from fastmcp.server.providers.proxy import ProxyClient
from support.tags import answered_meta, tag_of
from support.transports import CLIENT_KINDS, ERAS, ClientKind, Era, ServerTarget, stock_client

from mcpcache.demo.server import build_demo_server
from mcpcache.gateway.app import Upstream, assemble_gateway
from mcpcache.gateway.config import GatewayConfig, StoreSettings, ToolSettings, UpstreamSettings
from mcpcache.protocol import META_KEY
from mcpcache.server import CachePolicy
from mcpcache.server.fastmcp import install
from mcpcache.stores import MemoryStore

from .conftest import NOTEBOOK, gateway_over
from .counting_server import build_counting_server

ARGS = {"path": NOTEBOOK}
READ = {"read_notebook": ToolSettings(ttl_ms=5000, kind="notebook.read")}


def block_of(result: mt.CallToolResult) -> dict[str, Any]:
    block = (result.meta or {}).get(META_KEY)
    assert isinstance(block, dict), f"no cache block in {result.meta}"
    return block


async def call(client: Any, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> Any:
    if isinstance(client, fastmcp.Client):
        return await client.call_tool_mcp(name, arguments, meta=meta)
    return await client.call_tool(name, arguments, meta=meta)


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("kind", CLIENT_KINDS)
async def test_a_stock_client_gets_the_upstream_answer_plus_the_block(
    notebook_dir: Path, kind: ClientKind, era: Era
) -> None:
    upstream = build_demo_server(notebook_dir, revalidation=False)
    async with stock_client(kind, ServerTarget.memory(upstream), era) as direct:
        plain = await call(direct, "read_notebook", ARGS)
    gateway = gateway_over(build_demo_server(notebook_dir, revalidation=False), READ)
    async with stock_client(kind, ServerTarget.memory(gateway), era) as client:
        got = await call(client, "read_notebook", ARGS)
        listed = await call(client, "list_notebooks", {})

    assert got.content == plain.content
    assert got.structured_content == plain.structured_content
    assert not got.is_error
    block = block_of(got)
    # The tag is the content tag of exactly what arrived: what a server using mcpcache would stamp.
    assert block == {"ttlMs": 5000, "cacheScope": "private", "etag": tag_of(got)}
    assert META_KEY not in (plain.meta or {}), "the upstream itself stamps nothing"
    # A tool the configuration does not name passes through untouched.
    assert META_KEY not in (listed.meta or {})
    assert listed.structured_content["kind"] == "notebook.list"


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_the_current_tag_gets_not_modified_and_an_old_one_the_answer(notebook_dir: Path, era: Era) -> None:
    gateway = gateway_over(build_demo_server(notebook_dir, revalidation=False), READ)
    async with stock_client("fastmcp", ServerTarget.memory(gateway), era) as client:
        full = await call(client, "read_notebook", ARGS)
        tag = block_of(full)["etag"]
        again = await call(client, "read_notebook", ARGS, {META_KEY: {"etag": tag}})
        old = await call(client, "read_notebook", ARGS, {META_KEY: {"etag": 'W/"' + "0" * 32 + '"'}})

    assert again.content == []
    assert again.structured_content == {"kind": "notebook.read"}
    assert answered_meta(again) == {
        META_KEY: {"ttlMs": 5000, "cacheScope": "private", "etag": tag, "notModified": True}
    }
    assert old.content == full.content
    assert block_of(old)["etag"] == tag


class RequestMetaSpy(Middleware):
    """Records the `_meta` each tools/call reached the upstream with."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any] | None] = []

    async def on_call_tool(self, context: Any, call_next: Any) -> Any:
        request = fastmcp_request_ctx.get()
        self.seen.append(dict(request.meta) if request is not None and request.meta else None)
        return await call_next(context)


@pytest.mark.anyio
async def test_an_upstream_that_stamps_keeps_its_tag_and_confirms_it_itself(notebook_dir: Path) -> None:
    # The demo server with mcpcache and a validator: its tags are not content tags, so a gateway that
    # hashed the answer again would stamp another one.
    upstream = build_demo_server(notebook_dir, validator=True)
    spy = RequestMetaSpy()
    upstream.middleware.insert(0, spy)
    async with fastmcp.Client(build_demo_server(notebook_dir, validator=True)) as direct:
        own = block_of(await direct.call_tool_mcp("read_notebook", ARGS))
    # ttl from the upstream (none configured); the configuration says public, the upstream private: private.
    gateway = gateway_over(upstream, {"read_notebook": ToolSettings(scope="public")})
    async with fastmcp.Client(gateway) as client:
        full = await client.call_tool_mcp("read_notebook", ARGS)
        again = await client.call_tool_mcp("read_notebook", ARGS, meta={META_KEY: {"etag": own["etag"]}})

    assert block_of(full) == {"ttlMs": 5000, "cacheScope": "private", "etag": own["etag"]}
    assert block_of(again)["notModified"] is True
    # The tag went upstream with the call (FastMCP's proxy forwards the request context the gateway
    # binds), and the upstream answered not-modified itself: its reply is the one the caller got.
    assert META_KEY not in (spy.seen[0] or {})
    assert (spy.seen[1] or {})[META_KEY] == {"etag": own["etag"]}
    assert again.structured_content == {"kind": "notebook.read"}


@pytest.mark.anyio
async def test_an_anonymous_caller_shares_public_answers_only() -> None:
    tools = {
        "numbered_public": ToolSettings(ttl_ms=60_000, scope="public"),
        "numbered_private": ToolSettings(ttl_ms=60_000),
    }
    gateway = gateway_over(build_counting_server(), tools, store=MemoryStore())
    async with fastmcp.Client(gateway) as client:
        public = [(await client.call_tool_mcp("numbered_public", {"name": "a"})) for _ in range(3)]
        private = [(await client.call_tool_mcp("numbered_private", {"name": "a"})) for _ in range(2)]
        calls = await client.call_tool_mcp("calls", {})

    # Served from the store: one upstream call, every read the answer it fetched.
    assert [r.structured_content["fetch"] for r in public] == [1, 1, 1]
    first, *later = (block_of(r)["ttlMs"] for r in public)
    assert first == 60_000
    assert all(0 <= ttl <= 60_000 for ttl in later), "a stored answer hands on what is left of its freshness"
    # Private answers are never kept for a caller the gateway cannot identify.
    assert [r.structured_content["fetch"] for r in private] == [2, 3]
    assert calls.structured_content == {"calls": 3}


@pytest.mark.anyio
async def test_an_answer_above_the_stores_bound_is_passed_through_and_never_kept() -> None:
    store = MemoryStore()
    tools = {"numbered_public": ToolSettings(ttl_ms=60_000, scope="public")}
    settings = UpstreamSettings(url="http://upstream.invalid/mcp", tools=tools)
    # A bound below any answer: every read goes upstream, and the caller gets each answer whole and stamped.
    config = GatewayConfig(upstreams={"up": settings}, store=StoreSettings(memory=True, max_answer_bytes=10))
    base: ProxyClient[Any] = ProxyClient(build_counting_server())
    upstream = Upstream("up", settings, "test:upstream", base.new, None)
    gateway = assemble_gateway(config, [upstream], store=store, auth=None)
    async with fastmcp.Client(gateway) as client:
        reads = [await client.call_tool_mcp("numbered_public", {"name": "a"}) for _ in range(2)]
    assert [r.structured_content["fetch"] for r in reads] == [1, 2]
    assert all(block_of(r)["ttlMs"] == 60_000 and block_of(r)["etag"] for r in reads)
    assert (await store.usage()).items == 0


@pytest.mark.anyio
async def test_an_error_is_never_stamped(notebook_dir: Path) -> None:
    gateway = gateway_over(build_demo_server(notebook_dir, revalidation=False), READ, store=MemoryStore())
    async with fastmcp.Client(gateway) as client:
        missing = await client.call_tool_mcp("read_notebook", {"path": "missing.ipynb"})
    assert missing.is_error
    assert META_KEY not in (missing.meta or {})


def stamping_upstream(ran: list[str]) -> fastmcp.FastMCP[Any]:
    """A server using mcpcache whose `catalog` is public, ttl 0, with a validator: a matching conditional
    call is answered not-modified without running the body."""
    server: fastmcp.FastMCP[Any] = fastmcp.FastMCP("stamping")

    @server.tool
    def catalog(section: str) -> dict[str, Any]:
        ran.append(section)
        return {"kind": "catalog", "section": section, "items": list(range(50))}

    install(server, {"catalog": CachePolicy(ttl_ms=0, scope="public", validator=lambda arguments: "v1")})
    return server


@pytest.mark.anyio
async def test_the_store_revalidates_with_an_upstream_that_stamps_without_running_it_again() -> None:
    ran: list[str] = []
    upstream = stamping_upstream(ran)
    spy = RequestMetaSpy()
    upstream.middleware.insert(0, spy)
    gateway = gateway_over(upstream, {"catalog": ToolSettings(scope="public")}, store=MemoryStore())
    async with fastmcp.Client(gateway) as client:
        first = await client.call_tool_mcp("catalog", {"section": "a"})
        second = await client.call_tool_mcp("catalog", {"section": "a"})

    # ttl 0 from the upstream: the second read revalidated the stored copy with the upstream's own tag,
    # which the upstream confirmed without running the tool; the caller got the whole stored answer.
    assert ran == ["a"]
    tag = block_of(first)["etag"]
    assert (spy.seen[1] or {})[META_KEY] == {"etag": tag}
    assert second.structured_content == first.structured_content
    assert block_of(second) == {"ttlMs": 0, "cacheScope": "public", "etag": tag}


@pytest.mark.anyio
async def test_an_answer_the_upstream_narrows_to_private_is_not_kept_for_anonymous_callers(
    notebook_dir: Path,
) -> None:
    # Declared public, but the upstream (the demo with mcpcache) says private: private wins, and an
    # anonymous caller's private answer is handed back without being kept.
    store = MemoryStore()
    upstream = build_demo_server(notebook_dir, validator=True)
    spy = RequestMetaSpy()
    upstream.middleware.insert(0, spy)
    gateway = gateway_over(upstream, {"read_notebook": ToolSettings(scope="public")}, store=store)
    async with fastmcp.Client(gateway) as client:
        answers = [await client.call_tool_mcp("read_notebook", ARGS) for _ in range(2)]

    assert len(spy.seen) == 2, "each read reached the upstream"
    assert all(block_of(a)["cacheScope"] == "private" for a in answers)
    assert answers[0].structured_content == answers[1].structured_content
    assert (await store.usage()).items == 0


@pytest.mark.anyio
async def test_an_answer_the_gateway_readdresses_is_sent_untagged() -> None:
    """The gateway's own FastMCP rewrites a Prefab payload's tool references after its middleware, by its
    current tool names: no tag made before that can name the answer."""
    upstream = fastmcp.FastMCP("prefab")

    @upstream.tool
    def ui(key: str) -> dict[str, Any]:
        return {"button": {"action": "toolCall", "tool": "save"}, "_meta": {"fastmcp": {"toolNames": {"save": "save"}}}}

    gateway = gateway_over(upstream, {"ui": ToolSettings(ttl_ms=5000)}, store=MemoryStore())
    async with stock_client("mcp", ServerTarget.memory(gateway), ERAS[-1]) as client:
        got = await call(client, "ui", {"key": "k"})
    assert not got.is_error
    assert META_KEY not in (got.meta or {})
