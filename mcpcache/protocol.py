"""The wire vocabulary of mcpcache: the cache block on a tool result, the conditional request, and the
two replies that stand in for an answer (not-modified and delta).

Everything that reads a cache block from a peer goes through `parse_cache_block`, which never raises:
a peer's malformed `_meta` becomes "no block" or a block with safe defaults, never an exception in the
caller's path (docs/protocol.md section 1). Everything that writes one goes through `CacheBlock.to_wire`.
A request's conditions (its tag, the delta formats it accepts) are read by `read_conditions`.

A delta block is the one field that is never read as absent when malformed: a reply that carries one
has empty content and a stub in place of the answer, so reading a broken delta as "no delta" would make
the stub look like the answer. It reads as `MalformedDelta` instead, which a client treats like any
delta it cannot apply: it repeats the call without a tag (docs/protocol.md section 11).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

META_KEY = "io.modelcontextprotocol/cache"
"""Where the cache block lives in a result's (and a request's) `_meta`, the interop value. The tag never
covers the block itself, so stamping an answer does not change its tag."""

SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
"""Added to every result's `_meta` by the MCP SDK on protocol 2026-07-28 after the tool has answered: it
describes the server, not the answer, so a digest leaves it out and a client's stored copy may hold an
older one."""

MAX_ETAG_LENGTH = 256
"""A longer value in a peer's `_meta` is not a tag anybody here minted; reading it as absent is safe."""

# RFC 9110 entity-tag: optional W/, then a quoted opaque-tag of etagc characters (no obs-text here:
# a tag arrives in JSON, where "octets above 0x7F" would be code points, not bytes).
_ETAG_RE = re.compile(r'(W/)?"([\x21\x23-\x7e]+)"')

EXTENSION_ID = "io.github.mcpcache/revalidation"
"""The extension a server using mcpcache advertises on protocol 2026-07-28."""

NOT_MODIFIED_KEY = "notModified"
DELTA_KEY = "delta"
ACCEPT_DELTA_KEY = "acceptDelta"
TAG_ALGORITHM = "xxh3-128/canonical-json"
MAX_TTL_MS = 24 * 60 * 60 * 1000
"""Longer hints are clamped: a day is already longer than any sensible tool-result lifetime. The same bound
as the MCP SDK's `mcp.client.caching.MAX_TTL_MS` (SEP-2549), written here rather than imported: importing
it would load the SDK's client package into every importer of the wire vocabulary, the server half and a
bare `import mcpcache` included (tests/test_protocol.py checks that the two agree)."""

Scope = Literal["private", "public"]
STALE_WHILE_REVALIDATE_KEY = "staleWhileRevalidateMs"
STALE_IF_ERROR_KEY = "staleIfErrorMs"
_WIRE_FIELDS = ("ttlMs", "cacheScope", "etag", NOT_MODIFIED_KEY, STALE_WHILE_REVALIDATE_KEY, STALE_IF_ERROR_KEY)

MAX_ACCEPTED_FORMATS = 16
"""A request naming more delta formats is read for its first 16: nobody implements more, and a reader
must not walk an arbitrarily long list a peer sent."""
MAX_FORMAT_LENGTH = 128
_DIGEST_RE = re.compile(r"(?:sha256|sha256-tree1):[0-9a-f]{64}")
"""A digest's two forms: the whole answer's (`sha256:`) and the tree digest's (`sha256-tree1:`); which one a
delta carries goes with its format (`json-patch+splice/1` and `/2`), and a receiver checks the two agree."""


# The entity tag's syntax and comparison (docs/protocol.md section 2) ---------------------------------


def format_tag(digest_hex: str) -> str:
    return f'W/"{digest_hex}"'


def parse_etag(value: object) -> str | None:
    """`value` if it is a well-formed entity tag, else None. Never raises."""
    if not isinstance(value, str) or len(value) > MAX_ETAG_LENGTH:
        return None
    return value if _ETAG_RE.fullmatch(value) else None


def opaque_tag(tag: object) -> str | None:
    """The opaque part of a well-formed tag (what weak comparison compares: `W/` and quotes dropped), or
    None. Two tags are weakly equal exactly when their opaque parts are equal and not None."""
    match = _ETAG_RE.fullmatch(tag) if isinstance(tag, str) and len(tag) <= MAX_ETAG_LENGTH else None
    return match.group(2) if match is not None else None


def weak_equal(a: object, b: object) -> bool:
    """Weak comparison (RFC 9110 8.8.3.2): opaque tags equal, W/ ignored. Malformed equals nothing."""
    ma = _ETAG_RE.fullmatch(a) if isinstance(a, str) and len(a) <= MAX_ETAG_LENGTH else None
    mb = _ETAG_RE.fullmatch(b) if isinstance(b, str) and len(b) <= MAX_ETAG_LENGTH else None
    return ma is not None and mb is not None and ma.group(2) == mb.group(2)


