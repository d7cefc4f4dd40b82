"""Answers FastMCP changes above the tag: no tag may name them.

- `FastMCP.call_tool` re-addresses a Prefab payload's `toolCall` references (structuredContent carrying
  `_meta.fastmcp.toolNames`) to the names of the server's current tool listing, after the whole middleware
  chain. The same body is then two answers under two listings, so such answers are sent untagged.
- A transform added after `install()` is outside `RawTagTransform` (FastMCP: first added is innermost);
  one that hands out `Tool.from_tool(tool, transform_fn=...)` under the same name makes the raw value of
  the tagged tool something other than what is sent, so the answer is hashed instead.
"""

from __future__ import annotations

from typing import Any

import mcp_types as mt
import pytest
from fastmcp import FastMCP
from fastmcp.server.transforms import Transform
from fastmcp.tools import Tool
from fastmcp.tools.tool_transform import forward
from support.calls import block_of, call_conditional, call_stock, wire
from support.transports import MODERN, ServerTarget, stock_client

from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies

pytestmark = pytest.mark.anyio

IDENTITY = "abcdef012345"
ADDRESS = f"__{IDENTITY}_save"
# A plain dict (exact JSON types) that happens to be a Prefab-style payload with one tool reference.
PAYLOAD = {
    "button": {"action": "toolCall", "tool": "save"},
    "_meta": {"fastmcp": {"toolNames": {"save": ADDRESS}}},
}


def answer(result: mt.CallToolResult) -> dict[str, Any]:
    sent = wire(result)
    meta = dict(sent.get("_meta") or {})
    meta.pop("io.modelcontextprotocol/cache", None)
    return {k: sent.get(k) for k in ("content", "structuredContent", "isError")} | {"_meta": meta}


def build(*, raw_tags: bool) -> FastMCP:
    server = FastMCP("rebind")

    @server.tool
    def ui(key: str):  # unannotated, returns an exact dict: the text path on a full read
        return {"button": dict(PAYLOAD["button"]), "_meta": {"fastmcp": {"toolNames": {"save": ADDRESS}}}}

    @server.tool(name="save", meta={"fastmcp": {"tool_hash": IDENTITY}})
    def save(key: str) -> str:
        return "saved"

    install(server, ToolPolicies({"ui": CachePolicy(kind="doc")}), raw_tags=raw_tags)
    return server


@pytest.mark.parametrize("raw_tags", [True, False], ids=["raw-tags", "content-tags"])
async def test_an_answer_fastmcp_readdresses_is_sent_untagged(raw_tags: bool) -> None:
    server = build(raw_tags=raw_tags)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        one = await call_stock(client, "ui", {"key": "k"})
        assert block_of(one) is None
        # The tool `save` is renamed (same identity): the server's listing changes, the tool `ui` does not.
        server.local_provider.remove_tool("save")

        @server.tool(name="store", meta={"fastmcp": {"tool_hash": IDENTITY}})
        def store(key: str) -> str:
            return "saved"

        two = await call_stock(client, "ui", {"key": "k"})
        assert answer(one) != answer(two), "the listing changed the answer"
        assert block_of(two) is None


# A server transform added after `install` is outside `RawTagTransform` (FastMCP: "first added is
# innermost"). When it hands out `Tool.from_tool(tool, transform_fn=...)` under the same name, the parent
# is the `RawTaggedTool` copy: its `convert_result` takes the handoff (the names match) and tags the
# parent's raw value, while the answer as sent is whatever the transform function builds from it.


class Decorate(Transform):
    """Wraps `doc` in a transformed tool of the same name that adds a field of its own to the answer."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    async def get_tool(self, name: str, call_next: Any, *, version: Any = None) -> Any:
        tool = await call_next(name, version=version)
        if tool is None or tool.name != "doc":
            return tool

        async def decorated(key: str) -> dict[str, Any]:
            inner = await forward(key=key)
            return {"edition": self.state["edition"], **(inner.structured_content or {})}

        return Tool.from_tool(tool, transform_fn=decorated)


def build_transformed(state: dict[str, Any], *, raw_tags: bool) -> FastMCP:
    server = FastMCP("transformed")

    @server.tool
    def doc(key: str):  # unannotated exact dict: the text path
        return state["doc"]

    install(server, ToolPolicies({"doc": CachePolicy(kind="doc")}), raw_tags=raw_tags)
    server.add_transform(Decorate(state))
    return server


@pytest.mark.parametrize("raw_tags", [True, False], ids=["raw-tags", "content-tags"])
async def test_a_same_name_transform_outside_the_raw_tag_transform(raw_tags: bool) -> None:
    state: dict[str, Any] = {"doc": {"a": 1}, "edition": 1}
    server = build_transformed(state, raw_tags=raw_tags)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        one = await call_stock(client, "doc", {"key": "k"})
        tag = block_of(one).etag  # type: ignore[union-attr]
        assert tag is not None
        state["edition"] = 2  # the transform's part changes; the parent's raw value does not
        reply = await call_conditional(client, "doc", {"key": "k"}, tag)
        two = await call_stock(client, "doc", {"key": "k"})
        assert answer(one) != answer(two), "the two versions are different answers"
        assert not block_of(reply).not_modified, (  # type: ignore[union-attr]
            f"changed answer called not modified under {tag}: client keeps {answer(one)['structuredContent']}, "
            f"server now sends {answer(two)['structuredContent']}; reply {wire(reply)}"
        )
        assert block_of(two).etag != tag, f"two different answers share the tag {tag}"  # type: ignore[union-attr]
