"""The wire vocabulary of mcpcache: the cache block on a tool result, and the not-modified reply.

Everything that reads a cache block from a peer goes through `parse_cache_block`, which never raises:
a peer's malformed `_meta` becomes "no block" or a block with safe defaults, never an exception in the
caller's path (docs/protocol.md section 1). Everything that writes one goes through `CacheBlock.to_wire`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mcpcache.etag import META_KEY as META_KEY  # re-exported: the interop key
from mcpcache.etag import parse_etag, weak_equal

# META_KEY ("io.modelcontextprotocol/cache", the interop value) is where the cache block lives in a
# result's (and a request's) `_meta`. It is defined beside the tag, which must leave the block out.

EXTENSION_ID = "io.github.mcpcache/revalidation"
"""The extension a server using mcpcache advertises on protocol 2026-07-28."""

NOT_MODIFIED_KEY = "notModified"
TAG_ALGORITHM = "xxh3-128/canonical-json"
MAX_TTL_MS = 24 * 60 * 60 * 1000
"""Longer hints are clamped: a day is already longer than any sensible tool-result lifetime. The same bound
as the MCP SDK's `mcp.client.caching.MAX_TTL_MS` (SEP-2549), written here rather than imported: importing
it would load the SDK's client package into every importer of the wire vocabulary, the server half and a
bare `import mcpcache` included (tests/test_protocol.py checks that the two agree)."""

Scope = Literal["private", "public"]
_WIRE_FIELDS = ("ttlMs", "cacheScope", "etag", NOT_MODIFIED_KEY)


def extension_settings(meta_key: str = META_KEY) -> dict[str, Any]:
    """What a server advertises under `capabilities.extensions[EXTENSION_ID]`."""
    return {"metaKey": meta_key, "notModifiedKey": NOT_MODIFIED_KEY, "tagAlgorithm": TAG_ALGORITHM}


def _tolerant_ttl(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return min(max(value, 0), MAX_TTL_MS)
    if isinstance(value, float):
        # JSON has one number type, so 5000.0 is an integer; 1e30 is one too, and is clamped.
        if not math.isfinite(value) or value != int(value):
            return 0
        return min(max(int(value), 0), MAX_TTL_MS)
    return 0


class CacheBlock(BaseModel):
    """`result._meta[META_KEY]` as read or written. Construction from peer data never raises."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    ttl_ms: int | None = Field(default=None, alias="ttlMs")
    cache_scope: Scope = Field(default="private", alias="cacheScope")
    etag: str | None = None
    not_modified: bool = Field(default=False, alias="notModified")

    @field_validator("ttl_ms", mode="before")
    @classmethod
    def _ttl(cls, value: object) -> int | None:
        return _tolerant_ttl(value)

    @field_validator("cache_scope", mode="before")
    @classmethod
    def _scope(cls, value: object) -> Scope:
        # Anything but an explicit "public" (absent, "session", a number) is the safe reading.
        return "public" if value == "public" else "private"

    @field_validator("etag", mode="before")
    @classmethod
    def _etag(cls, value: object) -> str | None:
        return parse_etag(value)

    @field_validator("not_modified", mode="before")
    @classmethod
    def _not_modified(cls, value: object) -> bool:
        return value is True

    @property
    def cacheable(self) -> bool:
        """A result may be stored only when it says how long (ttlMs) or how to revalidate (etag)."""
        return self.ttl_ms is not None or self.etag is not None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"cacheScope": self.cache_scope}
        if self.ttl_ms is not None:
            wire["ttlMs"] = self.ttl_ms
        if self.etag is not None:
            wire["etag"] = self.etag
        if self.not_modified:
            wire[NOT_MODIFIED_KEY] = True
        return wire


def parse_cache_block(meta: object, key: str = META_KEY) -> CacheBlock | None:
    """The cache block inside a `_meta` value, or None when there is none that is an object."""
    if not isinstance(meta, Mapping):
        return None
    raw = meta.get(key)
    if not isinstance(raw, Mapping):
        return None
    # Only the wire names count: the model also accepts its Python field names, which are not wire fields.
    return CacheBlock.model_validate({name: raw[name] for name in _WIRE_FIELDS if name in raw})


def requested_etag(request_meta: object, key: str = META_KEY) -> str | None:
    """The well-formed tag a conditional request carries, or None (an ordinary call)."""
    block = parse_cache_block(request_meta, key)
    return block.etag if block is not None else None


def conditional_request_meta(etag: str, key: str = META_KEY) -> dict[str, Any]:
    """The request `_meta` of a conditional `tools/call` (docs/protocol.md section 3)."""
    return {key: {"etag": etag}}


def with_block(meta: Mapping[str, Any] | None, block: CacheBlock, key: str = META_KEY) -> dict[str, Any]:
    """`meta` with the cache block set; every other key is kept."""
    merged = dict(meta or {})
    merged[key] = block.to_wire()
    return merged


def answer_kind(structured_content: object) -> str | None:
    """The answer's own `kind`, when its structured content has a string one."""
    if isinstance(structured_content, Mapping):
        kind = structured_content.get("kind")
        if isinstance(kind, str):
            return kind
    return None


class NotModifiedReply(BaseModel):
    """The reply of docs/protocol.md section 4, in wire field names."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    content: list[Any] = Field(default_factory=list)
    structured_content: dict[str, Any] | None = Field(default=None, alias="structuredContent")
    is_error: Literal[False] = Field(default=False, alias="isError")
    meta: dict[str, Any] = Field(alias="_meta")

    @classmethod
    def build(cls, block: CacheBlock, kind: str | None, key: str = META_KEY) -> NotModifiedReply:
        """`kind` None means the tool has no structured output, so the field is left out."""
        stamped = block.model_copy(update={"not_modified": True})
        return cls(
            structured_content={"kind": kind} if kind is not None else None,
            meta={key: stamped.to_wire()},
        )

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


def unconfirmed(block: CacheBlock, sent_etag: str | None, *, is_error: bool) -> str | None:
    """Why a not-modified reply confirms nothing (it is then never a result: the call is repeated without a
    tag), or None when it confirms the tag that was sent (docs/protocol.md sections 4 and 5). The one rule
    for every party that sends a tag: the client cache, and the gateway towards its upstream."""
    if is_error:
        return "a not-modified reply marked as an error confirms nothing"
    if sent_etag is None:
        return "not-modified reply to a request that carried no tag"
    if block.etag is None or not weak_equal(block.etag, sent_etag):
        return "not-modified reply does not name the tag that was sent"
    return None
