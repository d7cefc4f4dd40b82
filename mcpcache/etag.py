"""Weak entity tags and the answer digest (docs/protocol.md section 2; docs/extension.md, "Canonical forms").

A tag must come out the same for the same answer in any process, on any transport and in any protocol
era, so it is computed from one pinned serialisation, the tag form of `mcpcache.canonical`, of one
document: the answer's content, structured content and `_meta` without the cache block and without the
SDK's `serverInfo` (`answer_meta`). The digest is computed from the same document. xxh3-128
because the tag only has to tell versions of one answer apart for the client that holds it; it is not a
security boundary (keys in shared stores use SHA-256, see keys.py). The digest is the other way round:
a client recomputes it to verify a delta, so it is SHA-256 (in every standard library) over RFC 8785
bytes (which every language can reproduce).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
import xxhash
from pydantic import BaseModel

from mcpcache.canonical import MAX_DEPTH, CanonicalizationError, _dump, canonical_json, jcs
from mcpcache.protocol import META_KEY, SERVER_INFO_KEY, format_tag

DIGEST_PREFIX = "sha256:"

_VALIDATOR_DOMAIN = b"mcpcache/validator\x00"


def wire_content(blocks: Iterable[BaseModel | Mapping[str, Any]]) -> list[Any]:
    """Content blocks as they are sent: wire aliases, JSON types, absent fields left out."""
    return [
        block.model_dump(by_alias=True, mode="json", exclude_none=True) if isinstance(block, BaseModel) else dict(block)
        for block in blocks
    ]


def tag_of_bytes(data: bytes) -> str:
    return format_tag(xxhash.xxh3_128_hexdigest(data))


def meta_without_block(meta: Mapping[str, Any] | None, meta_key: str = META_KEY) -> dict[str, Any] | None:
    """A result's `_meta` as an answer is stored and patched: the cache block left out (it is sent fresh
    with every reply), and nothing left read as None."""
    if not meta:
        return None
    rest = {key: value for key, value in meta.items() if key != meta_key}
    return rest or None


def answer_meta(meta: Mapping[str, Any] | None, meta_key: str = META_KEY) -> dict[str, Any] | None:
    """A result's `_meta` as the tag and the digest cover it: without the cache block and without the SDK's
    `io.modelcontextprotocol/serverInfo`, which describes the server rather than the answer (the SDK adds
    it on 2026-07-28, after the tool answered, and not on 2025-11-25); None when nothing is left."""
    if not meta:
        return None
    rest = {key: value for key, value in meta.items() if key != meta_key and key != SERVER_INFO_KEY}
    return rest or None


def content_tag(
    content: Iterable[BaseModel | Mapping[str, Any]],
    structured_content: Any,
    meta: Mapping[str, Any] | None = None,
    *,
    meta_key: str = META_KEY,
) -> str:
    """The tag of an answer: it covers every field a not-modified reply leaves out.

    The canonical document is `{"content": [...], "meta": <_meta without the cache block and serverInfo,
    or null>, "structuredContent": ...}`. `meta` is the result's `_meta` with or without the block under
    `meta_key` and the SDK's serverInfo: both are left out either way, so stamping never changes the tag,
    nor does the era or the SDK that carried the answer. The three keys already sort in that order, so the
    document is fed to the hash piece by piece, which gives the same bytes as one sorted dump without
    building a second multi-megabyte buffer. Raises CanonicalizationError for an answer with no tag form
    (the document nested deeper than `MAX_DEPTH` levels included).
    """
    return content_tag_sized(content, structured_content, meta, meta_key=meta_key)[0]


def content_tag_sized(
    content: Iterable[BaseModel | Mapping[str, Any]],
    structured_content: Any,
    meta: Mapping[str, Any] | None = None,
    *,
    meta_key: str = META_KEY,
) -> tuple[str, int]:
    """`content_tag`, and the length of the canonical bytes it hashed (what a server reports as the
    size of an answer it did not have to send)."""
    digest = xxhash.xxh3_128()
    size = 0

    def feed(data: bytes) -> None:
        nonlocal size
        digest.update(data)
        size += len(data)

    # Each piece sits inside the document's own levels: a block inside the document and its content
    # array, the other two inside the document. Its room is what is left of MAX_DEPTH.
    feed(b'{"content":[')
    for index, block in enumerate(wire_content(content)):
        if index:
            feed(b",")
        feed(_dump(block, MAX_DEPTH - 2))
    feed(b'],"meta":')
    feed(_dump(answer_meta(meta, meta_key), MAX_DEPTH - 1))
    feed(b',"structuredContent":')
    feed(_dump(structured_content, MAX_DEPTH - 1))
    feed(b"}")
    return format_tag(digest.hexdigest()), size


def answer_digest(
    content: Iterable[BaseModel | Mapping[str, Any]],
    structured_content: Any,
    meta: Mapping[str, Any] | None = None,
    *,
    meta_key: str = META_KEY,
) -> str:
    """`sha256:` + 64 lowercase hex digits of the RFC 8785 bytes of the answer document of `content_tag`
    (`_meta` as `answer_meta` leaves it): what a delta's digest names, and what a client recomputes from
    the answer it built (docs/seps/deltas.md, "The digest"). Raises CanonicalizationError for an answer
    with no RFC 8785 form (an integer beyond 2^53, a non-finite number, a lone surrogate, a non-JSON type,
    nesting beyond `MAX_DEPTH`)."""
    document = {
        "content": wire_content(content),
        "meta": answer_meta(meta, meta_key),
        "structuredContent": structured_content,
    }
    return DIGEST_PREFIX + hashlib.sha256(jcs(document)).hexdigest()


def validator_tag(tool: str, arguments: Mapping[str, Any] | None, version: Any) -> str:
    """The tag of a tool whose validator names the version of what it reads (docs/protocol.md section 2.3)."""
    document = {"tool": tool, "arguments": dict(arguments or {}), "version": version}
    return tag_of_bytes(_VALIDATOR_DOMAIN + canonical_json(document))


RAW_DOMAIN = "mcpcache/raw/v1"
"""The domain of tags hashed from a tool's raw return value, before its framework converts it."""

