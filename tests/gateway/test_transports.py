"""The gateway in front of the demo server without mcpcache, over a real stdio pipe and over streamable HTTP.

The demo server runs as `python -m mcpcache demo-server --no-revalidation` (a server that never heard of
mcpcache); the gateway runs in this process, built from the one-command configuration.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.tags import tag_of
from support.transports import ERAS, Era, ServerTarget, stock_client

from mcpcache.client import ToolCache
from mcpcache.gateway.app import Gateway, build_gateway
from mcpcache.gateway.config import quick_config
from mcpcache.protocol import META_KEY
from mcpcache.stores import MemoryStore
from mcpcache.wire_count import WireLog

from .conftest import BIG_NOTEBOOK, NOTEBOOK, Cluster, demo_command
from .test_gateway import block_of

ARGS = {"path": NOTEBOOK}


@pytest.fixture
async def stdio_gateway(notebook_dir: Path) -> AsyncIterator[Gateway]:
    config = quick_config(url=None, command=demo_command(notebook_dir), tools=["read_notebook=5000"])
    gateway = build_gateway(config)
    try:
        yield gateway
    finally:
        await gateway.aclose()  # ends the stdio upstream's process


@pytest.mark.anyio
async def test_a_stock_client_through_a_stdio_upstream(stdio_gateway: Gateway) -> None:
    async with stock_client("mcp", ServerTarget.memory(stdio_gateway.server), "2026-07-28") as client:
        full = await client.call_tool("read_notebook", ARGS)
        again = await client.call_tool("read_notebook", ARGS, meta={META_KEY: {"etag": block_of(full)["etag"]}})
    assert full.structured_content["kind"] == "notebook.read"
    assert full.structured_content["cell_count"] == 8
    assert block_of(full) == {"ttlMs": 5000, "cacheScope": "private", "etag": tag_of(full)}
    assert again.content == []
    assert block_of(again)["notModified"] is True


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
@pytest.mark.redis  # the cluster of HTTP servers includes the gateway replicas (test_replicas.py)
async def test_an_mcpcache_client_revalidates_through_the_gateway_in_a_few_hundred_bytes(
    cluster: Cluster, era: Era
) -> None:
    # ttl 0: every reuse is revalidated, so the second read is a conditional call through the gateway.
    # The answer is over 1 MiB: one server-sent event from the HTTP upstream, which the gateway must take.
    gateway = build_gateway(quick_config(url=cluster.demo, command=None, tools=["read_notebook=0"]))
    log = WireLog()
    cache = ToolCache(MemoryStore())
    big = {"path": BIG_NOTEBOOK}
    async with stock_client("mcp", ServerTarget.memory(gateway.server), era, log=log) as client:
        cached = cache.wrap(client, server_id="gateway")
        first = await cached.call("read_notebook", big)
        mark = log.mark()
        second = await cached.call("read_notebook", big)
    request, reply = log.exchange("tools/call", since=mark)
    _, full_reply = log.exchange("tools/call")

    assert (first.outcome.status, second.outcome.status) == ("miss", "revalidated")
    assert second.result.structured_content == first.result.structured_content
    assert full_reply.nbytes > 1024 * 1024
    # The request (the tag, and on 2026-07-28 the client's per-request metadata) and the reply, together.
    assert request.nbytes + reply.nbytes <= 800, (request.nbytes, reply.nbytes)
