"""Stored answers: how a `CallToolResult` becomes a store body and back, and what a lookup found.

Two forms of body, told apart by their first byte:

- plain: the answer's JSON (`{...}`), as the serializer writes it;
- shared text: for an answer whose text block is exactly the JSON of its structured content (FastMCP
  writes every dict it returns both ways, so a 50 MB notebook is a 97 MB answer), that JSON once, followed
  by the rest of the answer with the text block left empty. It starts with `_SHARED_TEXT`, a NUL byte no
  JSON document starts with, then a header naming the JSON's length and the blocks it fills in. The text
  is compared byte for byte with the JSON before this form is chosen, and decoding fills it back in from
  those very bytes, so an answer decodes to what the plain form decodes to: half the bytes to write, read,
  checksum and hold, and a deadline half as long.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

import orjson
import pydantic_core
from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError

from mcpcache.client.keys import Arm
from mcpcache.client.policy import EntryMeta
from mcpcache.client.tier import Decoded
from mcpcache.protocol import NOT_MODIFIED_KEY, CacheBlock
from mcpcache.stores.items import Item

_SHARED_TEXT = b"\x00mcpcache/shared-text/1\n"
"""The first bytes of a body in the shared-text form (a plain body starts with `{`)."""

_SHARED_TEXT_MIN = 1024
"""Shorter texts are stored plainly: the header would cost about as much as the repeat saves."""

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Encoded:
    body: bytes
    """What the store keeps."""
    size: int
    """The answer's bytes as the plain form writes them: what it costs on the wire."""


def encode_result(result: CallToolResult) -> bytes:
    """The plain form: the answer's JSON."""
    # The serializer's bytes directly: model_dump_json would decode them to a str only to encode it again.
    return result.__pydantic_serializer__.to_json(result, by_alias=True, exclude_none=True)


def encode_entry(result: CallToolResult) -> Encoded:
    """The body to store for `result`: the shared-text form when it applies, else the plain form."""
    return _shared_text(result) or Encoded(body := encode_result(result), len(body))


def stored_size_at_least(result: CallToolResult) -> int:
    """A lower bound of `encode_entry(result)`'s body length, without encoding: every text is stored once at
    least, in at least one byte per character."""
    return max((len(block.text) for block in result.content if isinstance(block, TextContent)), default=0)


def _shared_text(result: CallToolResult) -> Encoded | None:
    structured = result.structured_content
    if structured is None:
        return None
    candidates = [
        index
        for index, block in enumerate(result.content)
        if type(block) is TextContent and len(block.text) >= _SHARED_TEXT_MIN and block.text[:1] in ("{", "[")
    ]
    if not candidates:
        return None
    # The bytes the plain form writes for the structured content (the field's serializer is pydantic-core's
    # own, as here: tests/client/test_large_answers.py checks the two agree).
    shared = pydantic_core.to_json(structured)
    same = [index for index in candidates if _same_text(result.content[index].text, shared)]  # type: ignore[union-attr]
    if not same:
        return None
    content = list(result.content)
    for index in same:
        content[index] = content[index].model_copy(update={"text": ""})
    rest = encode_result(result.model_copy(update={"content": content, "structured_content": None}))
    header = orjson.dumps({"structured": len(shared), "texts": same})
    body = b"".join((_SHARED_TEXT, header, b"\n", shared, rest))
    # The plain form's length: the rest, the structured content, and each text as a JSON string (the JSON
    # with its quotes and backslashes escaped; compact JSON holds no other character a string escapes).
    escaped = len(shared) + shared.count(b'"') + shared.count(b"\\")
    size = len(rest) + len(b',"structuredContent":') + len(shared) + len(same) * escaped
    return Encoded(body, size)


def _same_text(text: str, data: bytes) -> bool:
    """Whether `text` encodes to exactly `data` in UTF-8, compared a chunk at a time: encoding the whole text
    at once would hold a second copy of it, and serialising it would attach a UTF-8 copy to the string for
    as long as the answer lives."""
    if len(text) > len(data) or len(data) > 4 * len(text):
        return False
    if text.isascii():
        if len(text) != len(data):
            return False
        return all(
            text[at : at + _CHUNK].encode("ascii") == data[at : at + _CHUNK] for at in range(0, len(text), _CHUNK)
        )
    decoder = codecs.getincrementaldecoder("utf-8")()
    view, done = memoryview(data), 0
    try:
        for at in range(0, len(data), _CHUNK):
            piece = decoder.decode(view[at : at + _CHUNK], final=at + _CHUNK >= len(data))
            if text[done : done + len(piece)] != piece:
                return False
            done += len(piece)
    except UnicodeDecodeError:
        return False
    return done == len(text)


