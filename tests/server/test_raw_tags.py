"""FastMCP raw-value tags (domain `mcpcache/raw/v1`): a matching conditional call gets the not-modified
reply without FastMCP converting the return value; anything not exact falls back to the content tag.

Conversions are counted with a spy around `fastmcp.tools.base.Tool.convert_result` that counts and
calls through. Real FastMCP servers, stock clients, memory streams and streamable HTTP.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Annotated, Any, Required

import orjson
import pytest
from fastmcp import FastMCP
from fastmcp.tools.base import Tool, ToolResult
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, PlainSerializer
from support.calls import block_of, call_conditional, call_stock, wire
from support.served_tags import served_tag
from support.tags import tag_of
from support.transports import MODERN, ServerTarget, stock_client
from typing_extensions import TypedDict

from mcpcache.etag import RAW_DOMAIN, content_tag, exact_json, raw_domain, raw_json_tag, raw_tag
from mcpcache.protocol import META_KEY
from mcpcache.server.fastmcp import RawTaggedTool, install, raw_tag_domain
from mcpcache.server.policies import CachePolicy, ToolPolicies

pytestmark = pytest.mark.anyio


class Spy:
    def __init__(self) -> None:
        self.calls = 0


@pytest.fixture
def conversions(monkeypatch: pytest.MonkeyPatch) -> Spy:
    spy = Spy()
    original = Tool.convert_result

    def counting(self: Tool, raw_value: Any) -> ToolResult:
        spy.calls += 1
        return original(self, raw_value)

    monkeypatch.setattr(Tool, "convert_result", counting)
    return spy


class Point(BaseModel):
    x: int


@dataclasses.dataclass
class Pair:
    a: int


def is_not_modified(result: Any) -> bool:
    block = block_of(result)
    return block is not None and block.not_modified


STATE: dict[str, Any] = {"value": {"kind": "doc", "text": "first"}, "meta": "m1"}


def build_server(state: dict[str, Any]) -> FastMCP:
    server = FastMCP("raw")
    policies = ToolPolicies()

    @server.tool
    def read(key: str) -> dict[str, Any]:
        return dict(state["value"])

    @server.tool(output_schema=None)
    def read_text(key: str) -> str:
        return str(state["value"]["text"])

    @server.tool
    def read_model(key: str) -> Point:
        return Point(x=len(state["value"]["text"]))

    @server.tool(output_schema=None)
    def read_dataclass(key: str) -> Any:
        return Pair(a=len(state["value"]["text"]))

    @server.tool(output_schema=None)
    def read_bytes(key: str) -> bytes:
        return str(state["value"]["text"]).encode()

    @server.tool
    def read_with_meta(key: str) -> ToolResult:
        return ToolResult(structured_content=dict(state["value"]), meta={"x-cell": state["meta"]})

    for name in ("read", "read_text", "read_model", "read_dataclass", "read_bytes", "read_with_meta"):
        policies.declare(name, CachePolicy(kind="doc"))
    install(server, policies)
    return server


@pytest.fixture
def state() -> dict[str, Any]:
    return {"value": {"kind": "doc", "text": "first"}, "meta": "m1"}


async def test_a_match_is_answered_without_conversion_and_a_change_gets_the_full_answer(
    state: dict[str, Any], conversions: Spy
) -> None:
    server = build_server(state)
    tool = await server.get_tool("read")
    assert isinstance(tool, RawTaggedTool)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "read", {"key": "k"})
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag is not None
        domain = raw_tag_domain(tool)
        assert domain is not None
        assert tag == raw_tag(domain, {"kind": "doc", "text": "first"})
        assert tag != tag_of(first)  # not the content tag of the same answer
        assert conversions.calls == 1

        reply = await call_conditional(client, "read", {"key": "k"}, tag)
        assert wire(reply)["content"] == []
        assert reply.structured_content == {"kind": "doc"}
        assert is_not_modified(reply)
        assert conversions.calls == 1, "a matching tag must skip FastMCP's conversion"

        state["value"] = {"kind": "doc", "text": "second"}
        changed = await call_conditional(client, "read", {"key": "k"}, tag)
        assert conversions.calls == 2
        assert changed.structured_content == {"kind": "doc", "text": "second"}
        new = block_of(changed)
        assert new is not None
        assert not new.not_modified
        assert new.etag not in (None, tag)
        assert new.etag == await served_tag(server, "read", changed)


async def test_text_answers_use_the_raw_path_too(state: dict[str, Any], conversions: Spy) -> None:
    server = build_server(state)
    async with stock_client("fastmcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "read_text", {"key": "k"})
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag == await served_tag(server, "read_text", first)
        before = conversions.calls
        reply = await call_conditional(client, "read_text", {"key": "k"}, tag)
        assert is_not_modified(reply)
        assert reply.structured_content is None
        assert conversions.calls == before


@pytest.mark.parametrize("tool", ["read_model", "read_dataclass", "read_bytes"])
async def test_non_json_return_values_fall_back_to_the_content_tag(
    state: dict[str, Any], conversions: Spy, tool: str
) -> None:
    server = build_server(state)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, tool, {"key": "k"})
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag == tag_of(first)  # the content tag: the raw form was not exact
        reply = await call_conditional(client, tool, {"key": "k"}, tag)
        assert_tag_matched(reply, tag, refused=tool in STUB_REFUSED)
        assert conversions.calls == 2  # converted, then hashed


async def test_a_tool_result_meta_is_covered(state: dict[str, Any]) -> None:
    server = build_server(state)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "read_with_meta", {"key": "k"})
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag == tag_of(first)
        assert is_not_modified(await call_conditional(client, "read_with_meta", {"key": "k"}, tag))
        state["meta"] = "m2"  # same content and structured content, another _meta
        changed = await call_conditional(client, "read_with_meta", {"key": "k"}, tag)
        new = block_of(changed)
        assert new is not None
        assert not new.not_modified
        assert new.etag != tag
        assert changed.meta is not None
        assert changed.meta["x-cell"] == "m2"


async def test_without_install_transform_every_tag_is_a_content_tag(state: dict[str, Any]) -> None:
    server = FastMCP("plain-tags")
    policies = ToolPolicies({"read": CachePolicy()})

    @server.tool
    def read(key: str) -> dict[str, Any]:
        return dict(state["value"])

    install(server, policies, raw_tags=False)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "read", {"key": "k"})
    assert block_of(first).etag == tag_of(first)  # type: ignore[union-attr]


async def test_an_inner_middleware_that_touches_calls_turns_the_raw_path_off(state: dict[str, Any]) -> None:
    from fastmcp.server.middleware import Middleware

    class Touches(Middleware):
        async def on_call_tool(self, context: Any, call_next: Any) -> Any:
            result = await call_next(context)
            return result.model_copy(update={"meta": {**(result.meta or {}), "x-added": 1}})

    server = build_server(state)
    server.add_middleware(Touches())  # inside mcpcache's, which install put first
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "read", {"key": "k"})
    assert first.meta is not None
    assert first.meta["x-added"] == 1
    assert block_of(first).etag == tag_of(first)  # type: ignore[union-attr]  # covers what it added


STUB_REFUSED = {"read_model", "read_shouted"}
"""Tools whose output schema requires more than `kind`: a matching tag gets the full answer."""


def assert_tag_matched(reply: Any, tag: str, *, refused: bool) -> None:
    """The tag matched: a not-modified reply, or, where the schema refuses the stub, the full answer under it."""
    if refused:
        block = block_of(reply)
        assert block is not None
        assert not block.not_modified
        assert block.etag == tag
        assert reply.content
    else:
        assert is_not_modified(reply)


class Doc(TypedDict, total=False):
    kind: Required[str]
    text: str


class Shouted(TypedDict):
    kind: str
    text: Annotated[str, PlainSerializer(lambda v: v.upper())]


class Untyped(TypedDict, total=False):
    text: str


def build_typed_server(state: dict[str, Any]) -> FastMCP:
    server = FastMCP("typed")

    @server.tool
    def read_doc(key: str) -> Doc:
        return {"kind": "doc", "text": state["value"]["text"]}

    @server.tool
    def read_shouted(key: str) -> Shouted:
        return {"kind": "doc", "text": state["value"]["text"]}

    @server.tool
    def read_untyped(key: str) -> Untyped:
        return {"kind": "doc", "text": state["value"]["text"]}  # type: ignore[typeddict-unknown-key]

    install(server, ToolPolicies({name: CachePolicy() for name in ("read_doc", "read_shouted", "read_untyped")}))
    return server


async def test_a_plain_typed_dict_uses_the_raw_path(state: dict[str, Any], conversions: Spy) -> None:
    server = build_typed_server(state)
    tool = await server.get_tool("read_doc")
    domain = raw_tag_domain(tool)
    assert domain is not None
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "read_doc", {"key": "k"})
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag == raw_tag(domain, {"kind": "doc", "text": "first"})
        assert tag == await served_tag(server, "read_doc", first)
        before = conversions.calls
        reply = await call_conditional(client, "read_doc", {"key": "k"}, tag)
        assert is_not_modified(reply)
        assert reply.structured_content == {"kind": "doc"}
        assert conversions.calls == before
        state["value"] = {"kind": "doc", "text": "second"}
        changed = await call_conditional(client, "read_doc", {"key": "k"}, tag)
        assert changed.structured_content == {"kind": "doc", "text": "second"}
        assert block_of(changed).etag not in (None, tag)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "tool",
    [
        "read_shouted",  # a serializer of its own: the schema cannot name the conversion
        "read_untyped",  # a `kind` the TypedDict does not declare is not sent, so it cannot name the reply
    ],
)
async def test_typed_dicts_the_schema_cannot_name_fall_back(state: dict[str, Any], conversions: Spy, tool: str) -> None:
    server = build_typed_server(state)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, tool, {"key": "k"})
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag == tag_of(first)
        assert_tag_matched(await call_conditional(client, tool, {"key": "k"}, tag), tag, refused=tool in STUB_REFUSED)
        assert conversions.calls == 2


def test_a_typed_dicts_name_is_its_schema() -> None:
    from mcpcache.server.fastmcp.raw_tags import _annotation_name, _typed_dict_name

    class Wider(TypedDict, total=False):
        kind: Required[str]
        text: str
        more: int

    name = _annotation_name(Doc)
    _typed_dict_name.cache_clear()
    assert _annotation_name(Doc) == name  # nothing of the process (ids, addresses) in it
    assert _annotation_name(Wider) not in (None, name)
    assert _annotation_name(Shouted) is None


# --- the domain ---------------------------------------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)
DOMAIN = raw_domain(tool="t", framework="fastmcp", frameworkVersion="x", outputSchema=None)


@settings(max_examples=300)
@given(JSON, JSON)
def test_different_return_values_never_share_a_raw_tag(a: Any, b: Any) -> None:
    if exact_json(a) != exact_json(b):
        assert raw_tag(DOMAIN, a) != raw_tag(DOMAIN, b)


@settings(max_examples=200)
@given(JSON)
def test_a_raw_tag_never_equals_a_content_tag(value: Any) -> None:
    tag = raw_tag(DOMAIN, value)
    assert tag != content_tag([], value if isinstance(value, dict) else None)
    assert tag != content_tag([{"type": "text", "text": exact_json(value).decode()}], None)


@settings(max_examples=200)
@given(JSON, st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8))
def test_tool_names_and_output_schemas_are_in_the_domain(value: Any, one: str, two: str) -> None:
    if one == two:
        return
    by_name = [raw_domain(tool=name, framework="fastmcp", outputSchema=None) for name in (one, two)]
    assert raw_tag(by_name[0], value) != raw_tag(by_name[1], value)
    by_schema = [raw_domain(tool="t", framework="fastmcp", outputSchema={"title": t}) for t in (one, two)]
    assert raw_tag(by_schema[0], value) != raw_tag(by_schema[1], value)
    assert by_name[0].startswith(RAW_DOMAIN.encode() + b"\x00")


def test_key_order_is_part_of_the_raw_form() -> None:
    """FastMCP sends keys in their order, so two orders are two answers."""
    assert raw_tag(DOMAIN, {"a": 1, "b": 2}) != raw_tag(DOMAIN, {"b": 2, "a": 1})
    assert raw_tag(DOMAIN, 1) != raw_tag(DOMAIN, 1.0)


@pytest.mark.parametrize("value", [(1, 2), {1: "a"}, float("nan"), 2**64, Point(x=1), b"x", {"a": Pair(a=1)}])
def test_values_without_an_exact_json_form_are_refused(value: Any) -> None:
    from mcpcache.canonical import CanonicalizationError

    with pytest.raises(CanonicalizationError):
        raw_tag(DOMAIN, value)


# --- over streamable HTTP -----------------------------------------------------------------------------

SERVE = """
import sys
sys.path.insert(0, {tests!r})
from server.test_raw_tags import build_server
build_server({{"value": {{"kind": "doc", "text": "http"}}, "meta": "m"}}).run(
    transport="http", host="127.0.0.1", port=int(sys.argv[1]), show_banner=False)
