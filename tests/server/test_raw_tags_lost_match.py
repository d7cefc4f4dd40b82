"""A TypedDict tool whose value carries an undeclared key (or an int in a float field): its full read and
a later conditional call must hash the same form, or the tag it was given never matches again."""

from __future__ import annotations

from typing import Any

import pytest
from fastmcp import FastMCP
from support.calls import block_of, call_conditional, call_stock
from support.transports import MODERN, ServerTarget, stock_client
from typing_extensions import TypedDict

from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies

pytestmark = pytest.mark.anyio


class Flat(TypedDict):
    a: int


class Measure(TypedDict):
    f: float


@pytest.mark.parametrize(("tool", "value"), [("flat", {"a": 1, "x": 2}), ("measure", {"f": 1})])
async def test_an_unchanged_typed_dict_answer_revalidates(tool: str, value: dict[str, Any]) -> None:
    server = FastMCP("typed")

    @server.tool
    def flat(key: str) -> Flat:
        return value  # type: ignore[return-value]

    @server.tool
    def measure(key: str) -> Measure:
        return value  # type: ignore[return-value]

    install(server, ToolPolicies({"flat": CachePolicy(kind="doc"), "measure": CachePolicy(kind="doc")}))
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        tag = block_of(await call_stock(client, tool, {"key": "k"})).etag  # type: ignore[union-attr]
        again = await call_conditional(client, tool, {"key": "k"}, tag)
        block = block_of(again)
        assert block is not None
        assert block.etag == tag
        # Flat and Measure require `a` and `f`, which the stub {"kind": "doc"} lacks: the full answer goes.
        assert not block.not_modified
        assert again.structured_content is not None
