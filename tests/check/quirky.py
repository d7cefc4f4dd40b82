"""A revalidating server written by hand on the MCP SDK's low-level `Server`, with each way of getting the
protocol wrong as a switch (`Quirks`), so a test can break exactly one rule and see the check fail it.

With no quirk it is a third, independent implementation of docs/protocol.md (tags from mcpcache.etag,
nothing else of mcpcache), and the check passes it. Tools:
- `read(key)`: a document (about 4 KB, so a not-modified reply has a margin to show), structured output
  whose schema requires only `kind`, `_meta` `{"example.com/rev": n}`; annotated read-only;
- `edit(key, text)`: changes the document's text;
- `bump(key)`: changes only the `_meta` revision, never the content.

With `Quirks(deltas=True)` it also sends delta replies (docs/protocol.md section 11), in the simplest
form the format allows: ops that replace the whole answer, against any answer it sent before.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp_types as mt
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from mcpcache.etag import answer_digest, content_tag
from mcpcache.protocol import META_KEY, format_tag, parse_etag, weak_equal

REV_KEY = "example.com/rev"
READ_ARGS = {"key": "k"}
EDIT_ARGS = {"key": "k", "text": "k: second edition"}
BUMP_ARGS = {"key": "k"}

Compare = Literal["weak", "string", "contains", "any-tag"]
FORMAT = "json-patch+splice/1"


@dataclass(frozen=True)
class Quirks:
    """Each field is one way to get the protocol wrong; the defaults get nothing wrong."""

    block: dict[str, Any] = field(default_factory=dict)
    """Fields to overwrite in the block of every full answer (e.g. ttlMs=-5)."""
    tag_per_call: bool = False
    """A new tag on every call (a counter, say)."""
    tag_from_key_only: bool = False
    """The tag names the call, not the answer: it never changes when the document does."""
    tag_covers_meta: bool = True
    compare: Compare = "weak"
    """How a request's tag is matched: weakly (right), as a string, by containing the hex, or any tag at all."""
    not_modified_always: bool = False
    """Answer not-modified even to calls that carry no tag."""
    nm_content: bool = False
    """Keep the content blocks on a not-modified reply."""
    nm_kind: bool = True
    """False: the not-modified reply's structuredContent has no `kind`."""
    nm_flag: bool = True
    """False: the not-modified reply does not say notModified."""
    nm_padding: int = 0
    """Bytes of extra `_meta` on a not-modified reply."""
    stamp_errors: bool = False
    """Put a cache block with a tag on error results."""
    nm_to_errors: bool = False
    """Answer not-modified to a conditional call even when the call fails."""
    strict_schema: bool = False
    """An output schema that requires more than `kind`, which a not-modified `{"kind": K}` fails."""
    deltas: bool = False
    """Send a delta reply to a conditional call that accepts the format and names an answer sent before.
    Not a quirk: deltas are optional. The three below are."""
    delta_unasked: bool = False
    """Send a delta even when the request lists no format."""
    delta_any_base: bool = False
    """Send a delta even against a tag it never issued."""
    delta_wrong_digest: bool = False
    """Send a digest that is not the new answer's."""
    declaration: dict[str, Any] | None = None
    """The `read` tool's cache declaration in tools/list (None: it declares none, and is chosen as read-only)."""


@dataclass
class Docs:
    texts: dict[str, str] = field(default_factory=dict)
    revs: Counter[str] = field(default_factory=Counter)
    calls: int = 0
    sent: set[str] = field(default_factory=set)
    """The opaque parts of the tags of the full answers sent: the bases a delta may name."""

    def text(self, key: str) -> str:
        return self.texts.get(key, f"{key}: first edition\n" + "lorem ipsum " * 340)


