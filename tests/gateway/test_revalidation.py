"""A gateway with a store in front of an upstream that stamps its own tags: what crosses the upstream link.

Two promises, on every store (memory, a SQLite file, a real redis-server), over real HTTP on both sides:
- the tag goes upstream whenever the upstream stamps: a revalidation of an unchanged notebook, whether the
  caller holds the tag or only the gateway's store does, is a conditional call answered not-modified by the
  upstream itself, so the upstream link carries a few hundred bytes, not the notebook;
- a full answer received is what is served and stored (RFC 9111 4.3.3): an upstream that stamps one
  constant tag on a body that changes every time gets its newest body to the caller, never the stored one.

The bytes are counted on the TCP connection between gateway and upstream (mcpcache.bench.relay).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import fastmcp
import pytest
import uvicorn
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.tools.base import ToolResult

from mcpcache.bench.relay import counting_relay
from mcpcache.client import ToolCache
from mcpcache.client.entries import TOOLS_GROUP
from mcpcache.demo.server import build_demo_server
from mcpcache.gateway.app import KEEP_ALIVE_S, build_gateway
from mcpcache.gateway.config import parse_config
from mcpcache.processes import free_port
from mcpcache.protocol import META_KEY
from mcpcache.stores import MemoryStore, RedisStore, SQLiteStore
from mcpcache.stores.base import Store
from mcpcache.stores.items import Match

from .conftest import NOTEBOOK, served_in_thread

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

UPSTREAM_BOUND = 1024
"""The most a revalidation of an unchanged answer may move between gateway and upstream (message bytes)."""

CALLER = "caller-" + "k" * 24


STORE_KINDS = ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)]


@contextlib.asynccontextmanager
async def open_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A real store of `kind`: in memory, a SQLite file of the test's own, or a namespace of the test's own
    on the session's redis-server."""
    store: Store
    if kind == "memory":
        store = MemoryStore()
    elif kind == "sqlite":
        store = SQLiteStore(tmp_path / "gateway.db")
    else:
        store = RedisStore(request.getfixturevalue("redis_url"), namespace="gw-" + secrets.token_hex(4))
    try:
        yield store
    finally:
        await store.close()


def config_text(upstream: str, tools: str, *, auth: bool = True) -> str:
    callers = f"""
[auth]
kind = "static"

[[auth.tokens]]
token = "{CALLER}"
client_id = "caller"
"""
    return f"""
{callers if auth else ""}
[upstreams.up]
url = "{upstream}"

{tools}
"""


@contextlib.contextmanager
def port_of(url: str) -> Iterator[int]:
    yield int(url.rsplit(":", 1)[1].split("/", 1)[0])


@contextlib.asynccontextmanager
async def served_here(server: fastmcp.FastMCP[Any]) -> AsyncIterator[str]:
    """`server` over streamable HTTP on a free loopback port, run by uvicorn on this test's own event loop
    (a store's connections belong to the loop that made them: a Redis client must not cross loops). Idle
    connections are kept as `mcpcache gateway` keeps them (see `served_in_thread`)."""
    port = free_port()
    config = uvicorn.Config(
        server.http_app(path="/mcp"), host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=KEEP_ALIVE_S
    )
    runner = uvicorn.Server(config)
    async with anyio.create_task_group() as group:
        group.start_soon(runner.serve)
        for _ in range(3000):  # a readiness check (60 s at most), not a timing assertion
            if runner.started:
                break
            await anyio.sleep(0.02)
        assert runner.started, "the server did not start"
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            runner.should_exit = True


@contextlib.asynccontextmanager
async def gateway_with(store: Store, upstream: str, tools: str, *, auth: bool = True) -> AsyncIterator[tuple[str, Any]]:
    """The gateway over HTTP, in front of `upstream` through a counting relay; yields its URL and traffic."""
    with port_of(upstream) as port:
        async with counting_relay(port) as (relay_port, traffic):
            relayed = upstream.replace(f":{port}/", f":{relay_port}/")
            gateway = build_gateway(parse_config(config_text(relayed, tools, auth=auth)), store=store)
            try:
                async with served_here(gateway.server) as url:
                    yield url, traffic
            finally:
                await gateway.aclose()


def caller(url: str, *, auth: bool = True) -> fastmcp.Client[Any]:
    return fastmcp.Client(StreamableHttpTransport(url, auth=CALLER if auth else None, max_sse_event_size=None))


