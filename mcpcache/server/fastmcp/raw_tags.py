"""Raw-value tags: a declared FastMCP tool tags its return value before FastMCP converts it.

FastMCP turns a tool's return value into content blocks and structured content in `Tool.convert_result`,
called by `FunctionTool.run` right after the body; the middleware only ever sees its output.
`RawTagTransform` hands FastMCP, for declared plain function tools only, a copy of the tool
(`RawTaggedTool`) whose `convert_result` first hashes the raw value in the domain `mcpcache/raw/v1` and,
when the request's tag matches, returns the not-modified reply without converting anything. The
middleware hands each call's tagging down through `HANDOFF` (docs/protocol.md section 2.1; the package
docstring says why a transform).
"""

from __future__ import annotations

import functools
import inspect
from contextvars import ContextVar
from importlib.metadata import version as package_version
from typing import Any

import mcp_types as mt
import pydantic_core
import xxhash
from fastmcp.server.transforms import GetToolNext, Transform
from fastmcp.tools.base import Tool, ToolResult
from fastmcp.tools.function_tool import FunctionTool
from fastmcp.utilities.prefab import is_prefab_app, is_prefab_component
from fastmcp.utilities.versions import VersionSpec
from pydantic import TypeAdapter
from typing_extensions import is_typeddict

from mcpcache.canonical import CanonicalizationError, canonical_json
from mcpcache.etag import content_tag_sized, raw_domain, raw_json_tag
from mcpcache.server.decisions import Answer, BelowTagging, RawPending
from mcpcache.server.fastmcp.answers import READDRESSED, readdressed_above_middleware
from mcpcache.server.fastmcp.declarations import ToolDeclarations
from mcpcache.server.policies import ToolPolicies
from mcpcache.server.raw_deltas import RawLeaves, raw_tag_leaves

__all__ = ["HANDOFF", "Handoff", "RawTagTransform", "raw_tag_domain", "raw_tagged", "raw_tagged_class"]


@functools.cache
def _fastmcp_version() -> str:
    # Read on first use: importlib.metadata costs about ten milliseconds at import time.
    return package_version("fastmcp")


_WRAP_KEY = "x-fastmcp-wrap-result"
_WRAPPED_META = {"fastmcp": {"wrap_result": True}}  # what FastMCP puts on every wrapped answer

# Return annotations whose pydantic serializer writes a value of exact JSON types unchanged (FastMCP reads
# a string annotation, an unannotated return and `Any` alike). A scalar annotation only with a value of
# exactly that type: an int under `float` may be written either way.
_ANY_JSON: dict[Any, str] = {
    inspect.Signature.empty: "unannotated",
    Any: "Any",
    dict: "dict",
    list: "list",
    dict[str, Any]: "dict[str, Any]",
    list[Any]: "list[Any]",
}
_SCALARS: dict[Any, type] = {str: str, int: int, float: float, bool: bool}


# Raw-value tags ------------------------------------------------------------------------------------


class Handoff:
    """What the middleware hands the tool for one call (through `HANDOFF`); used once."""

    # A plain class: a dataclass costs about a millisecond at import, and this one needs none of it.
    __slots__ = ("tagging", "used")

    def __init__(self, tagging: BelowTagging) -> None:
        self.tagging = tagging
        self.used = False


HANDOFF: ContextVar[Handoff | None] = ContextVar("mcpcache_fastmcp_below", default=None)


def _annotation_name(annotation: Any) -> str | None:
    if isinstance(annotation, str):
        return "unannotated"  # FastMCP serialises under Any
    if annotation is None:
        return "None"
    if is_typeddict(annotation):
        return _typed_dict_name(annotation)
    try:
        return _ANY_JSON.get(annotation) or (annotation.__name__ if annotation in _SCALARS else None)
    except TypeError:  # an unhashable annotation
        return None


