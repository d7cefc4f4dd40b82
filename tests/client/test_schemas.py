"""The client's quick check of output schemas (`mcpcache.client.schemas`): it only ever says "valid" where the
SDK's own check (jsonschema, 2020-12) says so too; every other verdict, and every error message, is the
SDK's."""

from __future__ import annotations

import copy
from typing import Any

import fastmcp
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.client.session import ClientSession

from mcpcache.client import ToolCache
from mcpcache.client.schemas import FastSchemas, _why_not
from mcpcache.server import CachePolicy, install
from mcpcache.stores import MemoryStore

pytestmark = pytest.mark.anyio

# -- agreement with jsonschema ------------------------------------------------------------------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.sampled_from([0.0, 1.0, 1.5, -2.5])
    | st.text("ab1", max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
    max_leaves=8,
)
_types = st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object"])


def _schemas(leaf_refs: bool) -> st.SearchStrategy[dict[str, Any]]:
    base: st.SearchStrategy[dict[str, Any]] = st.one_of(
        st.builds(lambda t: {"type": t}, _types),
        st.builds(lambda ts: {"type": ts}, st.lists(_types, min_size=1, max_size=3, unique=True)),
        st.builds(lambda v: {"enum": v}, st.lists(_json, min_size=1, max_size=3)),
        st.builds(lambda v: {"const": v}, _json),
        st.builds(lambda n: {"minLength": n}, st.integers(0, 3)),
        st.builds(lambda n: {"maxLength": n}, st.integers(0, 3)),
        st.builds(lambda p: {"pattern": p}, st.sampled_from(["^a", "b$", "1"])),
        st.builds(lambda n: {"minimum": n}, st.integers(-2, 2) | st.just(0.5)),
        st.builds(lambda n: {"exclusiveMaximum": n}, st.integers(-2, 2) | st.just(0.5)),
        st.builds(lambda n: {"minItems": n}, st.integers(0, 2)),
        st.builds(lambda n: {"maxProperties": n}, st.integers(0, 2)),
        st.builds(lambda u: {"uniqueItems": u}, st.booleans()),
        st.builds(lambda r: {"required": r}, st.lists(st.sampled_from(["a", "b"]), max_size=2, unique=True)),
        st.just({"format": "email"}),
        st.just({"default": 5, "title": "t"}),
        st.just({"$ref": "#/$defs/thing"}) if leaf_refs else st.just({}),
    )

    def nest(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        return st.one_of(
            st.builds(
                lambda p: {"type": "object", "properties": p},
                st.dictionaries(st.sampled_from("abc"), inner, max_size=2),
            ),
            st.builds(lambda s: {"additionalProperties": s}, inner | st.booleans()),
            st.builds(lambda s: {"items": s}, inner),
            st.builds(lambda s: {"contains": s}, inner),
            st.builds(lambda s: {"not": s}, inner),
            st.builds(lambda s: {"propertyNames": s}, inner),
            st.builds(lambda ss: {"anyOf": ss}, st.lists(inner, min_size=1, max_size=2)),
            st.builds(lambda ss: {"oneOf": ss}, st.lists(inner, min_size=1, max_size=2)),
            st.builds(lambda ss: {"allOf": ss}, st.lists(inner, min_size=1, max_size=2)),
            st.builds(lambda a, b, c: {"if": a, "then": b, "else": c}, inner, inner, inner),
            st.builds(lambda a, b: {**a, **b}, inner, inner),
        )

    return st.recursive(base, nest, max_leaves=6)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_schemas(leaf_refs=True), thing=_schemas(leaf_refs=False), instance=_json)
