"""The proxy in front of HTTP upstreams, with the bytes between proxy and upstream counted on the wire.

An upstream that speaks mcpcache's protocol (the demo server over HTTP, bytes counted by a relay on the
TCP connection): a stale read of the unchanged notebook is a conditional request and a not-modified
reply, a few hundred bytes however large the notebook; an edit through the proxy ends freshness and the
next read shows it. An upstream that never heard of mcpcache (the demo server with `--no-revalidation`,
over stdio, its pipes copied to files): its answers carry no cache block, so the proxy keeps none of them
and every read goes upstream whole, unchanged.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Any

import anyio
import mcp_types as mt
import pytest
from support.transports import LEGACY, ServerTarget, stock_client

from mcpcache.bench.relay import counting_relay
from mcpcache.demo.server import build_demo_server
from mcpcache.protocol import META_KEY

from .conftest import NOTEBOOK, Upstreams
from .hosts import DEMO, fastmcp_host, mcp_host, proxy_args

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REVALIDATION_BOUND = 800
"""The most a stale read of an unchanged answer may move between proxy and upstream (message bytes)."""


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def _answer(result: mt.CallToolResult) -> dict[str, Any]:
    """What a host reads, without the server identity a 2026-07-28 connection stamps on every result."""
    dumped = result.model_dump(by_alias=True, exclude_none=True)
    meta = {k: v for k, v in (dumped.pop("_meta", None) or {}).items() if k != mt.SERVER_INFO_META_KEY}
    return {**dumped, "_meta": meta or None}


async def test_a_stale_read_of_an_unchanged_notebook_is_a_few_hundred_bytes_upstream(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    read = {"path": NOTEBOOK}
    async with counting_relay(_port(upstreams.demo)) as (port, traffic):
        args = proxy_args("--store", str(tmp_path / "proxy.db"), "--url", f"http://127.0.0.1:{port}/mcp")
        async with (
            fastmcp_host(args, mode="legacy") as host,
            stock_client("mcp", ServerTarget.http("fastmcp", upstreams.demo), LEGACY) as direct,
        ):
            expected = await direct.call_tool("read_notebook", read)

            before = traffic.snapshot()
            first = await host.call_tool_mcp("read_notebook", read)
            full = traffic.since(before)

            before = traffic.snapshot()
            again = await host.call_tool_mcp("read_notebook", read)
            stale = traffic.since(before)

            # The host gets exactly what the upstream sends a direct client, both times.
            assert _answer(first) == _answer(expected)
            assert _answer(again) == _answer(expected)
            assert (first.meta or {})[META_KEY]["etag"] == (expected.meta or {})[META_KEY]["etag"]
            notebook_bytes = (upstreams.folder / NOTEBOOK).stat().st_size
            assert full.received_messages > notebook_bytes  # the whole answer came over
            assert 0 < stale.messages() <= REVALIDATION_BOUND, stale
            assert stale.total() < 4 * REVALIDATION_BOUND, stale  # HTTP headers included, on one connection

            # A call to a tool that writes ends freshness; the next read shows the edit.
            edit = {"path": NOTEBOOK, "index": 0, "source": "# edited through the proxy"}
            edited = await host.call_tool_mcp("edit_cell", edit)
            assert not edited.is_error
            after = await host.call_tool_mcp("read_notebook", read)
            assert after.structured_content is not None
            assert after.structured_content["cells"][0]["source"] == "# edited through the proxy"
            assert _answer(after) == _answer(await direct.call_tool("read_notebook", read))


async def _size_at_least(path: Path, size: int) -> int:
    """The file's size once it holds `size` bytes: the tee writing it may still be flushing (generous bound)."""
    file = anyio.Path(path)
    for _ in range(200):
        if (await file.stat()).st_size >= size:
            break
        await anyio.sleep(0.05)
    return (await file.stat()).st_size


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tee") is None, reason="needs bash and tee")
async def test_an_upstream_without_mcpcache_is_passed_through_and_nothing_is_kept(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    # Over stdio, with the upstream's pipes copied to files by tee: the bytes of record.
    to_server, from_server = tmp_path / "to-server.bytes", tmp_path / "from-server.bytes"
    server = shlex.join([*DEMO, "--dir", str(upstreams.folder), "--no-revalidation"])
    pipeline = f"tee {shlex.quote(str(to_server))} | {server} | tee {shlex.quote(str(from_server))}"
    args = proxy_args("--store", str(tmp_path / "proxy.db"), upstream=["bash", "-c", pipeline])
    direct_server = build_demo_server(upstreams.folder, revalidation=False)
    read = {"path": NOTEBOOK}
    async with mcp_host(args) as host, stock_client("mcp", ServerTarget.memory(direct_server), LEGACY) as direct:
        expected = await direct.call_tool("read_notebook", read)
        assert expected.meta is None  # no cache block: nothing a client may store
        assert isinstance(expected.content[0], mt.TextContent)
        answer_bytes = 2 * len(expected.content[0].text)  # the notebook twice: as text and as structured content
        received = await _size_at_least(from_server, 0)
        for _ in range(2):
            result = await host.call_tool("read_notebook", read)
            assert _answer(result) == _answer(expected)
            # Every read came over the upstream's stdout whole: the proxy kept nothing to serve it from.
            now = await _size_at_least(from_server, received + answer_bytes)
            assert now - received > answer_bytes
            received = now