# Core-schema node types whose serializer is fully described by the schema itself: no user function,
# no class with its own serialisation. A TypedDict built only from these converts a given exact JSON value
# the same way wherever the schema is the same, so the schema can stand in the domain for the annotation.
_PLAIN_SCHEMA_TYPES = frozenset(
    {
        "typed-dict", "typed-dict-field", "str", "int", "float", "bool", "none", "nullable", "list", "dict",
        "any", "literal", "definitions", "definition-ref",
    }
)  # fmt: skip
# Keys that describe validation only, or name a Python object: left out of the fingerprint.
_UNSERIALISED_KEYS = frozenset({"cls", "ref", "metadata", "schema_ref"})


@functools.lru_cache(maxsize=256)
def _typed_dict_name(annotation: Any) -> str | None:
    """`typed-dict <xxh3 of its plain core schema>`, or None when anything in it serialises in its own way."""
    try:
        schema = TypeAdapter(annotation).core_schema
    except Exception:
        return None
    plain = _plain_schema(schema)
    if plain is None:
        return None
    return f"typed-dict {xxhash.xxh3_64_hexdigest(canonical_json(plain))}"


def _declared_keys(annotation: Any) -> frozenset[str]:
    return frozenset(annotation.__required_keys__) | frozenset(annotation.__optional_keys__)


def _plain_schema(node: Any) -> Any:
    """`node` without its validation-only and Python-object keys, or None if it is not plain."""
    if isinstance(node, list):
        items = [_plain_schema(item) for item in node]
        return None if any(item is None for item in items) else items
    if not isinstance(node, dict):
        return node if node is None or isinstance(node, str | int | float | bool) else None
    if "type" in node and node["type"] not in _PLAIN_SCHEMA_TYPES:
        return None
    if node.get("serialization") is not None or node.get("computed_fields"):
        return None
    if node.get("type") == "typed-dict" and node.get("extra_behavior", "ignore") != "ignore":
        return None
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _UNSERIALISED_KEYS:
            continue
        plain = _plain_schema(value)
        if plain is None and value is not None:
            return None
        out[key] = plain
    return out


def raw_tag_domain(tool: Tool) -> bytes | None:
    """The domain prefix of `tool`'s raw-value tags, or None when its conversion cannot be named.

    Everything that decides how FastMCP turns a raw value into the answer as sent: the tool name, the
    framework and its version, the serializer (pydantic-core) and its version, the return annotation
    FastMCP serialises under, and the output schema (which decides structured content and its wrapping).
    """
    annotation = _annotation_name(tool.return_type)
    if annotation is None:
        return None
    try:
        return raw_domain(
            tool=tool.name,
            framework="fastmcp",
            frameworkVersion=_fastmcp_version(),
            serializer=f"pydantic-core {pydantic_core.__version__}",
            returnAnnotation=annotation,
            outputSchema=tool.output_schema,
        )
    except CanonicalizationError:
        return None


def _sent_structured(tool: Tool, annotation: Any, value: Any) -> tuple[bool, Any]:
    """(the raw path applies, the structuredContent FastMCP would send) for an exact JSON `value`."""
    if annotation is None:
        if value is not None:
            return False, None
    elif is_typeddict(annotation):
        # Keys it does not declare are not sent, so a `kind` among them must not name the reply's kind.
        if type(value) is dict and "kind" in value and "kind" not in _declared_keys(annotation):
            return False, None
    elif not isinstance(annotation, str) and annotation in _SCALARS and type(value) is not _SCALARS[annotation]:
        return False, None
    schema = tool.output_schema
    if schema is None:
        return True, value if type(value) is dict else None
    if schema.get(_WRAP_KEY):
        return True, {"result": value}
    if type(value) is dict and schema.get("type") == "object":
        return True, value
    return False, None  # a schema FastMCP may reject or mark; let it