def build_quirky(quirks: Quirks | None = None, docs: Docs | None = None) -> Server[Any]:
    quirks = quirks or Quirks()
    docs = docs or Docs()

    tools = [
        mt.Tool(
            name="read",
            # The example is what the check calls the tool with when nobody names its arguments.
            input_schema={
                "type": "object",
                "properties": {"key": {"type": "string", "examples": ["k"]}},
                "required": ["key"],
            },
            output_schema={
                "type": "object",
                "properties": {"kind": {"type": "string"}, "key": {"type": "string"}, "text": {"type": "string"}},
                "required": ["kind", "key", "text"] if quirks.strict_schema else ["kind"],
            },
            annotations=mt.ToolAnnotations(read_only_hint=True),
            _meta={META_KEY: quirks.declaration} if quirks.declaration is not None else None,
        ),
        mt.Tool(
            name="edit",
            input_schema={
                "type": "object",
                "properties": {"key": {"type": "string"}, "text": {"type": "string"}},
                "required": ["key", "text"],
            },
        ),
        mt.Tool(
            name="bump",
            input_schema={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        ),
    ]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListToolsResult:
        return mt.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[Any], params: mt.CallToolRequestParams) -> mt.CallToolResult:
        arguments = params.arguments or {}
        key = arguments.get("key")
        if params.name == "edit" and isinstance(key, str):
            docs.texts[key] = str(arguments.get("text"))
            return mt.CallToolResult(content=[mt.TextContent(type="text", text="edited")])
        if params.name == "bump" and isinstance(key, str):
            docs.revs[key] += 1
            return mt.CallToolResult(content=[mt.TextContent(type="text", text="bumped")])
        return read(params, key)

    def read(params: mt.CallToolRequestParams, key: object) -> mt.CallToolResult:
        docs.calls += 1
        meta = params.meta if isinstance(params.meta, dict) else {}
        block_in = meta.get(META_KEY)
        requested = block_in.get("etag") if isinstance(block_in, dict) else None
        if not isinstance(key, str):
            error: dict[str, Any] = {"content": [{"type": "text", "text": "key is required"}], "isError": True}
            if quirks.nm_to_errors and requested is not None:
                return not_modified(str(requested), "doc")
            if quirks.stamp_errors:
                error["_meta"] = {META_KEY: {"ttlMs": 5000, "cacheScope": "private", "etag": format_tag("e" * 32)}}
            return mt.CallToolResult.model_validate(error)
        text = docs.text(key)
        structured = {"kind": "doc", "key": key, "text": text}
        content = [{"type": "text", "text": text}]
        own_meta = {REV_KEY: docs.revs[key]}
        if quirks.tag_per_call:
            tag = format_tag(f"{docs.calls:032x}")
        elif quirks.tag_from_key_only:
            tag = content_tag([], {"key": key})
        else:
            tag = content_tag(content, structured, own_meta if quirks.tag_covers_meta else None)
        if quirks.not_modified_always or (requested is not None and matches(requested, tag)):
            return not_modified(tag, "doc")
        if quirks.deltas and isinstance(requested, str) and parse_etag(requested) is not None:
            accepted = block_in.get("acceptDelta") if isinstance(block_in, dict) else None
            asked = isinstance(accepted, list) and FORMAT in accepted
            held = requested.removeprefix("W/") in docs.sent
            if (asked or quirks.delta_unasked) and (held or quirks.delta_any_base):
                return delta_reply(requested, tag, content, structured, own_meta)
        docs.sent.add(tag.removeprefix("W/"))
        block = {"ttlMs": 5000, "cacheScope": "private", "etag": tag, **quirks.block}
        return mt.CallToolResult.model_validate(
            {"content": content, "structuredContent": structured, "_meta": {**own_meta, META_KEY: block}}
        )

    def matches(requested: object, tag: str) -> bool:
        match quirks.compare:
            case "weak":
                return weak_equal(requested, tag) and parse_etag(requested) is not None
            case "string":
                return requested == tag
            case "contains":
                return isinstance(requested, str) and tag[3:-1] in requested
            case "any-tag":
                return True

    def delta_reply(
        base: str, tag: str, content: list[dict[str, Any]], structured: dict[str, Any], own_meta: dict[str, Any]
    ) -> mt.CallToolResult:
        docs.sent.add(tag.removeprefix("W/"))
        ops = [
            {"op": "replace", "path": "/content", "value": content},
            {"op": "replace", "path": "/structuredContent", "value": structured},
            {"op": "add", "path": "/_meta", "value": own_meta},
        ]
        digest = "sha256:" + "0" * 64 if quirks.delta_wrong_digest else answer_digest(content, structured, own_meta)
        block = {"ttlMs": 5000, "cacheScope": "private", "etag": tag}
        block["delta"] = {"base": base, "format": FORMAT, "ops": ops, "digest": digest}
        return mt.CallToolResult.model_validate(
            {"content": [], "structuredContent": {"kind": "doc"}, "_meta": {META_KEY: block}}
        )

    def not_modified(tag: str, kind: str) -> mt.CallToolResult:
        block: dict[str, Any] = {"ttlMs": 5000, "cacheScope": "private", "etag": tag}
        if quirks.nm_flag:
            block["notModified"] = True
        meta: dict[str, Any] = {META_KEY: block}
        if quirks.nm_padding:
            meta["example.com/padding"] = "x" * quirks.nm_padding
        reply: dict[str, Any] = {
            "content": [{"type": "text", "text": "still here"}] if quirks.nm_content else [],
            "structuredContent": {"kind": kind} if quirks.nm_kind else {},
            "_meta": meta,
        }
        return mt.CallToolResult.model_validate(reply)

    return Server("quirky", on_list_tools=list_tools, on_call_tool=call_tool)
