"""What the answer history takes from FastMCP on trust, checked against FastMCP itself so that a release
that changes it fails here, loudly, rather than in the field (where it would cost only repeated calls:
a delta computed against a misread base fails its digest at the client).

The history keeps a FastMCP dict answer's text once and reads its structured content back from it,
because FastMCP's `Tool.convert_result` writes that text block from the structured value it sends
(`_convert_to_content(structured)`). The raw-value layer says so only for results FastMCP converted
from a plain return value, never for a `ToolResult` the tool built nor for a Prefab app.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fastmcp import FastMCP
from fastmcp.tools.base import ToolResult
from typing_extensions import TypedDict

from mcpcache.server.decisions import BelowTagging
from mcpcache.server.fastmcp.raw_tags import _converted, raw_tagged
from mcpcache.server.policies import CachePolicy


class Typed(TypedDict, total=False):
    kind: str
    values: list[float]


VALUE: dict[str, Any] = {"kind": "doc", "values": [1.5, 1e16, -0.0, 3.0], "text": "é \N{GRINNING FACE}", "n": 2**40}


def plain() -> dict[str, Any]:
    return dict(VALUE)


def typed() -> Typed:
    return {"kind": "doc", "values": [1.5, 2.0]}


def bare():  # type: ignore[no-untyped-def]  # no annotation: FastMCP serialises under Any
    return dict(VALUE)


def wrapped() -> dict[str, Any] | int:  # not an object schema: FastMCP wraps it under "result"
    return dict(VALUE)


def listed() -> list[dict[str, Any]]:
    return [dict(VALUE)]


def nested() -> dict[str, dict[str, Any]]:
    return {"result": dict(VALUE)}


async def converted(fn: Any) -> tuple[ToolResult, BelowTagging]:
    server = FastMCP("promise")
    server.tool(fn)
    tool = await server.get_tool(fn.__name__)
    assert tool is not None
    tagging = BelowTagging(fn.__name__, CachePolicy(), None)
    result = _converted(raw_tagged(tool), tagging, fn())  # type: ignore[arg-type]
    return result, tagging


@pytest.mark.anyio
@pytest.mark.parametrize("fn", [plain, typed, bare, nested], ids=lambda fn: fn.__name__)
async def test_fastmcp_writes_a_dict_answer_s_text_from_its_structured_content(fn: Any) -> None:
    result, tagging = await converted(fn)
    assert tagging.structured_in_text == "plain"
    assert orjson.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_a_dict_wrapped_under_result_is_read_back_wrapped() -> None:
    result, tagging = await converted(wrapped)
    assert tagging.structured_in_text == "wrapped"
    assert result.structured_content == {"result": orjson.loads(result.content[0].text)}  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_no_claim_for_an_answer_whose_text_is_not_an_object() -> None:
    result, tagging = await converted(listed)
    assert tagging.structured_in_text is None
    assert result.structured_content == {"result": [VALUE]}


@pytest.mark.anyio
async def test_no_claim_for_a_result_the_tool_built() -> None:
    def built() -> ToolResult:
        return ToolResult(content="not the JSON of it", structured_content={"kind": "doc"})

    _, tagging = await converted(built)
    assert tagging.structured_in_text is None
