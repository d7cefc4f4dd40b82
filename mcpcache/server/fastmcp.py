"""FastMCP adapter: a middleware that stamps declared tools and answers not-modified, and a transform
that lets a declared tool tag its raw return value before FastMCP converts it.

Place it before (outside) `ResponseCachingMiddleware`: the memo then still saves the server's work, and
this middleware still turns a memo hit into a not-modified reply. `install` puts it first in the chain
and advertises the extension. The middleware also looks at where memos sit on every call and stays
correct whatever the order: behind a memo it makes no not-modified replies (the memo would keep one and
serve it to stock clients), and in front of one it does not use validators for the tools the memo
covers (the memo may answer from an older version than the validator names).

Raw-value tags (docs/protocol.md, "Cheaper tags"). FastMCP turns a tool's return value into content
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
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from importlib.metadata import version as package_version
from typing import TYPE_CHECKING, Any, assert_never

import mcp_types as mt
import pydantic_core
import xxhash
from fastmcp.server.extensions import ServerExtension
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.server.middleware.caching import ResponseCachingMiddleware
from fastmcp.server.transforms import GetToolNext, Transform
from fastmcp.tools.base import Tool, ToolResult
from fastmcp.tools.function_tool import FunctionTool
from fastmcp.utilities.versions import VersionSpec
from pydantic import TypeAdapter
from typing_extensions import is_typeddict

from mcpcache.etag import CanonicalizationError, canonical_json, content_tag, raw_domain, raw_tag
from mcpcache.protocol import EXTENSION_ID, META_KEY, extension_settings, with_block
from mcpcache.server.core import Answer, BelowTagging, NotModified, PassThrough, Revalidator, Stamped
from mcpcache.server.policies import ToolPolicies

if TYPE_CHECKING:
    from fastmcp import FastMCP

__all__ = ["RawTagTransform", "RevalidationCapability", "RevalidationMiddleware", "install", "raw_tag_domain"]

FASTMCP_VERSION = package_version("fastmcp")
_WRAP_KEY = "x-fastmcp-wrap-result"

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


def _memo_covers(memo: Middleware, tool: str) -> bool:
    if not isinstance(memo, ResponseCachingMiddleware):
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


def _read_answer(result: ToolResult) -> Answer | None:
    if getattr(result, "input_required", None) is not None:
        return None
    return Answer(
        content=result.content,
        structured_content=result.structured_content,
        is_error=result.is_error,
        meta=result.meta,  # what the tool and FastMCP put there; the tag covers it
    )


# Raw-value tags ------------------------------------------------------------------------------------


@dataclass
class _Handoff:
    """What the middleware hands the tool for one call (through `_BELOW`); used once."""

    tagging: BelowTagging
    used: bool = False


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
            frameworkVersion=FASTMCP_VERSION,
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


class RawTaggedTool(FunctionTool):
    """A declared function tool whose return value is tagged before FastMCP converts it."""

    def convert_result(self, raw_value: Any) -> ToolResult:
        handoff = _BELOW.get()
        if handoff is None or handoff.used or handoff.tagging.tool != self.name:
            return super().convert_result(raw_value)
        handoff.used = True
        tagging = handoff.tagging
        if isinstance(raw_value, ToolResult):
            # Built by the tool itself: nothing is left to convert; its tag is the answer's (its _meta in).
            try:
                tag = content_tag(raw_value.content, raw_value.structured_content, raw_value.meta)
            except CanonicalizationError:
                tagging.reason = "the tool's ToolResult has no canonical form"
                return raw_value
            reply = tagging.decide(tag, raw_value.structured_content, is_error=raw_value.is_error)
        else:
            domain = raw_tag_domain(self)
            applies, structured = _sent_structured(self, self.return_type, raw_value)
            if domain is None or not applies:
                tagging.reason = "the conversion of this return value cannot be named; the answer is hashed"
                return super().convert_result(raw_value)
            try:
                tag = raw_tag(domain, raw_value)
            except CanonicalizationError as exc:
                tagging.reason = f"the return value has no exact JSON form ({exc}); the answer is hashed"
                return super().convert_result(raw_value)
            reply = tagging.decide(tag, structured)
        if reply is not None:
            return ToolResult(content=[], structured_content=reply.structured_content, meta=reply.meta)
        return raw_value if isinstance(raw_value, ToolResult) else super().convert_result(raw_value)


def raw_tagged(tool: FunctionTool) -> RawTaggedTool:
    """A copy of `tool` (fields and private state, as `model_copy` makes one) as a `RawTaggedTool`."""
    copy = RawTaggedTool.__new__(RawTaggedTool)
    object.__setattr__(copy, "__dict__", dict(tool.__dict__))
    object.__setattr__(copy, "__pydantic_fields_set__", set(tool.__pydantic_fields_set__))
    extra = tool.__pydantic_extra__
    object.__setattr__(copy, "__pydantic_extra__", None if extra is None else dict(extra))
    private = tool.__pydantic_private__
    object.__setattr__(copy, "__pydantic_private__", None if private is None else dict(private))
    return copy


class RawTagTransform(Transform):
    """Hands out declared plain function tools as `RawTaggedTool` copies; lists tools unchanged."""

    def __init__(self, policies: ToolPolicies) -> None:
        self.policies = policies
        self._copies: dict[str, tuple[Tool, RawTaggedTool]] = {}

    async def get_tool(self, name: str, call_next: GetToolNext, *, version: VersionSpec | None = None) -> Tool | None:
        tool = await call_next(name, version=version)
        policy = self.policies.get(name)
        if tool is None or policy is None or not policy.etag or type(tool) is not FunctionTool:
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


class RevalidationMiddleware(Middleware):
    """Stamps `_meta[META_KEY]` on the answers of declared tools; answers not-modified to matching tags."""

    def __init__(self, policies: ToolPolicies, *, meta_key: str = META_KEY) -> None:
        self.revalidator = Revalidator(policies, meta_key=meta_key)
        self.meta_key = meta_key

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        name = context.message.name
        if name not in self.revalidator.policies:
            return await call_next(context)
        fctx = context.fastmcp_context
        # context.message.meta is rebuilt by FastMCP and never holds the wire _meta; the request's does.
        request_context = fctx.request_context if fctx is not None else None
        request_meta = request_context.meta if request_context is not None else None

        async def has_structured_output() -> bool | None:
            if fctx is None:
                return None
            tool = await fctx.fastmcp.get_tool(name)
            return None if tool is None else tool.output_schema is not None

        memo_inside, memo_outside = memos_around(fctx.fastmcp.middleware, self, name) if fctx else (False, False)
        raw_ok = fctx is not None and not memo_inside and inside_is_transparent(fctx.fastmcp, self)

        async def run_body_tagged(tagging: BelowTagging) -> ToolResult:
            token = _BELOW.set(_Handoff(tagging))
            try:
                return await call_next(context)
            finally:
                _BELOW.reset(token)

        outcome = await self.revalidator.call(
            tool=name,
            arguments=context.message.arguments,
            request_meta=request_meta,
            run_body=lambda: call_next(context),
            read_answer=_read_answer,
            has_structured_output=has_structured_output,
            memo_inside=memo_inside,
            memo_outside=memo_outside,
            run_body_tagged=run_body_tagged if raw_ok else None,
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
    policies: ToolPolicies | Mapping[str, Any],
    *,
    meta_key: str = META_KEY,
    raw_tags: bool = True,
) -> RevalidationMiddleware:
    """Add the middleware as the outermost one, the raw-value tag transform, and advertise the extension.
    Returns the middleware. `raw_tags=False` leaves the transform out (every tag is then a content tag)."""
    if not isinstance(policies, ToolPolicies):
        policies = ToolPolicies(policies)
    middleware = RevalidationMiddleware(policies, meta_key=meta_key)
    server.middleware.insert(0, middleware)
    if raw_tags:
        server.add_transform(RawTagTransform(policies))
    server.add_extension(RevalidationCapability(meta_key))
    return middleware