"""


@pytest.mark.slow
async def test_over_streamable_http(tmp_path: Any) -> None:
    from support.transports import http_servers

    script = tmp_path / "serve_raw.py"
    script.write_text(SERVE.format(tests=str(__import__("pathlib").Path(__file__).parents[1])))
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log, http_servers([[sys.executable, str(script)]], log=log) as urls:
        reference = build_server({"value": {"kind": "doc", "text": "http"}, "meta": "m"})
        async with stock_client("mcp", ServerTarget.http("fastmcp", urls[0]), MODERN) as client:
            first = await call_stock(client, "read", {"key": "k"})
            tag = block_of(first).etag  # type: ignore[union-attr]
            assert tag == await served_tag(reference, "read", first)
            reply = await call_conditional(client, "read", {"key": "k"}, tag)
            assert is_not_modified(reply)
            assert META_KEY in (reply.meta or {})


# --- the two ways to the same bytes -------------------------------------------------------------------
# A call that sends no tag is tagged from the JSON FastMCP wrote into the text block; a conditional call
# hashes the return value's own JSON. They name one version only if the bytes agree.


def _converted_text(tool: Tool, value: Any) -> str:
    result = tool.convert_result(value)
    assert len(result.content) == 1
    return result.content[0].text  # type: ignore[union-attr,no-any-return]


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(max_size=5), JSON, max_size=4), JSON)
def test_fastmcp_writes_an_exact_value_as_orjson_does(document: dict[str, Any], items: Any) -> None:
    def as_dict() -> dict[str, Any]:
        return document

    def as_list() -> list[Any]:
        return [items]

    for tool, value in ((Tool.from_function(as_dict), document), (Tool.from_function(as_list), [items])):
        assert _converted_text(tool, value).encode() == exact_json(value)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(max_size=5), JSON, max_size=4))
def test_orjson_writes_the_converted_object_as_fastmcp_wrote_its_text(document: dict[str, Any]) -> None:
    """A full read whose text is not ASCII hashes orjson's JSON of the structured object FastMCP built
    (encoding the text would cost more): the two must be the same bytes."""

    def as_dict() -> dict[str, Any]:
        return document

    result = Tool.from_function(as_dict).convert_result(document)
    assert orjson.dumps(result.structured_content) == _converted_text(Tool.from_function(as_dict), document).encode()


TRICKY: list[Any] = [
    {"f": [0.1, 1e16, 1e-7, -0.0, 5e-324, 1.7976931348623157e308, 123456789012345680.0]},
    {"s": '\u2028\x00\x1f\x7f"\\/é😀', "é": {"": []}},
    {"i": [2**64 - 1, -(2**63), 0, True, False, None]},
    {"nested": [[[{}]], [], {"a": {"b": [1, "2", 3.0]}}]},
]


@pytest.mark.parametrize("value", TRICKY, ids=["floats", "strings", "integers", "nesting"])
async def test_a_full_read_and_a_conditional_call_name_one_version(
    state: dict[str, Any], conversions: Spy, value: Any
) -> None:
    """Over a real server: the tag a plain call got (from the text) matches on the raw path."""
    state["value"] = value
    server = build_server(state)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "read", {"key": "k"})
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag == raw_tag(raw_tag_domain(await server.get_tool("read")), value)  # type: ignore[arg-type]
        reply = await call_conditional(client, "read", {"key": "k"}, tag)
        assert is_not_modified(reply)
        assert conversions.calls == 1  # the match needed no conversion


async def test_a_value_that_is_neither_exact_nor_ascii_is_tagged_from_its_text(
    state: dict[str, Any], conversions: Spy
) -> None:
    state["value"] = {"kind": "doc", "pair": ("é", 1)}  # a tuple: the value itself cannot be hashed
    server = build_server(state)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "read", {"key": "k"})
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag == raw_tag(raw_tag_domain(await server.get_tool("read")), {"kind": "doc", "pair": ["é", 1]})  # type: ignore[arg-type]
        assert is_not_modified(await call_conditional(client, "read", {"key": "k"}, tag))
        assert conversions.calls == 2
        state["value"] = {"kind": "doc", "pair": ("è", 1)}
        changed = await call_conditional(client, "read", {"key": "k"}, tag)
        assert changed.structured_content == {"kind": "doc", "pair": ["è", 1]}


async def test_a_wrapped_list_is_tagged_from_its_text_and_matches_without_conversion(conversions: Spy) -> None:
    server = FastMCP("wrapped")
    rows: list[Any] = [{"a": 1}, "b", 2.5]

    wrapped = {"type": "object", "properties": {"result": {"type": "array"}}, "x-fastmcp-wrap-result": True}

    @server.tool(output_schema=wrapped)
    def read_rows(key: str) -> list[Any]:
        return list(rows)

    policies = ToolPolicies()
    policies.declare("read_rows", CachePolicy())
    install(server, policies)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "read_rows", {"key": "k"})
        assert first.structured_content == {"result": rows}
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag == raw_tag(raw_tag_domain(await server.get_tool("read_rows")), rows)  # type: ignore[arg-type]
        assert is_not_modified(await call_conditional(client, "read_rows", {"key": "k"}, tag))
        assert conversions.calls == 1


@pytest.mark.parametrize(("before", "after"), [("1", 1), ("[]", []), ("null", None), ("{}", {})])
async def test_a_string_and_the_value_it_spells_never_share_a_tag(before: Any, after: Any) -> None:
    """FastMCP writes a string as itself, so its text alone would not tell "1" from 1."""
    box: dict[str, Any] = {"value": before}
    server = FastMCP("spelled")

    @server.tool(output_schema=None)
    def read_any(key: str) -> Any:
        return box["value"]

    policies = ToolPolicies()
    policies.declare("read_any", CachePolicy())
    install(server, policies)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "read_any", {"key": "k"})
        tag = block_of(first).etag  # type: ignore[union-attr]
        box["value"] = after
        second = await call_stock(client, "read_any", {"key": "k"})
        assert block_of(second) is None or block_of(second).etag != tag  # type: ignore[union-attr]
        again = await call_conditional(client, "read_any", {"key": "k"}, tag)
        assert not is_not_modified(again)
        assert wire(again) == wire(second)


TEXTS = {
    "ascii": "plain text",
    "latin-1": "caf\u00e9 \u00d7 na\u00efve",
    "greek and cjk": "\u03b1\u03b2\u03b3 \u65e5\u672c\u8a9e",
    "beyond the bmp": "emoji \U0001f600 and \U00010348",
}


@pytest.mark.parametrize("text", TEXTS.values(), ids=TEXTS.keys())
async def test_a_full_read_tags_the_converted_json_without_serialising_the_value_again(
    state: dict[str, Any], conversions: Spy, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """ASCII or not, a plain call's tag comes from what FastMCP built (its text, or its object written
    by orjson), never from a second walk and serialisation of the return value, and it is the tag a
    conditional call computes from that value."""
    from mcpcache.server.fastmcp import raw_tags

    raw_serialisations = Spy()
    original = raw_tags.raw_tag_leaves

    def counting(domain: bytes, value: Any, *, walked: bool = False) -> Any:
        # `walked`: FastMCP's own object, parsed from the JSON it wrote, is hashed (no walk of the value).
        raw_serialisations.calls += not walked
        return original(domain, value, walked=walked)

    monkeypatch.setattr(raw_tags, "raw_tag_leaves", counting)
    state["value"] = {"kind": "doc", "text": text, "lines": [text] * 3, "n": 1.5}
    server = build_server(state)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "read", {"key": "k"})
        assert raw_serialisations.calls == 0
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag == raw_tag(raw_tag_domain(await server.get_tool("read")), state["value"])  # type: ignore[arg-type]
        reply = await call_conditional(client, "read", {"key": "k"}, tag)
        assert is_not_modified(reply)
        assert conversions.calls == 1  # the match needed no conversion
        assert raw_serialisations.calls == 1


async def test_an_integer_beyond_64_bits_in_a_non_ascii_answer_is_tagged_from_its_text(
    state: dict[str, Any], conversions: Spy
) -> None:
    """orjson cannot write it, so the text FastMCP wrote is encoded; both calls name one version."""
    state["value"] = {"kind": "doc", "text": "caf\u00e9", "big": 2**70}
    server = build_server(state)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "read", {"key": "k"})
        tag = block_of(first).etag  # type: ignore[union-attr]
        text = first.content[0].text  # type: ignore[union-attr]
        assert tag == raw_json_tag(raw_tag_domain(await server.get_tool("read")), text.encode())  # type: ignore[arg-type]
        assert is_not_modified(await call_conditional(client, "read", {"key": "k"}, tag))
        state["value"] = {"kind": "doc", "text": "caf\u00e9", "big": 2**70 + 1}
        changed = await call_conditional(client, "read", {"key": "k"}, tag)
        assert changed.structured_content == {"kind": "doc", "text": "caf\u00e9", "big": 2**70 + 1}