def test_the_quick_check_says_valid_only_where_jsonschema_does(
    schema: dict[str, Any], thing: dict[str, Any], instance: Any
) -> None:
    schema = {**schema, "$defs": {"thing": thing}}
    before = copy.deepcopy(instance)
    quick = FastSchemas().accepts(schema, instance)
    if quick:
        assert jsonschema.Draft202012Validator(schema).is_valid(instance), (schema, instance)
    assert instance == before  # never changed (fastjsonschema fills defaults in unless told not to)


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        # Draft 7 ignores a $ref's siblings; 2020-12 applies them.
        ({"$defs": {"s": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/s", "maxLength": 1}}}, {"a": "xy"}),
        # Array-form items is tuple validation in draft 7, an error in 2020-12 (prefixItems).
        ({"items": [{"type": "string"}]}, [1]),
        ({"prefixItems": [{"type": "string"}]}, [1]),
        ({"dependentRequired": {"a": ["b"]}}, {"a": 1}),
        ({"unevaluatedProperties": False, "properties": {"a": {}}}, {"a": 1, "b": 2}),
        ({"multipleOf": 0.1}, 0.30000000000000004),
    ],
)
def test_schemas_whose_keywords_changed_meaning_are_left_to_the_sdk(schema: dict[str, Any], instance: Any) -> None:
    assert _why_not(schema) is not None
    assert FastSchemas().accepts(schema, instance) is False


def test_a_reference_outside_the_document_is_never_fetched() -> None:
    schema = {"$ref": "http://127.0.0.1:9/schema.json"}
    assert _why_not(schema) == "a reference outside the document"
    assert FastSchemas().accepts(schema, {}) is False


def test_a_schema_changed_in_place_is_compiled_again() -> None:
    schemas = FastSchemas()
    schema: dict[str, Any] = {"type": "object"}
    assert schemas.accepts(schema, {})
    other: dict[str, Any] = {"type": "string"}  # another object: another entry, whatever id() it gets
    assert not schemas.accepts(other, {})


# -- in the client --------------------------------------------------------------------------------

STRICT = {
    "type": "object",
    "properties": {"kind": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["kind", "count"],
}


def _server() -> fastmcp.FastMCP:
    server = fastmcp.FastMCP("schemas")
    answers: dict[str, Any] = {"good": {"kind": "k", "count": 1}, "bad": {"kind": "k", "count": "one"}}

    @server.tool(output_schema=STRICT)
    def read(which: str) -> dict[str, Any]:
        return answers[which]

    install(server, {"read": CachePolicy(ttl_ms=0)})
    return server


async def test_a_valid_answer_skips_the_sdks_check_and_an_invalid_one_gets_its_error() -> None:
    calls: list[str] = []
    original = ClientSession.validate_tool_result

    async def counted(self: ClientSession, name: str, result: Any) -> None:
        calls.append(name)
        await original(self, name, result)

    server = _server()
    async with fastmcp.Client(server) as client, fastmcp.Client(server) as stock:
        await client.list_tools()
        view = ToolCache(MemoryStore()).wrap(client)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ClientSession, "validate_tool_result", counted)
            good = await view.call_mcp("read", {"which": "good"})
            assert good.result.structured_content == {"kind": "k", "count": 1}
            assert calls == []  # the quick check said valid: the SDK's slower check did not run
            with pytest.raises(RuntimeError) as stock_error:
                await stock.call_tool_mcp("read", {"which": "bad"})
            calls.clear()
            with pytest.raises(RuntimeError) as cached_error:
                await view.call_mcp("read", {"which": "bad"})
            assert calls == ["read"]  # the quick check said no: the SDK decided, with its own message
    assert str(cached_error.value) == str(stock_error.value)
    assert "Invalid structured content returned by tool read" in str(cached_error.value)


async def test_the_sdk_still_keeps_its_schemas_where_the_quick_check_reads_them() -> None:
    async with fastmcp.Client(_server()) as client:
        await client.list_tools()
        assert client.session._tool_output_schemas["read"] == STRICT


# -- schemas the SDK reads by another draft, or refuses ----------------------------------------------------

DRAFT_4 = "http://json-schema.org/draft-04/schema#"


def _sdk_says_valid(schema: dict[str, Any], instance: Any) -> bool:
    """The SDK's own steps (`ClientSession._output_schema_validator`, then its check of the answer)."""
    try:
        validator = jsonschema.validators.validator_for(schema)
        validator.check_schema(schema)
        validator(schema).validate(instance)
    except Exception:
        return False
    return True


@pytest.mark.filterwarnings("ignore:The metaschema specified by \\$schema was not found:DeprecationWarning")
@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        ({"$schema": DRAFT_4, "type": "integer"}, 1.0),  # draft 4: 1.0 is no integer
        ({"$schema": DRAFT_4, "type": "object", "properties": {"n": {"type": "integer"}}}, {"n": 1.0}),
        ({"$schema": "http://json-schema.org/draft-03/schema#", "type": "integer"}, 1.0),
        ({"$schema": "unknown", "type": "integer"}, 1),
        ({"maxLength": 1.5}, "a"),  # the SDK refuses these schemas on every call
        ({"minProperties": -1}, {}),
        ({"exclusiveMinimum": True}, 5),
        ({"type": ["string", "string"]}, "a"),
        ({"type": "object", "title": 1}, {}),
        ({"type": "object", "description": ["x"]}, {}),
    ],
)
def test_schemas_the_sdk_reads_by_another_draft_or_refuses_are_left_to_it(
    schema: dict[str, Any], instance: Any
) -> None:
    assert _sdk_says_valid(schema, instance) is False
    assert FastSchemas().accepts(schema, instance) is False


async def test_a_draft_4_output_schema_gets_the_stock_clients_verdict() -> None:
    server = fastmcp.FastMCP("draft4")
    schema = {"$schema": DRAFT_4, "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    @server.tool(output_schema=schema)
    def read() -> dict[str, Any]:
        return {"n": 1.0}

    install(server, {"read": CachePolicy(ttl_ms=0)})
    async with fastmcp.Client(server) as client, fastmcp.Client(server) as stock:
        await client.list_tools()
        view = ToolCache(MemoryStore()).wrap(client)
        with pytest.raises(RuntimeError) as stock_error:
            await stock.call_tool_mcp("read", {})
        with pytest.raises(RuntimeError) as cached_error:
            await view.call_mcp("read", {})
    assert str(cached_error.value) == str(stock_error.value)