def decode_result(body: bytes) -> CallToolResult | None:
    """A new, private `CallToolResult` from stored bytes (either form); None for bytes that are not one."""
    # Parsing to Python values first and validating those measured faster than model_validate_json on
    # answers from 1 KB to 10 MB; pydantic_core keeps integers above 64 bits exact.
    try:
        if body.startswith(_SHARED_TEXT):
            return _decode_shared_text(body)
        return CallToolResult.model_validate(pydantic_core.from_json(body))
    except (ValidationError, ValueError):
        return None


def _decode_shared_text(body: bytes) -> CallToolResult | None:
    view = memoryview(body)
    start = len(_SHARED_TEXT)
    end = body.find(b"\n", start)
    header = orjson.loads(view[start:end]) if end > 0 else None
    if not isinstance(header, dict):
        return None
    length, texts = header.get("structured"), header.get("texts")
    if type(length) is not int or not 0 <= length <= len(body) - end - 1 or type(texts) is not list:
        return None
    shared = view[end + 1 : end + 1 + length]
    rest = pydantic_core.from_json(bytes(view[end + 1 + length :]))
    content = rest.get("content") if isinstance(rest, dict) else None
    if not isinstance(content, list) or "structuredContent" in rest:
        return None
    # A str of its own, decoded from the stored bytes: the structured content is parsed from the same bytes.
    text = str(shared, "utf-8")
    for index in texts:
        if type(index) is not int or not 0 <= index < len(content):
            return None
        block = content[index]
        if not isinstance(block, dict) or block.get("type") != "text" or block.get("text") != "":
            return None
        block["text"] = text
    rest["structuredContent"] = pydantic_core.from_json(bytes(shared))
    return CallToolResult.model_validate(rest)


def merged(result: CallToolResult, block: CacheBlock, meta_key: str) -> CallToolResult:
    """The stored answer with the fresh block on its `_meta`; its other `_meta` keys are kept."""
    fresh = block.to_wire()
    fresh.pop(NOT_MODIFIED_KEY, None)  # what the caller gets is a full answer, not a not-modified reply
    meta = dict(result.meta or {})
    meta[meta_key] = fresh
    return result.model_copy(update={"meta": meta})


TOOLS_GROUP = "tools"
"""The store group of the tool cache's answers (what `mcpcache cache` lists, counts and clears)."""

MARKS_GROUP = "marks"
"""The store group of the freshness marks: when a server's entries in a partition, or one call's, stopped
being fresh."""


def entry_item(meta: EntryMeta, body: bytes, expires_at: float, *, server: str) -> Item:
    """The store item for an answer: the store compares `tag` on a revalidation and `stamp` on a save, and
    labels it with `server` (`mcpcache.client.keys.readable_server`) and the tool, for people to list it by."""
    return Item(
        meta=meta.to_json(),
        body=body,
        group=TOOLS_GROUP,
        created_at=meta.received_at,
        expires_at=expires_at,
        tag=meta.etag,
        stamp=meta.requested_at,
        server=server,
        tool=meta.tool,
    )


def mark_item(ended_at: float) -> Item:
    """A freshness mark: stamped with its time, so an earlier end never replaces a later one in the store."""
    return Item(meta={"endedAt": ended_at}, body=b"", group=MARKS_GROUP, created_at=ended_at, stamp=ended_at)


@dataclass(frozen=True)
class Found:
    """A stored answer this partition may be served: where it is, what is known of it, and the item as a
    metadata read found it (its body not loaded; `decoded`: the decoded tier's copy of exactly this stored
    version, when it holds one)."""

    key: str
    arm: Arm
    entry: EntryMeta
    item: Item
    decoded: Decoded | None = None
    server_id: str = ""
    call: str = ""
    """The call's mark (`CallIdentity.call_mark_key`), by which an invalidation finds its decoded copy."""