# Tag domains -----------------------------------------------------------------------------------------


def extension_settings(meta_key: str = META_KEY, *, delta_formats: Sequence[str] = ()) -> dict[str, Any]:
    """What a server advertises under `capabilities.extensions[EXTENSION_ID]`; `deltaFormats` only when
    the server can send delta replies."""
    settings: dict[str, Any] = {"metaKey": meta_key, "notModifiedKey": NOT_MODIFIED_KEY, "tagAlgorithm": TAG_ALGORITHM}
    if delta_formats:
        settings["deltaFormats"] = list(delta_formats)
    return settings


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


def _tolerant_window(value: object) -> int | None:
    """A stale window (docs/protocol.md section 12), clamped like `ttlMs`. Unlike `ttlMs`, a value that is not
    a whole number reads as absent: a window nobody meant is never granted, and absent and 0 mean the same."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        return None
    return min(max(int(value), 0), MAX_TTL_MS)


class DeltaBlock(BaseModel):
    """`block["delta"]` of a delta reply (docs/protocol.md section 11): the ops that turn the answer sent
    under `base` into the current one, in `format`, and the digest of the answer they must produce.

    Read from a peer only through `parse_cache_block`, which checks the shape of every field (and says
    `MalformedDelta` otherwise); whether the ops apply, and whether the result has `digest`, is for the
    receiver to find out (`mcpcache.delta.apply`, `mcpcache.etag.answer_digest`)."""

    model_config = ConfigDict(frozen=True)

    base: str
    """The tag of the answer the ops apply to, as the server wrote it (weakly equal to the request's)."""
    format: str
    ops: list[Any]
    digest: str
    """`sha256:` and 64 lowercase hex digits (`mcpcache.etag.answer_digest` of the new answer), or for the
    format `json-patch+splice/2`, `sha256-tree1:` and 64 (`mcpcache.delta.tree`)."""

    def to_wire(self) -> dict[str, Any]:
        return {"base": self.base, "format": self.format, "ops": self.ops, "digest": self.digest}


class MalformedDelta(BaseModel):
    """A `delta` field was present but is not a delta block: the reply is neither an answer nor a delta
    that can be applied. A client repeats the call without a tag, as for any delta it cannot use."""

    model_config = ConfigDict(frozen=True)

    reason: str


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else type(value).__name__


def parse_delta(raw: object) -> DeltaBlock | MalformedDelta:
    """A peer's `delta` field, read without raising: a `DeltaBlock` when every field has its shape."""
    if not isinstance(raw, Mapping):
        return MalformedDelta(reason=f"the delta is {_json_kind(raw)}, not an object")
    base = parse_etag(raw.get("base"))
    if base is None:
        return MalformedDelta(reason="its base is not a well-formed entity tag")
    name = raw.get("format")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_FORMAT_LENGTH:
        return MalformedDelta(reason="its format is not a name")
    ops = raw.get("ops")
    if not isinstance(ops, list):
        return MalformedDelta(reason="its ops are not an array")
    digest = raw.get("digest")
    if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
        return MalformedDelta(reason="its digest is not sha256:<64 lowercase hex digits>")
    return DeltaBlock(base=base, format=name, ops=ops, digest=digest)


class CacheBlock(BaseModel):
    """`result._meta[META_KEY]` as read or written. Construction from peer data never raises."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    ttl_ms: int | None = Field(default=None, alias="ttlMs")
    cache_scope: Scope = Field(default="private", alias="cacheScope")
    etag: str | None = None
    not_modified: bool = Field(default=False, alias="notModified")
    delta: DeltaBlock | MalformedDelta | None = None
    """None: the block carries no `delta` field (the reply is not a delta reply)."""
    stale_while_revalidate_ms: int | None = Field(default=None, alias=STALE_WHILE_REVALIDATE_KEY)
    """How long after freshness ends a client may serve the answer at once while it revalidates in the
    background (RFC 5861's stale-while-revalidate). None: not given (no stale serving)."""
    stale_if_error_ms: int | None = Field(default=None, alias=STALE_IF_ERROR_KEY)
    """How long after freshness ends a client may serve the answer when the server cannot answer (RFC
    5861's stale-if-error). None: not given."""

    @field_validator("ttl_ms", mode="before")
    @classmethod
    def _ttl(cls, value: object) -> int | None:
        return _tolerant_ttl(value)

    @field_validator("stale_while_revalidate_ms", "stale_if_error_ms", mode="before")
    @classmethod
    def _window(cls, value: object) -> int | None:
        return _tolerant_window(value)

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

    @field_validator("delta", mode="before")
    @classmethod
    def _delta(cls, value: object) -> DeltaBlock | MalformedDelta | None:
        if value is None or isinstance(value, DeltaBlock | MalformedDelta):
            return value
        return parse_delta(value)

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
        if self.stale_while_revalidate_ms:  # 0 says what absence says; the block stays as it was without
            wire[STALE_WHILE_REVALIDATE_KEY] = self.stale_while_revalidate_ms
        if self.stale_if_error_ms:
            wire[STALE_IF_ERROR_KEY] = self.stale_if_error_ms
        if isinstance(self.delta, DeltaBlock):  # a MalformedDelta is only ever read, never written
            wire[DELTA_KEY] = self.delta.to_wire()
        return wire


def parse_cache_block(meta: object, key: str = META_KEY) -> CacheBlock | None:
    """The cache block inside a `_meta` value, or None when there is none that is an object."""
    if not isinstance(meta, Mapping):
        return None
    raw = meta.get(key)
    if not isinstance(raw, Mapping):
        return None
    # Only the wire names count: the model also accepts its Python field names, which are not wire fields.
    fields = {name: raw[name] for name in _WIRE_FIELDS if name in raw}
    if DELTA_KEY in raw:
        # Present is a claim, whatever it holds: `"delta": null` is malformed, not absent.
        fields["delta"] = parse_delta(raw[DELTA_KEY])
    return CacheBlock.model_validate(fields)


def requested_etag(request_meta: object, key: str = META_KEY) -> str | None:
    """The well-formed tag a conditional request carries, or None (an ordinary call)."""
    block = parse_cache_block(request_meta, key)
    return block.etag if block is not None else None


@dataclass(frozen=True)
class Conditions:
    """What a request's cache block asks for: the tag the caller holds, and the delta formats it can apply
    (in the caller's order of preference; empty: it takes no delta)."""

    etag: str | None = None
    accept_delta: tuple[str, ...] = ()


NO_CONDITIONS = Conditions()


def accepted_delta_formats(request_meta: object, key: str = META_KEY) -> tuple[str, ...]:
    """The delta formats a request's block lists under `acceptDelta`, read tolerantly: only an array
    counts, entries that are not short non-empty strings are skipped, duplicates dropped, at most
    `MAX_ACCEPTED_FORMATS` read. Never raises."""
    if not isinstance(request_meta, Mapping):
        return ()
    raw = request_meta.get(key)
    if not isinstance(raw, Mapping):
        return ()
    listed = raw.get(ACCEPT_DELTA_KEY)
    if not isinstance(listed, list):
        return ()
    formats: list[str] = []
    for name in listed[:MAX_ACCEPTED_FORMATS]:
        if isinstance(name, str) and 0 < len(name) <= MAX_FORMAT_LENGTH and name not in formats:
            formats.append(name)
    return tuple(formats)


def read_conditions(request_meta: object, key: str = META_KEY) -> Conditions:
    """The conditions a request carries (docs/protocol.md sections 3 and 11). A format list without a
    well-formed tag asks for nothing: a delta needs a base."""
    etag = requested_etag(request_meta, key)
    if etag is None:
        return NO_CONDITIONS
    return Conditions(etag=etag, accept_delta=accepted_delta_formats(request_meta, key))


def conditional_request_meta(etag: str, key: str = META_KEY, *, accept_delta: Sequence[str] = ()) -> dict[str, Any]:
    """The request `_meta` of a conditional `tools/call` (docs/protocol.md section 3), listing the delta
    formats the caller can apply when it can apply any (section 11)."""
    block: dict[str, Any] = {"etag": etag}
    if accept_delta:
        block[ACCEPT_DELTA_KEY] = list(accept_delta)
    return {key: block}


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


class DeltaReply(BaseModel):
    """The delta reply of docs/protocol.md section 11, in wire field names: no content, the stub
    structured content of a not-modified reply, and a block carrying the new tag and the delta."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    content: list[Any] = Field(default_factory=list)
    structured_content: dict[str, Any] | None = Field(default=None, alias="structuredContent")
    is_error: Literal[False] = Field(default=False, alias="isError")
    meta: dict[str, Any] = Field(alias="_meta")

    @classmethod
    def build(cls, block: CacheBlock, delta: DeltaBlock, kind: str | None, key: str = META_KEY) -> DeltaReply:
        """`block`: the new answer's (its tag, ttl and scope); `kind` as for `NotModifiedReply.build`."""
        stamped = block.model_copy(update={"not_modified": False, "delta": delta})
        return cls(
            structured_content={"kind": kind} if kind is not None else None,
            meta={key: stamped.to_wire()},
        )

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)
