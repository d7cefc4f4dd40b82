"""FastMCP adapter: a middleware that stamps declared tools and answers not-modified, and a transform
that lets a declared tool tag its raw return value before FastMCP converts it.

Declarations (docs/server.md). A tool declares itself in its own `meta` (`cache_meta`), or by name in a
`ToolPolicies` registry; `ToolDeclarations` resolves which applies to a tool object, including tools
renamed above their declared function and tools of mounted servers, remembers it by name so that a
call costs no extra tool lookup, and warns about names that match no tool. The middleware puts each
declared tool's block in its `tools/list` entry. When a mounted server runs its own middleware, the
layer nearest the tool stamps and the outer one passes its answer through (`_Claim`).

Place it before (outside) `ResponseCachingMiddleware`: the memo then still saves the server's work, and
this middleware still turns a memo hit into a not-modified reply. `install` puts it first in the chain
and advertises the extension. The middleware also looks at where memos sit on every call and stays
correct whatever the order: behind a memo it makes no not-modified replies (the memo would keep one and
serve it to stock clients), and in front of one it does not use validators for the tools the memo
covers (the memo may answer from an older version than the validator names).

Raw-value tags (docs/protocol.md section 2.1). FastMCP turns a tool's return value into content
blocks and structured content in `Tool.convert_result`, called by `FunctionTool.run` right after the
body; for a large dict that conversion (serialise, parse, serialise again) costs several times the tag.
The middleware only ever sees its output. So `install` also adds `RawTagTransform`, a server transform
whose `get_tool` hands FastMCP, for declared plain function tools only, a copy of the tool whose
`convert_result` first hashes the raw value in the domain `mcpcache/raw/v1` (tool name, FastMCP and
pydantic-core versions, return annotation, output schema) and, when the request's tag matches,
returns the not-modified reply without converting anything. The body still runs. Why a transform:
FastMCP's middleware and extension interceptors sit above `convert_result` and see only converted
results; wrapping the tool function would change the signature FastMCP introspects (injected
parameters, argument validation) and see generators before FastMCP materialises them; a transform is
FastMCP's public way of handing out a modified tool, leaves the user's tool object untouched and also
covers tools added after `install`. Its one side effect: FastMCP does not pre-seed its wire-schema
cache (Mcp-Param header checks) while a transform is installed; the first `tools/list` fills it.

The raw path is used only when it is exact: the value is made of exact JSON types, the tool's return
annotation is one whose serializer leaves such values unchanged, nothing between the middleware and
the tool can change the answer (every inner middleware and extension leaves `tools/call` alone; no
response memo), and no validator names the tag. Anything else falls back to the tag of the converted
answer, never to a guess.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import replace
from importlib.metadata import version as package_version
from typing import TYPE_CHECKING, Any, assert_never

from mcpcache.extras import needs

with needs("fastmcp", "mcpcache.server.fastmcp"):
    import fastmcp as _fastmcp  # noqa: F401  # first, so that a missing FastMCP says which extra brings it

import mcp_types as mt
import pydantic_core
import xxhash
from fastmcp.server.extensions import ServerExtension
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.server.providers.aggregate import AggregateProvider
from fastmcp.server.transforms import GetToolNext, Transform
from fastmcp.tools.base import Tool, ToolResult
from fastmcp.tools.function_tool import FunctionTool
from fastmcp.utilities.versions import VersionSpec
from pydantic import TypeAdapter
from typing_extensions import is_typeddict

from mcpcache.etag import (
    CanonicalizationError,
    canonical_json,
    content_tag_sized,
    raw_domain,
    raw_json_tag,
    raw_tag_sized,
)
from mcpcache.protocol import EXTENSION_ID, META_KEY, extension_settings, with_block
from mcpcache.server.core import (
    Answer,
    BelowTagging,
    NotAnAnswer,
    NotModified,
    PassThrough,
    Revalidator,
    ServerStats,
    Stamped,
)
from mcpcache.server.policies import CachePolicy, DeclarationError, ToolPolicies, Validator, policy_from_block

if TYPE_CHECKING:
    from fastmcp import FastMCP

__all__ = [
    "RawTagTransform",
    "RevalidationCapability",
    "RevalidationMiddleware",
    "ToolDeclarations",
    "install",
    "raw_tag_domain",
]

logger = logging.getLogger("mcpcache.server")


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


_MEMO_MODULE = "fastmcp.server.middleware.caching"


def _memo_covers(memo: Middleware, tool: str) -> bool:
    # FastMCP's memo is looked up in sys.modules instead of imported: importing it pulls in its storage
    # backends (about 440 modules, a quarter of a second), and if the module was never imported, no
    # middleware in the chain can be one of its instances.
    caching = sys.modules.get(_MEMO_MODULE)
    if caching is None or not isinstance(memo, caching.ResponseCachingMiddleware):
        return False
    try:
        settings = memo._call_tool_settings
        return settings.get("enabled") is not False and memo._matches_tool_cache_settings(tool_name=tool)
    except AttributeError:
        # Its settings moved in some FastMCP release: assume it covers the tool, the safe reading.
        return True


def memos_around(chain: list[Middleware], me: Middleware, tool: str) -> tuple[bool, bool]:
    """(a memo covering `tool` sits inside `me`, one sits outside `me`) in a middleware chain."""
    try:
        position = next(i for i, mw in enumerate(chain) if mw is me)
    except StopIteration:
        return False, False
    inside = any(_memo_covers(mw, tool) for mw in chain[position + 1 :])
    outside = any(_memo_covers(mw, tool) for mw in chain[:position])
    return inside, outside


def _readdressed_above_middleware(structured_content: Any) -> bool:
    """Whether FastMCP will rewrite this answer's tool references after every middleware has run.

    `FastMCP.call_tool` re-addresses a Prefab payload's `toolCall` references to the names of the
    server's current tool listing, above the middleware chain: the same body can then be sent as two
    answers, so no tag made below can name it.
    """
    from fastmcp.server.providers.prefab_payload import payload_has_identities

    return bool(payload_has_identities(structured_content))


_READDRESSED = "FastMCP re-addresses this answer's tool references after mcpcache runs (Prefab): sent untagged"


def read_tool_answer(result: ToolResult) -> Answer | NotAnAnswer:
    """What mcpcache may tag in a FastMCP tool result, or why it must be sent as it is."""
    if getattr(result, "input_required", None) is not None:
        return NotAnAnswer("not a tool answer (input required)")
    if _readdressed_above_middleware(result.structured_content):
        return NotAnAnswer(_READDRESSED)
    return Answer(
        content=result.content,
        structured_content=result.structured_content,
        is_error=result.is_error,
        meta=result.meta,  # what the tool and FastMCP put there; the tag covers it
    )


# Raw-value tags ------------------------------------------------------------------------------------


class _Handoff:
    """What the middleware hands the tool for one call (through `_BELOW`); used once."""

    # A plain class: a dataclass costs about a millisecond at import, and this one needs none of it.
    __slots__ = ("tagging", "used")

    def __init__(self, tagging: BelowTagging) -> None:
        self.tagging = tagging
        self.used = False


_BELOW: ContextVar[_Handoff | None] = ContextVar("mcpcache_fastmcp_below", default=None)


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
    handoff = _BELOW.get()
    if handoff is None or handoff.used or handoff.tagging.tool != tool.name:
        return FunctionTool.convert_result(tool, raw_value)
    handoff.used = True
    tagging = handoff.tagging
    if isinstance(raw_value, ToolResult):
        # Built by the tool itself: nothing is left to convert; its tag is the answer's (its _meta in).
        if _readdressed_above_middleware(raw_value.structured_content):
            tagging.reason = _READDRESSED
            return raw_value
        try:
            tag, size = content_tag_sized(raw_value.content, raw_value.structured_content, raw_value.meta)
        except CanonicalizationError:
            tagging.reason = "the tool's ToolResult has no canonical form"
            return raw_value
        reply = tagging.decide(tag, raw_value.structured_content, is_error=raw_value.is_error, size=size)
    else:
        domain = raw_tag_domain(tool)
        applies, structured = _sent_structured(tool, tool.return_type, raw_value)
        if domain is None or not applies:
            tagging.reason = "the conversion of this return value cannot be named; the answer is hashed"
            return FunctionTool.convert_result(tool, raw_value)
        if _readdressed_above_middleware(structured):
            tagging.reason = _READDRESSED
            return FunctionTool.convert_result(tool, raw_value)
        if tagging.requested is None:
            return _converted_then_tagged(tool, tagging, domain, raw_value)
        try:
            tag, size = raw_tag_sized(domain, raw_value)
        except CanonicalizationError:
            # Not exact (a dataclass, a tuple): what FastMCP makes of it may still be, so tag that.
            return _converted_then_tagged(tool, tagging, domain, raw_value)
        reply = tagging.decide(tag, structured, size=size)
    if reply is not None:
        return ToolResult(content=[], structured_content=reply.structured_content, meta=reply.meta)
    return raw_value if isinstance(raw_value, ToolResult) else FunctionTool.convert_result(tool, raw_value)


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
    result = FunctionTool.convert_result(tool, raw_value)
    tagging.converted = True
    text = None
    if type(raw_value) is dict and _annotation_name(tool.return_type) in _SERIALISED_AS_ANY:
        text = _value_json_text(result, wrapped=bool((tool.output_schema or {}).get(_WRAP_KEY)))
    if text is not None and text.isascii():
        data = text.encode()  # an ASCII str encodes as a copy
        tag, size = raw_json_tag(domain, data), len(data)
    else:
        # Any other text goes through CPython's per-character UTF-8 encoder, slower (7.7 ms at 5 MB) than
        # orjson's walk and serialisation of an exact value (about 6 ms); the text only when it is not exact.
        try:
            tag, size = raw_tag_sized(domain, raw_value)
        except CanonicalizationError as exc:
            if text is None:
                tagging.reason = f"the return value has no exact JSON form ({exc}); the answer is hashed"
                return result
            data = text.encode()
            tag, size = raw_json_tag(domain, data), len(data)
    reply = tagging.decide(tag, result.structured_content, size=size)
    if reply is not None:
        return ToolResult(content=[], structured_content=reply.structured_content, meta=reply.meta)
    return result


def _value_json_text(result: ToolResult, *, wrapped: bool) -> str | None:
    """The text block of FastMCP's conversion of a returned dict when it is the JSON of the structured
    object, else None (a block or `_meta` of another shape: the raw value's own JSON is used)."""
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
    return block.text if type(value) is dict else None


@functools.cache
def _raw_tagged_class() -> type[FunctionTool]:
    # Made on first use: subclassing a pydantic model builds its schema, which would cost every importer
    # of this module a few milliseconds whether or not a tool is ever tagged raw.
    class RawTaggedTool(FunctionTool):
        """A declared function tool whose return value is tagged before FastMCP converts it."""

        def convert_result(self, raw_value: Any) -> ToolResult:
            return _raw_tagged_result(self, raw_value)

    RawTaggedTool.__module__ = __name__
    return RawTaggedTool


def __getattr__(name: str) -> Any:
    if name == "RawTaggedTool":
        return _raw_tagged_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def raw_tagged(tool: FunctionTool) -> FunctionTool:
    """A copy of `tool` (fields and private state, as `model_copy` makes one) as a `RawTaggedTool`."""
    kind = _raw_tagged_class()
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


def _leaves_calls_alone(middleware: Middleware) -> bool:
    kind = type(middleware)
    return all(
        getattr(kind, hook, None) is getattr(Middleware, hook)
        for hook in ("__call__", "on_message", "on_request", "on_call_tool")
    )


def inside_is_transparent(server: FastMCP, me: Middleware) -> bool:
    """Nothing between `me` and the tool can change a `tools/call` answer: every middleware inside `me`
    and every extension leaves `tools/call` to the base class. Unknown layouts read as not transparent."""
    chain = server.middleware
    try:
        position = next(i for i, mw in enumerate(chain) if mw is me)
    except StopIteration:
        return False
    if not all(_leaves_calls_alone(mw) for mw in chain[position + 1 :]):
        return False
    extensions = getattr(server, "_extensions", None)
    if not isinstance(extensions, Mapping):
        return False
    return all(type(ext).intercept_tool_call is ServerExtension.intercept_tool_call for ext in extensions.values())


# Declarations --------------------------------------------------------------------------------------


class _Unresolved:
    """Not known from the name alone: the tool object must be looked up (one instance, `_UNRESOLVED`)."""

    __slots__ = ()


_UNRESOLVED = _Unresolved()
_MAX_NAMES_IN_WARNING = 12


def _functions_of(tool: Tool) -> list[object]:
    """The user functions behind a tool: a function tool's own, and those of the tools a transformed
    tool (a `ToolTransform` rename) was made from."""
    found: list[object] = []
    current: Tool | None = tool
    while current is not None and len(found) < 8:
        fn = getattr(current, "fn", None)
        if fn is not None:
            found.append(fn)
        parent = getattr(current, "parent_tool", None)
        current = parent if isinstance(parent, Tool) else None
    return found


class ToolDeclarations:
    """Which tools of one FastMCP server are cacheable, by the name they are called by.

    A tool is declared, in this order of precedence:
    1. by name, in the `ToolPolicies` registry (`install(mcp, {"read": CachePolicy(...)})`,
       `policies.declare`, `@policies.cacheable(name=...)`);
    2. in its own `meta`, under the cache key (`@mcp.tool(meta=cache_meta(ttl_ms=5000))`); a tool of a
       mounted server carries its meta, and the block its own server lists, under the mounted name;
    3. by its function, when `@policies.cacheable` registered that function under another name (the
       tool was renamed: `@mcp.tool(name="read")` above `@policies.cacheable(...)`).
    `validators` adds a validator, by the name the tool is called by, to whichever declaration applies.

    What is resolved from a tool object is remembered by name, so a call does not look the tool up
    again (a FastMCP lookup costs a few hundred microseconds). The memory is refreshed whenever the
    server lists its tools or hands a tool out for a call.
    """

    def __init__(
        self,
        policies: ToolPolicies | None = None,
        validators: Mapping[str, Validator] | None = None,
        *,
        meta_key: str = META_KEY,
    ) -> None:
        self.policies = policies if policies is not None else ToolPolicies()
        self.validators = dict(validators or {})
        for name, validator in self.validators.items():
            if not callable(validator):
                raise TypeError(f"the validator for {name!r} is not callable")
        self.meta_key = meta_key
        self._resolved: dict[str, CachePolicy | None] = {}
        self._with_validator: dict[str, tuple[CachePolicy, CachePolicy]] = {}
        # The policy read from each tool's meta block, kept with the block it was read from: the same
        # block object comes back on every call, and is parsed once.
        self._parsed: dict[str, tuple[object, CachePolicy | None]] = {}
        self._matched: set[str] = set()
        self._renamed: dict[str, str] = {}  # tool name -> the name its function was declared under
        self._warned: set[str] = set()

    # Resolution

    def lookup(self, name: str) -> CachePolicy | _Unresolved | None:
        """The declaration of the tool called `name`, None when it has none, or `_UNRESOLVED` when that
        can only be told from the tool object (the caller then looks it up and calls `for_tool`)."""
        policy = self.policies.get(name)
        if policy is not None:
            return self._validated(name, policy)
        return self._resolved.get(name, _UNRESOLVED)

    def for_tool(self, tool: Tool) -> CachePolicy | None:
        """The declaration of `tool`, resolved from the tool object and remembered under its name."""
        name = tool.name
        policy = self.policies.get(name)
        if policy is not None:
            self._matched.add(name)
        else:
            policy = self._from_meta(tool)
            if policy is None:
                policy = self._from_function(tool)
        if policy is not None:
            policy = self._validated(name, policy)
        elif name in self.validators:
            self._warn_once(
                f"validator:{name}",
                "tool %r has a validator but no cache declaration; the validator is not used",
                name,
            )
        self._resolved[name] = policy
        return policy

    def _from_meta(self, tool: Tool) -> CachePolicy | None:
        meta = tool.meta
        if not meta or self.meta_key not in meta:
            return None
        block = meta[self.meta_key]
        cached = self._parsed.get(tool.name)
        if cached is not None and cached[0] is block:
            return cached[1]
        policy: CachePolicy | None
        try:
            policy = policy_from_block(block)
        except DeclarationError as exc:
            self._warn_once(
                f"meta:{tool.name}",
                "tool %r: the cache declaration in its meta cannot be read (%s); the tool is not cached",
                tool.name,
                exc,
            )
            policy = None
        self._parsed[tool.name] = (block, policy)
        return policy

    def _from_function(self, tool: Tool) -> CachePolicy | None:
        for fn in _functions_of(tool):
            found = self.policies.for_function(fn)
            if found is not None:
                declared_as, policy = found
                self._matched.add(declared_as)
                if declared_as != tool.name:
                    self._renamed[tool.name] = declared_as
                    logger.debug("tool %r: declared as %r (the same function)", tool.name, declared_as)
                return policy
        # A copy that lost its function (FastMCP's response memo lists plain `Tool`s) keeps the match.
        alias = self._renamed.get(tool.name)
        return self.policies.get(alias) if alias is not None else None

    def _validated(self, name: str, policy: CachePolicy) -> CachePolicy:
        validator = self.validators.get(name)
        if validator is None or policy.validator is validator:
            return policy
        cached = self._with_validator.get(name)
        if cached is not None and cached[0] is policy:
            return cached[1]
        try:
            merged = replace(policy, validator=validator)
        except ValueError as exc:
            self._warn_once(f"validator:{name}", "tool %r: the validator is not used (%s)", name, exc)
            merged = policy
        self._with_validator[name] = (policy, merged)
        return merged

    # Checking

    def check(self, tools: Sequence[Tool], server_name: str) -> None:
        """Warn, once per name, about every declaration and validator that matches none of `tools`."""
        for tool in tools:
            self.for_tool(tool)
        names = sorted({tool.name for tool in tools})
        for declared in self.policies:
            if declared not in self._matched:
                self._warn_unmatched("cache declaration", declared, names, server_name)
        for declared in self.validators:
            if declared not in names:
                self._warn_unmatched("validator", declared, names, server_name)

    def _warn_unmatched(self, what: str, declared: str, names: list[str], server_name: str) -> None:
        import difflib  # only when there is something to warn about

        close = difflib.get_close_matches(declared, names, n=1, cutoff=0.6)
        close += [name for name in names if name.endswith(f"_{declared}") and name not in close]
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listed = ", ".join(names[:_MAX_NAMES_IN_WARNING]) + (", ..." if len(names) > _MAX_NAMES_IN_WARNING else "")
        self._warn_once(
            f"unmatched:{what}:{declared}",
            "%s %r matches no tool of server %r%s (its tools: %s). A tool renamed with @mcp.tool(name=...) "
            "or mounted under a namespace is called by its new name; declare it under that name, or in "
            "the tool's own meta (cache_meta).",
            what,
            declared,
            server_name,
            hint,
            listed or "none",
        )

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)