SCENARIOS = {
    "caller holds the tag": ("auth", "caller"),
    "only the store holds the tag": ("auth", "store"),
    "caller holds a tag the store lost": ("auth", "lost"),
    "anonymous caller, public tool the upstream narrows to private": ("anonymous", "caller"),
}


@pytest.mark.parametrize("store_kind", STORE_KINDS)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_a_revalidation_through_a_gateway_with_a_store_sends_the_tag_upstream(
    scenario: str, store_kind: str, notebook_dir: Path, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # The demo server with mcpcache: its own tags, ttl 0 (every reuse revalidates), private.
    who, holder = SCENARIOS[scenario]
    scope = 'scope = "public"\n' if who == "anonymous" else ""
    tools = f'[upstreams.up.tools.read_notebook]\nkind = "notebook.read"\n{scope}'
    read = {"path": NOTEBOOK}
    with served_in_thread(build_demo_server(notebook_dir, ttl_ms=0)) as upstream:
        async with (
            open_store(store_kind, request, tmp_path) as store,
            gateway_with(store, upstream, tools, auth=who == "auth") as (url, traffic),
            caller(url, auth=who == "auth") as client,
        ):
            first = await client.call_tool_mcp("read_notebook", read)
            tag = (first.meta or {})[META_KEY]["etag"]
            assert traffic.received_messages > (notebook_dir / NOTEBOOK).stat().st_size // 2

            if holder == "lost":
                # Evicted, expired or never kept (another replica's store): the caller still holds the tag.
                assert await store.remove_matching(Match(TOOLS_GROUP)) == 1
            for _ in range(3):
                before = traffic.snapshot()
                if holder == "store":
                    # A stock caller: the gateway's store holds the tag, the upstream confirms it, and the caller
                    # gets the stored answer whole.
                    again = await client.call_tool_mcp("read_notebook", read)
                    assert again.structured_content == first.structured_content
                else:
                    # A caller holding the tag: the upstream confirms it, the caller gets a not-modified reply.
                    again = await client.call_tool_mcp("read_notebook", read, meta={META_KEY: {"etag": tag}})
                    assert (again.meta or {})[META_KEY].get("notModified") is True
                moved = traffic.since(before)
                assert 0 < moved.messages() <= UPSTREAM_BOUND, moved


CONSTANT_TAG = 'W/"0123456789abcdef0123456789abcdef"'


def changing_upstream(bodies: list[int]) -> fastmcp.FastMCP[Any]:
    """A broken upstream: it stamps one constant tag (ttl 0) on a body that changes on every call, and never
    answers not-modified. Its every full answer must still reach the caller."""
    server: fastmcp.FastMCP[Any] = fastmcp.FastMCP("changing")

    @server.tool
    def counter() -> ToolResult:
        bodies.append(len(bodies) + 1)
        block = {"ttlMs": 0, "cacheScope": "private", "etag": CONSTANT_TAG}
        return ToolResult(structured_content={"kind": "counter", "body": bodies[-1]}, meta={META_KEY: block})

    return server


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_full_answer_from_upstream_is_served_and_stored_whatever_its_tag(
    store_kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    bodies: list[int] = []
    tools = "[upstreams.up.tools.counter]\n"
    with served_in_thread(changing_upstream(bodies)) as upstream:
        async with (
            open_store(store_kind, request, tmp_path) as store,
            gateway_with(store, upstream, tools) as (url, _),
            caller(url) as client,
        ):
            seen = []
            for _ in range(3):
                # A stock caller: no tag, so the upstream answers in full each time (the gateway's store
                # sends its tag, and this upstream's body runs however the tag compares).
                result = await client.call_tool_mcp("counter", {})
                seen.append(result.structured_content["body"])  # type: ignore[index]
            # A caller of mcpcache's own: its cache holds the tag and revalidates through the gateway.
            async with ToolCache(MemoryStore()) as cache:
                view = cache.wrap(client, server_id="gateway-" + secrets.token_hex(4))
                first = await view.call_mcp("counter", {})
                second = await view.call_mcp("counter", {})
    assert seen == [1, 2, 3], "the gateway served a stored body over the upstream's newer full answer"
    assert first.result.structured_content["body"] == 4  # type: ignore[index]
    # The caller sent the tag the upstream stamps on every answer: by the upstream's word its copy is current
    # (RFC 9111 4.3.2), so it is told not-modified and served from its own cache.
    assert second.outcome.status == "revalidated"
    assert second.result.structured_content["body"] == 4  # type: ignore[index]
