"""Answers that must never share a raw-domain tag, though one's text and the other's JSON are the same
bytes: a tool's own content blocks or CallToolResult, whose text is not the JSON of the structured value,
and a TypedDict, whose serializer drops undeclared keys (so an exact value's JSON is not its answer's).
Each pair is served in turn by a real FastMCP server; a conditional call with the first version's tag
must get the second version in full.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import mcp_types as mt
import pytest
from fastmcp import FastMCP
from support.calls import block_of, call_conditional, call_stock, wire
from support.transports import MODERN, ServerTarget, stock_client
from typing_extensions import TypedDict

from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies

pytestmark = pytest.mark.anyio


WRAPPED = {"type": "object", "properties": {"result": {}}, "required": ["result"], "x-fastmcp-wrap-result": True}


def build(state: dict[str, Any]) -> FastMCP:
    server = FastMCP("textpath")
    policies = ToolPolicies()

    @server.tool(output_schema=WRAPPED)
    def blocks(key: str) -> list[Any]:
        # A list of content blocks under a wrapped output schema: FastMCP keeps the tool's block as the
        # text, and structuredContent is {"result": [<the block as a dict>]}.
        return state["blocks"]

    @server.tool
    def protocol_result(key: str):  # unannotated: no output schema
        return state["protocol_result"]

    for name in ("blocks", "protocol_result"):
        policies.declare(name, CachePolicy(kind="doc"))
    install(server, policies)
    return server


def answer(result: mt.CallToolResult) -> dict[str, Any]:
    sent = wire(result)
    meta = dict(sent.get("_meta") or {})
    meta.pop("io.modelcontextprotocol/cache", None)
    return {k: sent.get(k) for k in ("content", "structuredContent", "isError")} | {"_meta": meta}


async def _stale_match(server: FastMCP, state: dict[str, Any], tool: str, first: Any, second: Any) -> None:
    state[tool] = first
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        one = await call_stock(client, tool, {"key": "k"})
        tag = block_of(one).etag  # type: ignore[union-attr]
        assert tag is not None
        state[tool] = second
        reply = await call_conditional(client, tool, {"key": "k"}, tag)
        two = await call_stock(client, tool, {"key": "k"})
        assert answer(one) != answer(two), "the two versions are different answers"
        # THE RULE: a changed answer is never called not modified (equal tags imply identical answers).
        assert not block_of(reply).not_modified, (  # type: ignore[union-attr]
            f"changed answer called not modified under {tag}: client keeps {answer(one)}, "
            f"server now sends {answer(two)}"
        )
        assert block_of(two).etag != tag, f"two different answers share the tag {tag}"  # type: ignore[union-attr]


async def test_list_of_text_blocks_shares_the_tag_of_the_list_its_text_spells() -> None:
    state: dict[str, Any] = {}
    await _stale_match(build(state), state, "blocks", [1], [mt.TextContent(type="text", text="[1]")])


async def test_call_tool_result_shares_the_tag_of_the_dict_its_text_spells() -> None:
    state: dict[str, Any] = {}
    forged = mt.CallToolResult(content=[mt.TextContent(type="text", text='{"a":1}')], structured_content={"a": 2})
    await _stale_match(build(state), state, "protocol_result", {"a": 1}, forged)


# TypedDict: the serializer drops undeclared keys (and writes an int in a float field as 1.0), so a
# conditional call's orjson bytes of an exact value V are not the JSON of V's answer. A non-exact value W
# whose inferred part keeps those keys gets, on its full read, a text tag over exactly those bytes.


class Inner(TypedDict):
    inner: int


class Outer(TypedDict):
    a: Inner


@dataclasses.dataclass
class InnerRow:
    inner: int
    x: int


class Flat(TypedDict):
    a: int


@dataclasses.dataclass
class FlatRow:
    a: int
    x: int


def build_typed(state: dict[str, Any]) -> FastMCP:
    server = FastMCP("typed")
    policies = ToolPolicies()

    @server.tool
    def nested(key: str) -> Outer:  # the default object output schema
        return state["nested"]

    @server.tool(output_schema=None)
    def flat(key: str) -> Flat:
        return state["flat"]

    for name in ("nested", "flat"):
        policies.declare(name, CachePolicy(kind="doc"))
    install(server, policies)
    return server


async def test_typed_dict_nested_dataclass_then_dict_with_an_undeclared_key() -> None:
    state: dict[str, Any] = {}
    first = {"a": InnerRow(inner=1, x=2)}  # sent as {"a": {"inner": 1, "x": 2}}
    second = {"a": {"inner": 1, "x": 2}}  # exact; sent as {"a": {"inner": 1}}
    await _stale_match(build_typed(state), state, "nested", first, second)


async def test_typed_dict_without_output_schema_dataclass_then_dict_with_an_undeclared_key() -> None:
    state: dict[str, Any] = {}
    await _stale_match(build_typed(state), state, "flat", FlatRow(a=1, x=2), {"a": 1, "x": 2})
