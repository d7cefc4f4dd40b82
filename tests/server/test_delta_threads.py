"""A large answer's delta work (the diff and the digest: tens of milliseconds at a few megabytes) runs in a
worker thread, so the server's event loop goes on serving other callers meanwhile; a small one's stays on the
loop, where a thread hop would cost more than the work. Real FastMCP server, stock client, memory streams."""

from __future__ import annotations

import threading
from typing import Any

import fastmcp
import pytest

import mcpcache.server.revalidator as revalidator
from mcpcache.delta import FORMAT
from mcpcache.protocol import conditional_request_meta, parse_cache_block
from mcpcache.server import CachePolicy
from mcpcache.server.deltas import THREAD_FROM_BYTES
from mcpcache.server.fastmcp import install

pytestmark = pytest.mark.anyio


def _server(size: int) -> fastmcp.FastMCP:
    server = fastmcp.FastMCP("threads")
    text = {"body": "".join(f"line {n:07d} of the document\n" for n in range(size // 30))}

    @server.tool()
    def read() -> dict[str, Any]:
        return {"kind": "doc", "body": text["body"]}

    @server.tool()
    def edit() -> str:
        text["body"] = "an edited first line\n" + text["body"].split("\n", 1)[1]
        return "ok"

    install(server, {"read": CachePolicy(ttl_ms=0)})
    return server


@pytest.mark.parametrize(("size", "off_the_loop"), [(4 * THREAD_FROM_BYTES, True), (THREAD_FROM_BYTES // 8, False)])
async def test_the_delta_work_of_a_large_answer_runs_beside_the_loop(
    size: int, off_the_loop: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[threading.Thread] = []
    original = revalidator.delta_choice

    def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread())
        return original(*args, **kwargs)

    original_raw = revalidator.raw_delta

    def watched_raw(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread())
        return original_raw(*args, **kwargs)

    monkeypatch.setattr(revalidator, "delta_choice", watched)
    # FastMCP: the delta is computed from the return value's change (`mcpcache.server.raw_deltas`).
    monkeypatch.setattr(revalidator, "raw_delta", watched_raw)
    async with fastmcp.Client(_server(size)) as client:
        held = await client.call_tool_mcp("read", {})
        block = parse_cache_block(held.meta)
        assert block is not None
        assert block.etag is not None
        await client.call_tool_mcp("edit", {})
        loop_thread = threading.current_thread()  # memory streams: the server runs on this loop
        reply = await client.call_tool_mcp("read", {}, meta=conditional_request_meta(block.etag, accept_delta=[FORMAT]))
    found = parse_cache_block(reply.meta)
    assert found is not None
    assert found.delta is not None
    assert len(seen) == 1
    assert (seen[0] is not loop_thread) is off_the_loop