_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1


def raw_domain(**names: Any) -> bytes:
    """The prefix of a raw-value tag's hashed bytes: `RAW_DOMAIN`, NUL, then the canonical JSON of
    `names` (everything that decides how the raw value becomes the answer as sent), then NUL.

    Canonical JSON is self-delimiting, so no value of `names` can run into the raw bytes that follow,
    and no content tag (whose bytes start with `{`) or validator tag shares these first bytes.
    """
    return RAW_DOMAIN.encode() + b"\x00" + canonical_json(names) + b"\x00"


def _check_exact(value: Any) -> None:
    """Raise CanonicalizationError unless `value` is made only of the exact JSON types (see `exact_json`)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    raise CanonicalizationError(f"object key {key!r} is not a str")
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is int:
            if not _MIN_INT <= item <= _MAX_INT:
                raise CanonicalizationError("integer out of range")
        elif kind is float:
            if not math.isfinite(item):
                raise CanonicalizationError(f"non-finite number {item!r} has no JSON form")
        else:
            raise CanonicalizationError(f"{kind.__name__} is not an exact JSON type")


def exact_json(value: Any) -> bytes:
    """`value`'s JSON bytes, keys in their own order, if it is made only of the exact JSON types.

    Exact means `dict` (str keys), `list`, `str`, `int` (-2^63 .. 2^64-1), finite `float`, `bool` and
    None, never a subclass (an enum, a named tuple), a tuple or any other type a framework's serializer
    might write in its own way. Two values with equal bytes are then equal in every way a JSON
    serializer can see, key order included, so a framework converts them into identical answers.
    Raises CanonicalizationError otherwise: the caller falls back to the tag of the converted answer.
    """
    _check_exact(value)
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError) as exc:  # pragma: no cover - the walk rejects first
        raise CanonicalizationError(str(exc)) from exc


def raw_tag(domain: bytes, value: Any) -> str:
    """The tag of a raw return value in `domain` (see `raw_domain`). Raises CanonicalizationError when
    the value has no exact JSON form."""
    return raw_tag_sized(domain, value)[0]


def raw_tag_sized(domain: bytes, value: Any) -> tuple[str, int]:
    """`raw_tag`, and the length of the value's JSON bytes."""
    _check_exact(value)
    return parsed_raw_tag_sized(domain, value)


def parsed_raw_tag_sized(domain: bytes, value: Any) -> tuple[str, int]:
    """`raw_tag_sized` of a value known to hold only exact JSON types (parsed from JSON, or walked
    already): the same tag, without the walk. Raises CanonicalizationError for an integer orjson cannot
    write (beyond 64 bits), which JSON parsers accept."""
    digest = xxhash.xxh3_128(domain)
    try:
        size = _feed_json(digest.update, value, _STREAMED_LEVELS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise CanonicalizationError(str(exc)) from exc
    return format_tag(digest.hexdigest()), size


_STREAMED_LEVELS = 2
"""How deep the JSON of a raw value is written piece by piece into the hash (the notebook's cells are the
second level): the same bytes as one `orjson.dumps`, with no multi-megabyte buffer to allocate and fault
in, which in a busy server costs a third of the tag."""


def _feed_json(update: Callable[[bytes], object], value: Any, levels: int) -> int:
    """Write `value`'s compact JSON (orjson's, keys in their order) into `update`; the number of bytes."""
    kind = type(value)
    if levels and kind is dict and value:
        size = len(value) + 1  # the braces and the commas
        update(b"{")
        for index, (key, item) in enumerate(value.items()):
            name = orjson.dumps(key) + b":"
            update(b"," + name if index else name)
            size += len(name) + _feed_json(update, item, levels - 1)
        update(b"}")
        return size
    if levels and kind is list and value:
        size = len(value) + 1
        update(b"[")
        for index, item in enumerate(value):
            if index:
                update(b",")
            size += _feed_json(update, item, levels - 1)
        update(b"]")
        return size
    data = orjson.dumps(value)
    update(data)
    return len(data)


def raw_json_tag(domain: bytes, data: bytes) -> str:
    """The tag in `domain` of JSON bytes the caller already has (`exact_json` of the value, or the same
    JSON as the framework wrote it: compact, keys in their order, which orjson and pydantic-core agree on).
    """
    digest = xxhash.xxh3_128(domain)
    digest.update(data)
    return format_tag(digest.hexdigest())