def _raw_tagged_result(tool: FunctionTool, raw_value: Any) -> ToolResult:
    """`RawTaggedTool.convert_result`: tag the raw value, and answer not-modified on a match."""
    handoff = HANDOFF.get()
    if handoff is None or handoff.used or handoff.tagging.tool != tool.name:
        return FunctionTool.convert_result(tool, raw_value)
    handoff.used = True
    tagging = handoff.tagging
    if isinstance(raw_value, ToolResult):
        # Built by the tool itself: nothing is left to convert; its tag is the answer's (its _meta in).
        if readdressed_above_middleware(raw_value.structured_content):
            tagging.reason = READDRESSED
            return raw_value
        try:
            tag, size = content_tag_sized(raw_value.content, raw_value.structured_content, raw_value.meta)
        except CanonicalizationError:
            tagging.reason = "the tool's ToolResult has no canonical form"
            return raw_value
        reply = tagging.decide(tag, raw_value.structured_content, is_error=raw_value.is_error, size=size)
        tagging.measure(Answer(raw_value.content, raw_value.structured_content, raw_value.is_error, raw_value.meta))
    else:
        domain = raw_tag_domain(tool)
        applies, structured = _sent_structured(tool, tool.return_type, raw_value)
        if domain is None or not applies:
            tagging.reason = "the conversion of this return value cannot be named; the answer is hashed"
            return FunctionTool.convert_result(tool, raw_value)
        if readdressed_above_middleware(structured):
            tagging.reason = READDRESSED
            return FunctionTool.convert_result(tool, raw_value)
        if tagging.requested is None:
            return _converted_then_tagged(tool, tagging, domain, raw_value)
        try:
            tag, size, leaves = raw_tag_leaves(domain, raw_value)
        except CanonicalizationError:
            # Not exact (a dataclass, a tuple): what FastMCP makes of it may still be, so tag that.
            return _converted_then_tagged(tool, tagging, domain, raw_value)
        reply = tagging.decide(tag, structured, size=size)
        tagging.raw_leaves, tagging.raw_domain = leaves, domain
        if reply is None and leaves is not None and tagging.raw_deltas and not _wraps(tool):
            conversion = _conversion_of(tool)
            if conversion is not None:
                # Left unconverted: the driver sends the change, or converts it (beside its loop when large).
                convert = functools.partial(_converted_marked, tool, tagging, raw_value)
                tagging.raw_pending = RawPending(tag, raw_value, leaves, domain, conversion, convert)
                return ToolResult(content=[])
        if reply is not None and structured is raw_value and _annotation_name(tool.return_type) in _SERIALISED_AS_ANY:
            # FastMCP would have written the dict as its JSON twice (text and structured content): measured
            # from that JSON, once per version (a second serialisation only to count bytes is not cheap).
            tagging.measure_text_json(raw_value)
    if reply is not None:
        return ToolResult(content=[], structured_content=reply.structured_content, meta=reply.meta)
    if isinstance(raw_value, ToolResult):
        return raw_value
    return _converted(tool, tagging, raw_value)


def _converted(tool: FunctionTool, tagging: BelowTagging, raw_value: Any) -> ToolResult:
    """FastMCP's conversion of a raw value, noting for the answer history when the one text block it
    wrote is the JSON of the structured content: FastMCP writes that text from the structured value
    itself (`_convert_to_content(structured)`), so the history need not keep the same data twice. Only
    then, and for a return value FastMCP converts in parts (`_conversion_of`), may the hashes of the value's
    parts (`BelowTagging.raw_leaves`) serve deltas computed from the next value's change."""
    result = FunctionTool.convert_result(tool, raw_value)
    built = isinstance(raw_value, ToolResult | mt.CallToolResult)
    if built or is_prefab_app(raw_value) or is_prefab_component(raw_value):
        tagging.raw_leaves = None
        return result  # built by the tool, or a Prefab app (whose text is a placeholder): no such promise
    wrapped = bool((tool.output_schema or {}).get(_WRAP_KEY))
    written = _value_json(result, wrapped=wrapped)
    if written is not None and written[0].startswith("{"):
        tagging.structured_in_text = "wrapped" if wrapped else "plain"
    if tagging.structured_in_text != "plain" or type(raw_value) is not dict or _conversion_of(tool) is None:
        tagging.raw_leaves = None
    return result


def _wraps(tool: FunctionTool) -> bool:
    return bool((tool.output_schema or {}).get(_WRAP_KEY))


