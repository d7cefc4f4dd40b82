"""Stored answers: how a `CallToolResult` becomes a store body and back, and what a lookup found."""

from __future__ import annotations

from dataclasses import dataclass

import pydantic_core
from mcp_types import CallToolResult
from pydantic import ValidationError

from mcpcache.client.tier import Decoded
from mcpcache.keys import Arm
from mcpcache.policy import EntryMeta
from mcpcache.protocol import NOT_MODIFIED_KEY, CacheBlock
from mcpcache.stores.base import Item


def encode_result(result: CallToolResult) -> bytes:
    # The serializer's bytes directly: model_dump_json would decode them to a str only to encode it again.
    return result.__pydantic_serializer__.to_json(result, by_alias=True, exclude_none=True)


def decode_result(body: bytes) -> CallToolResult | None:
    """A new, private `CallToolResult` from stored bytes; None for bytes that are not one."""
    # Parsing to Python values first and validating those measured faster than model_validate_json on
    # answers from 1 KB to 10 MB; pydantic_core keeps integers above 64 bits exact.
    try:
        return CallToolResult.model_validate(pydantic_core.from_json(body))
    except (ValidationError, ValueError):
        return None


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
    labels it with `server` (`mcpcache.keys.readable_server`) and the tool, for people to list it by."""
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
    """A stored answer this partition may be served: where it is, what is known of it, and the item (its
    body empty when `decoded` holds the answer: the decoded tier's copy of exactly this stored version)."""

    key: str
    arm: Arm
    entry: EntryMeta
    item: Item
    decoded: Decoded | None = None
    server_id: str = ""
    call: str = ""
    """The call's mark (`CallIdentity.call_mark_key`), by which an invalidation finds its decoded copy."""

    @property
    def size(self) -> int:
        """The stored body's length."""
        return self.decoded.size if self.decoded is not None else len(self.item.body)
