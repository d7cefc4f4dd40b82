"""The gateway never sends its callers a stub their tool's output schema refuses (docs/protocol.md section 4).

The gateway knows each tool's output schema from its upstream's `tools/list`. A caller holding the current
tag of a tool whose schema requires more than `kind` gets the full answer under that tag, not the
not-modified reply; one accepting deltas gets the full answer, not a delta reply. Both with and without
a store, over an upstream that never heard of mcpcache, and over one that answers not-modified with a stub
its own schema refuses (the gateway then asks it again for the answer). A tool whose schema accepts the
stub still gets not-modified and deltas. Real FastMCP upstream and gateway; a real FastMCP client.
"""

from __future__ import annotations

from typing import Any, Literal

import fastmcp
import pytest
from fastmcp import FastMCP
from pydantic import BaseModel, ConfigDict
from support.calls import block_of

from mcpcache.delta import FORMAT
from mcpcache.gateway.config import ToolSettings
from mcpcache.protocol import conditional_request_meta
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy
from mcpcache.server.stubs import NO_OUTPUT_SCHEMA, StubCheck, StubChecks
from mcpcache.stores import MemoryStore

from .conftest import gateway_over

pytestmark = pytest.mark.anyio


class Strict(BaseModel):
    kind: Literal["doc"] = "doc"
    text: str


class Loose(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: str
    text: str | None = None


class _Unchecked(StubChecks):
    """An upstream that sends the stub whatever the schema (as mcpcache's own servers did before)."""

    def get(self, tool: str, schema: Any) -> StubCheck:
        return NO_OUTPUT_SCHEMA


def upstream(source: dict[str, Any], *, stamps: bool) -> FastMCP[Any]:
    """`stamps`: an upstream with mcpcache that answers not-modified to its own tags, refused stub or not."""
    server: FastMCP[Any] = FastMCP("up")

    @server.tool
    def strict(key: str) -> Strict:
        source["runs"] = source.get("runs", 0) + 1
        return Strict(text=source["text"])

    @server.tool
    def loose(key: str) -> Loose:
        return Loose(kind="doc", text=source["text"])

    if stamps:
        middleware = install(server, {"strict": CachePolicy(ttl_ms=0), "loose": CachePolicy(ttl_ms=0)})
        middleware.stubs = _Unchecked()
    return server


TOOLS = {"strict": ToolSettings(ttl_ms=0), "loose": ToolSettings(ttl_ms=0)}
ARGS = {"key": "k"}


@pytest.mark.parametrize("stamps", [False, True], ids=["plain-upstream", "upstream-sending-stubs"])
@pytest.mark.parametrize("with_store", [False, True], ids=["direct", "store"])
async def test_a_caller_holding_the_tag_of_a_strict_tool_gets_the_full_answer(stamps: bool, with_store: bool) -> None:
    source = {"text": "long " * 60}
    gateway = gateway_over(upstream(source, stamps=stamps), TOOLS, store=MemoryStore() if with_store else None)
    async with fastmcp.Client(gateway) as client:
        first = await client.call_tool_mcp("strict", ARGS)
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag is not None
        # The stock client's own validation runs on the reply: it is the whole answer.
        again = await client.call_tool("strict", ARGS, meta=conditional_request_meta(tag))
        loose_first = await client.call_tool_mcp("loose", ARGS)
        loose_tag = block_of(loose_first).etag  # type: ignore[union-attr]
        assert loose_tag is not None
        loose_again = await client.call_tool_mcp("loose", ARGS, meta=conditional_request_meta(loose_tag))
    block = block_of(again)  # type: ignore[arg-type]
    assert block is not None
    assert block.etag == tag
    assert not block.not_modified
    assert again.structured_content == first.structured_content
    assert again.content == first.content
    loose_block = block_of(loose_again)
    assert loose_block is not None
    assert loose_block.not_modified
    assert loose_again.structured_content == {"kind": "doc"}


async def test_a_caller_accepting_deltas_of_a_strict_tool_gets_the_full_answer() -> None:
    source = {"text": "long " * 60}
    # Public: the history keeps an anonymous caller's answers only when they are everybody's.
    public = {name: ToolSettings(ttl_ms=0, scope="public") for name in TOOLS}
    gateway = gateway_over(upstream(source, stamps=False), public, store=MemoryStore())
    async with fastmcp.Client(gateway) as client:
        first = await client.call_tool_mcp("strict", ARGS)
        loose_first = await client.call_tool_mcp("loose", ARGS)
        source["text"] += "!"
        tag, loose_tag = block_of(first).etag, block_of(loose_first).etag  # type: ignore[union-attr]
        assert tag is not None
        assert loose_tag is not None
        changed = await client.call_tool_mcp("strict", ARGS, meta=conditional_request_meta(tag, accept_delta=(FORMAT,)))
        loose_meta = conditional_request_meta(loose_tag, accept_delta=(FORMAT,))
        loose_changed = await client.call_tool_mcp("loose", ARGS, meta=loose_meta)
    block = block_of(changed)
    assert block is not None
    assert block.delta is None
    assert block.etag not in (None, tag)
    assert changed.structured_content == {"kind": "doc", "text": source["text"]}
    loose_block = block_of(loose_changed)
    assert loose_block is not None
    assert loose_block.delta is not None, "the loose tool, changed the same way, gets a delta"