def _converted_marked(tool: FunctionTool, tagging: BelowTagging, raw_value: Any) -> ToolResult:
    """What `FunctionTool.run` and `Tool._run` would have returned for `raw_value`, converted later."""
    return tool._mark_non_object_result(_converted(tool, tagging, raw_value))


class _InParts:
    """FastMCP's conversion of a return value, applied to parts of it (`mcpcache.server.raw_deltas`):
    `_serialize_to_jsonable` under the tool's return annotation, and `default_serializer` for the JSON of
    the text block. Under an annotation `_annotation_name` names (any JSON, or a TypedDict with no
    serializer of its own) the serializer converts each member and each array element on its own, so
    converting a skeleton of the changed members gives the parts of the whole conversion."""

    __slots__ = ("annotation", "serialize", "write")

    def __init__(self, annotation: Any, serialize: Any, write: Any) -> None:
        self.annotation = annotation
        self.serialize = serialize
        self.write = write

    def structured(self, skeleton: dict[str, Any]) -> Any:
        return self.serialize(skeleton, self.annotation)

    def text(self, value: Any) -> str:
        written = self.write(value)
        assert isinstance(written, str)
        return written


def _conversion_of(tool: FunctionTool) -> _InParts | None:
    """The conversion in parts for `tool`, or None (an annotation whose conversion is not named, or a
    FastMCP without the functions it is made of)."""
    name = _annotation_name(tool.return_type)
    if name is None or name in ("str", "int", "float", "bool", "None"):
        return None
    try:
        from fastmcp.tools.base import _serialize_to_jsonable, default_serializer
    except ImportError:
        return None
    return _InParts(tool.return_type, _serialize_to_jsonable, default_serializer)


# Return annotations FastMCP serialises a dict under by inference alone: an exact dict comes out as it
# went in. (A TypedDict drops undeclared keys and writes an int in a float field as 1.0, so the JSON of
# what it sends is not the JSON of an exact value that a conditional call hashes.)
_SERIALISED_AS_ANY = frozenset({"unannotated", "Any", "dict", "dict[str, Any]"})


def _converted_then_tagged(tool: FunctionTool, tagging: BelowTagging, domain: bytes, raw_value: Any) -> ToolResult:
    """Convert, then tag: the JSON FastMCP wrote into the text block, or else the return value's own.

    Used when a call sent no tag (nothing can match, so converting first costs nothing, and it spares a
    second serialisation of the value and the walk over it) and when the return value is not exact.

    The text is used only for a dict returned under an annotation FastMCP serialises by inference: then
    the text block is the JSON of the structured value E, which parses back to E, and the whole answer
    is built from E. A conditional call hashes an exact value V itself; under such an annotation the
    answer to V is built from V, so equal bytes (E = V) still mean an identical answer, and orjson writes
    V as FastMCP writes E, so both calls name one version with one tag (docs/protocol.md section 2.1).
    A list may hold content blocks FastMCP sends as they are, and a TypedDict changes what it sends, so
    neither takes the text.
    """
    result = _converted(tool, tagging, raw_value)
    tagging.converted = True
    written = None
    if type(raw_value) is dict and _annotation_name(tool.return_type) in _SERIALISED_AS_ANY:
        written = _value_json(result, wrapped=bool((tool.output_schema or {}).get(_WRAP_KEY)))
    keep = tagging.structured_in_text == "plain" and type(raw_value) is dict and _conversion_of(tool) is not None
    leaves = None
    if written is not None:
        tag, size, leaves = _written_tag(domain, *written)
    else:
        try:
            tag, size, leaves = raw_tag_leaves(domain, raw_value)
        except CanonicalizationError as exc:
            tagging.reason = f"the return value has no exact JSON form ({exc}); the answer is hashed"
            return result
    if keep:
        tagging.raw_leaves, tagging.raw_domain = leaves, domain
    reply = tagging.decide(tag, result.structured_content, size=size)
    if reply is not None:
        tagging.measure(Answer(result.content, result.structured_content, result.is_error, result.meta))
        return ToolResult(content=[], structured_content=reply.structured_content, meta=reply.meta)
    return result


