"""What the proxy hands FastMCP to send the host: the upstream's answer, every field as it came."""

from __future__ import annotations

from typing import Any

import mcp_types as mt
import pytest
from fastmcp.tools.base import RawStructuredToolResult, ToolResult

from mcpcache.protocol import META_KEY
from mcpcache.proxy.calls import RelayedToolResult, as_tool_result


def _wire(result: mt.CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, exclude_none=True)


def _sent(relayed: ToolResult) -> mt.CallToolResult:
    """What FastMCP's tools/call handler makes of a ToolResult (it accepts these three shapes)."""
    out = relayed.to_mcp_result()
    if isinstance(out, mt.CallToolResult):
        return out
    if isinstance(out, tuple):
        content, structured = out
        return mt.CallToolResult(content=content, structured_content=structured)
    return mt.CallToolResult(content=out)


TEXT = mt.TextContent(type="text", text='{"kind":"k","n":1.0}')
BLOCK = {META_KEY: {"ttlMs": 5000, "etag": 'W/"0123456789abcdef0123456789abcdef"'}, "x/y": [1]}


@pytest.mark.parametrize(
    "answer",
    [
        mt.CallToolResult(
            content=[TEXT], structured_content={"kind": "k", "n": 1.0, "rows": [{"a": None}]}, _meta=BLOCK
        ),
        mt.CallToolResult(content=[TEXT], structured_content={"kind": "k", "n": 1.0}),
        mt.CallToolResult(content=[mt.TextContent(type="text", text="plain")]),
        mt.CallToolResult(content=[mt.TextContent(type="text", text="refused")], is_error=True, _meta=BLOCK),
    ],
)
def test_an_answer_reaches_the_host_field_for_field(answer: mt.CallToolResult) -> None:
    relayed = as_tool_result(answer)
    assert isinstance(relayed, RelayedToolResult)
    assert _wire(_sent(relayed)) == _wire(answer)


def test_structured_content_that_is_not_an_object_is_relayed_as_it_is() -> None:
    answer = mt.CallToolResult(content=[mt.TextContent(type="text", text="[1, 2]")], structured_content=[1, 2])
    relayed = as_tool_result(answer)
    assert isinstance(relayed, RawStructuredToolResult)
    assert _wire(_sent(relayed)) == _wire(answer)