# Nested layers -------------------------------------------------------------------------------------


class _Claim:
    """Set by a middleware around its call for a declared tool. A mounted server's own mcpcache
    middleware that handles the same call records the result it returns here, and the outer one then
    sends that result as it is: one layer stamps, the one nearest the tool, which knows its validator
    and can tag the raw value. (Without this, the outer layer would hash the inner one's not-modified
    reply as if it were an answer.)"""

    __slots__ = ("inner_result",)

    def __init__(self) -> None:
        self.inner_result: object = None


_CLAIM: ContextVar[_Claim | None] = ContextVar("mcpcache_fastmcp_claim", default=None)


# The middleware ------------------------------------------------------------------------------------


class RevalidationMiddleware(Middleware):
    """Stamps `_meta[META_KEY]` on the answers of declared tools; answers not-modified to matching tags;
    puts each declared tool's declaration block in its `tools/list` entry.

    `stats` counts what it did (`ServerStats`).
    """

    def __init__(
        self,
        policies: ToolPolicies | Mapping[str, CachePolicy] | None = None,
        *,
        validators: Mapping[str, Validator] | None = None,
        meta_key: str = META_KEY,
    ) -> None:
        if not isinstance(policies, ToolPolicies):
            policies = ToolPolicies(policies)
        self.declarations = ToolDeclarations(policies, validators, meta_key=meta_key)
        self.revalidator = Revalidator(policies, meta_key=meta_key)
        self.meta_key = meta_key
        self._checked = False

    @property
    def stats(self) -> ServerStats:
        """The counters of this middleware (live; `stats.snapshot()` for a copy)."""
        return self.revalidator.stats

    async def check_declarations(self, server: FastMCP) -> None:
        """Warn about declarations that match no tool of `server` (done once, at its first `tools/list`).

        The tools are listed below the server's own auth and visibility filters (a tool this caller may
        not see is still a tool), through the public provider listing FastMCP's `list_tools` builds on.
        """
        self._checked = True
        try:
            tools = await AggregateProvider.list_tools(server)
        except Exception:
            logger.debug("could not list the tools of %r to check the cache declarations", server.name, exc_info=True)
            return
        self.declarations.check(tools, server.name)

    async def on_list_tools(
        self,
        context: MiddlewareContext[mt.ListToolsRequest],
        call_next: CallNext[mt.ListToolsRequest, Sequence[Tool]],
    ) -> Sequence[Tool]:
        tools = await call_next(context)
        fctx = context.fastmcp_context
        if not self._checked and fctx is not None:
            await self.check_declarations(fctx.fastmcp)
        listed: list[Tool] = []
        for tool in tools:
            policy = self.declarations.for_tool(tool)
            meta = tool.meta or {}
            block = policy.declaration_block() if policy is not None else None
            if block is None or meta.get(self.meta_key) == block:
                listed.append(tool)
            else:
                # A copy: the tool object itself is FastMCP's (and the user's) and must not change.
                listed.append(tool.model_copy(update={"meta": {**meta, self.meta_key: block}}))
        return listed

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        name = context.message.name
        fctx = context.fastmcp_context
        found = self.declarations.lookup(name)
        if isinstance(found, _Unresolved):
            tool = await fctx.fastmcp.get_tool(name) if fctx is not None else None
            found = self.declarations.for_tool(tool) if tool is not None else None
        policy = found
        if policy is None:
            return await call_next(context)
        outer = _CLAIM.get()
        result = await self._revalidate(name, policy, context, call_next)
        if outer is not None:
            outer.inner_result = result
        return result

    async def _revalidate(
        self,
        name: str,
        policy: CachePolicy,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        fctx = context.fastmcp_context
        # context.message.meta is rebuilt by FastMCP and never holds the wire _meta; the request's does.
        request_context = fctx.request_context if fctx is not None else None
        request_meta = request_context.meta if request_context is not None else None
        claim = _Claim()

        async def has_structured_output() -> bool | None:
            if fctx is None:
                return None
            tool = await fctx.fastmcp.get_tool(name)
            return None if tool is None else tool.output_schema is not None

        memo_inside, memo_outside = memos_around(fctx.fastmcp.middleware, self, name) if fctx else (False, False)
        raw_ok = fctx is not None and not memo_inside and inside_is_transparent(fctx.fastmcp, self)

        async def run_body() -> ToolResult:
            token = _CLAIM.set(claim)
            try:
                return await call_next(context)
            finally:
                _CLAIM.reset(token)

        async def run_body_tagged(tagging: BelowTagging) -> ToolResult:
            tool = await fctx.fastmcp.get_tool(name) if fctx is not None else None
            if type(tool) is not _raw_tagged_class():
                # A transform added after install() wraps the tagged tool (same name, its own answer): the
                # raw value is not what is sent, so the answer is hashed.
                tagging.reason = "the tool that runs is not the one mcpcache tags below; the answer is hashed"
                return await run_body()
            token = _BELOW.set(_Handoff(tagging))
            try:
                return await run_body()
            finally:
                _BELOW.reset(token)

        def read_answer(result: ToolResult) -> Answer | NotAnAnswer:
            if claim.inner_result is not None and claim.inner_result is result:
                return NotAnAnswer("answered by the mcpcache middleware of the mounted server that defines the tool")
            return read_tool_answer(result)

        outcome = await self.revalidator.call(
            tool=name,
            arguments=context.message.arguments,
            request_meta=request_meta,
            run_body=run_body,
            read_answer=read_answer,
            has_structured_output=has_structured_output,
            memo_inside=memo_inside,
            memo_outside=memo_outside,
            run_body_tagged=run_body_tagged if raw_ok else None,
            policy=policy,
        )
        match outcome:
            case PassThrough(result=result):
                return result
            case NotModified(reply=reply):
                return ToolResult(content=[], structured_content=reply.structured_content, meta=reply.meta)
            case Stamped(result=result, block=block):
                # model_copy, as FastMCP asks of middleware: it keeps the result's class and the protocol
                # object it may wrap (a proxied non-object structuredContent cannot pass ToolResult()).
                return result.model_copy(update={"meta": with_block(result.meta, block, self.meta_key)})
            case _:
                assert_never(outcome)


class RevalidationCapability(ServerExtension):
    """Advertises `EXTENSION_ID` on protocol 2026-07-28; the middleware does the work."""

    identifier = EXTENSION_ID

    def __init__(self, meta_key: str = META_KEY) -> None:
        self._settings = extension_settings(meta_key)

    def settings(self) -> dict[str, Any]:
        return dict(self._settings)


def install(
    server: FastMCP,
    policies: ToolPolicies | Mapping[str, CachePolicy] | None = None,
    *,
    validators: Mapping[str, Validator] | None = None,
    meta_key: str = META_KEY,
    raw_tags: bool = True,
) -> RevalidationMiddleware:
    """Add the middleware as the outermost one, the raw-value tag transform, and advertise the extension.

    Tools declare themselves in their own meta (`@mcp.tool(meta=cache_meta(ttl_ms=5000))`); `policies`
    declares tools by name instead (or as well; a name declared there wins over the tool's meta), and
    `validators` gives tools, by name, the function that names the version of what they read.
    Returns the middleware (its `stats` count what it did). `raw_tags=False` leaves the transform out
    (every tag is then a content tag).
    """
    middleware = RevalidationMiddleware(policies, validators=validators, meta_key=meta_key)
    server.middleware.insert(0, middleware)
    if raw_tags:
        server.add_transform(RawTagTransform(middleware.declarations))
    server.add_extension(RevalidationCapability(meta_key))
    return middleware