def _value_json(result: ToolResult, *, wrapped: bool) -> tuple[str, dict[str, Any]] | None:
    """(the text block, the structured object it is the JSON of) of FastMCP's conversion of a returned
    dict, or None (a block or `_meta` of another shape: the raw value's own JSON is used)."""
    structured = result.structured_content
    if result.is_error or type(structured) is not dict or len(result.content) != 1:
        return None
    if result.meta is not None and not (wrapped and result.meta == _WRAPPED_META):
        return None
    block = result.content[0]
    if type(block) is not mt.TextContent or block.annotations is not None or block.meta is not None:
        return None
    value = structured.get("result") if wrapped else structured
    if wrapped and len(structured) != 1:
        return None
    return (block.text, value) if type(value) is dict else None


def _written_tag(domain: bytes, text: str, value: dict[str, Any]) -> tuple[str, int, RawLeaves | None]:
    """The tag in `domain` of `text`, which FastMCP wrote as the JSON of `value`, and its length.

    Hashed from `value`, written by orjson piece by piece (`parsed_raw_tag_sized`): FastMCP parsed it from
    JSON, so it holds only exact JSON types and needs no walk to prove it, and orjson writes such a value
    as FastMCP wrote the text (pinned by a test). Cheaper than the text itself, which would have to be
    encoded to UTF-8 first (a multi-megabyte copy, and CPython's per-character encoder for any text that
    is not ASCII: about 4 ms for a 5 MB notebook with a handful of non-ASCII characters).
    """
    try:
        return raw_tag_leaves(domain, value, walked=True)
    except CanonicalizationError:  # an integer beyond 64 bits, which only the text can spell
        data = text.encode()
        return raw_json_tag(domain, data), len(data), None


@functools.cache
def raw_tagged_class() -> type[FunctionTool]:
    # Made on first use: subclassing a pydantic model builds its schema, which would cost every importer
    # of this module a few milliseconds whether or not a tool is ever tagged raw.
    class RawTaggedTool(FunctionTool):
        """A declared function tool whose return value is tagged before FastMCP converts it."""

        def convert_result(self, raw_value: Any) -> ToolResult:
            return _raw_tagged_result(self, raw_value)

    RawTaggedTool.__module__ = "mcpcache.server.fastmcp"  # where users name it
    return RawTaggedTool


def raw_tagged(tool: FunctionTool) -> FunctionTool:
    """A copy of `tool` (fields and private state, as `model_copy` makes one) as a `RawTaggedTool`."""
    kind = raw_tagged_class()
    copy = kind.__new__(kind)
    object.__setattr__(copy, "__dict__", dict(tool.__dict__))
    object.__setattr__(copy, "__pydantic_fields_set__", set(tool.__pydantic_fields_set__))
    extra = tool.__pydantic_extra__
    object.__setattr__(copy, "__pydantic_extra__", None if extra is None else dict(extra))
    private = tool.__pydantic_private__
    object.__setattr__(copy, "__pydantic_private__", None if private is None else dict(private))
    return copy


class RawTagTransform(Transform):
    """Hands out declared plain function tools as `RawTaggedTool` copies; lists tools unchanged."""

    def __init__(self, declarations: ToolDeclarations | ToolPolicies) -> None:
        if isinstance(declarations, ToolPolicies):
            declarations = ToolDeclarations(declarations)
        self.declarations = declarations
        self._copies: dict[str, tuple[Tool, FunctionTool]] = {}

    async def get_tool(self, name: str, call_next: GetToolNext, *, version: VersionSpec | None = None) -> Tool | None:
        tool = await call_next(name, version=version)
        if tool is None or type(tool) is not FunctionTool:
            return tool
        policy = self.declarations.for_tool(tool)
        if policy is None or not policy.etag:
            return tool
        cached = self._copies.get(name)
        if cached is not None and cached[0] is tool:
            return cached[1]
        copy = raw_tagged(tool)
        self._copies[name] = (tool, copy)
        return copy
