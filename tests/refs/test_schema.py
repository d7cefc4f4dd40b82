"""`with_uri_arguments`: the client adds `X_uri` siblings to the schemas it shows the model (weakness 14:
no server has to advertise a host-specific contract), and the augmented schema accepts both forms.

Schemas come from real servers' `tools/list` where they can, validated with jsonschema (an mcp dependency).
"""

from __future__ import annotations

import copy
from typing import Any

import fastmcp
import jsonschema  # type: ignore[import-untyped]
import mcp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.client._memory import InMemoryTransport
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

from mcpcache.refs import mint, with_uri_arguments
from mcpcache.refs.uri import pointer_of

from .servers import build_chart_server, time_series

pytestmark = pytest.mark.anyio


class Layout(BaseModel):
    width: int = 640
    height: int = 480


class Row(BaseModel):
    t: str
    temp_c: float


async def listed_schemas() -> dict[str, dict[str, Any]]:
    server = fastmcp.FastMCP("shapes")

    @server.tool
    def styled(data: list[dict[str, Any]], layout: Layout, title: str, size: int = 3) -> str:
        return title

    @server.tool
    def optional(data: list[float] | None = None, note: str | None = None) -> str:
        return ""

    @server.tool
    def scalar(name: str, count: int) -> str:
        return name

    schemas = {}
    async with fastmcp.Client(server) as client:
        for tool in await client.list_tools():
            schemas[tool.name] = tool.input_schema
    sdk = MCPServer("shapes-sdk")

    @sdk.tool()
    def styled_sdk(rows: list[Row], layout: Layout, title: str, extra: Layout | None = None) -> str:
        return title

    for other in (build_chart_server(), sdk):
        async with mcp.Client(InMemoryTransport(other)) as sdk_client:
            for tool in (await sdk_client.list_tools()).tools:
                schemas[tool.name] = tool.input_schema
    return schemas


async def test_object_and_array_arguments_gain_uri_siblings_and_stop_being_required() -> None:
    schemas = await listed_schemas()
    plot = with_uri_arguments(schemas["plot"])
    assert set(plot["properties"]) == {"data", "title", "data_uri"}
    assert plot["required"] == ["title"]
    styled = with_uri_arguments(schemas["styled"])
    # `layout` is a pydantic model: a `$ref` into `$defs`, an object all the same.
    assert set(styled["properties"]) == {"data", "layout", "title", "size", "data_uri", "layout_uri"}
    assert styled["required"] == ["title"]
    # The SDK's MCPServer keeps models in `$defs` and names them with `$ref` (FastMCP inlines them).
    assert schemas["styled_sdk"]["properties"]["layout"] == {"$ref": "#/$defs/Layout"}
    styled_sdk = with_uri_arguments(schemas["styled_sdk"])
    assert {"rows_uri", "layout_uri", "extra_uri"} <= set(styled_sdk["properties"])
    assert "title_uri" not in styled_sdk["properties"]
    assert styled_sdk["required"] == ["title"]
    optional = with_uri_arguments(schemas["optional"])
    assert set(optional["properties"]) == {"data", "note", "data_uri"}


async def test_tools_with_nothing_to_pass_by_reference_are_unchanged() -> None:
    schemas = await listed_schemas()
    for name in ("scalar", "plot_calls"):
        original = copy.deepcopy(schemas[name])
        augmented = with_uri_arguments(schemas[name])
        assert augmented == original
        assert schemas[name] == original  # never modified in place


def test_the_input_is_never_modified_and_an_existing_x_uri_is_left_to_the_server() -> None:
    schema = {
        "type": "object",
        "properties": {"data": {"type": "array"}, "data_uri": {"type": "string"}, "extra": {"type": "object"}},
        "required": ["data", "extra"],
    }
    original = copy.deepcopy(schema)
    augmented = with_uri_arguments(schema)
    assert schema == original
    assert augmented["properties"]["data_uri"] == {"type": "string"}  # the server's own
    assert "extra_uri" in augmented["properties"]
    assert augmented["required"] == ["data"]


@pytest.mark.parametrize(
    "schema",
    [{}, {"type": "object"}, {"properties": "nonsense"}, {"properties": {"x": "not a schema"}}, {"$ref": "#/nowhere"}],
)
def test_odd_schemas_are_returned_as_they_are(schema: dict[str, Any]) -> None:
    assert with_uri_arguments(schema) == schema


def test_reference_cycles_in_defs_end() -> None:
    schema = {
        "type": "object",
        "properties": {"node": {"$ref": "#/$defs/A"}},
        "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}},
    }
    assert "node_uri" not in with_uri_arguments(schema)["properties"]


async def test_the_augmented_schema_accepts_both_forms_and_refuses_bad_references() -> None:
    schemas = await listed_schemas()
    original, plot = schemas["plot"], with_uri_arguments(schemas["plot"])
    uri = mint("conv-42")
    rows = time_series()[:3]
    accepted = [
        {"data": rows, "title": "t"},
        {"data_uri": str(uri), "title": "t"},
        {"data_uri": str(uri.at("/rows")), "title": "t"},
        {"data_uri": [str(uri.at("/rows")), str(mint("conv-42"))], "title": "t"},
    ]
    for arguments in accepted:
        jsonschema.validate(arguments, plot)
    # Without augmentation the reference form is not a valid call: that is what the siblings are for.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"data_uri": str(uri), "title": "t"}, original)
    refused = [
        {"data_uri": "https://example.com/rows.json", "title": "t"},
        {"data_uri": "mcp+cache://../x", "title": "t"},
        {"data_uri": "mcp+cache://conv-42/short", "title": "t"},
        {"data_uri": [], "title": "t"},
        {"data_uri": [str(uri), 7], "title": "t"},
        {"data_uri": [str(uri), "https://example.com"], "title": "t"},
        {"data_uri": 7, "title": "t"},
        {"data_uri": str(uri)},
    ]
    for arguments in refused:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(arguments, plot)


@given(st.text(max_size=80), st.lists(st.text(max_size=10) | st.integers(0, 999), max_size=4))
def test_every_minted_reference_fits_the_schema_pattern(conversation_id: str, path: list[str | int]) -> None:
    schema = with_uri_arguments({"type": "object", "properties": {"data": {"type": "array"}}})
    jsonschema.validate({"data_uri": str(mint(conversation_id).at(pointer_of(path)))}, schema)
    jsonschema.validate({"data_uri": [str(mint(conversation_id))]}, schema)
