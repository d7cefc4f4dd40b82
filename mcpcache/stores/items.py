"""What a store holds and answers with: items, usage, listings and limits, and the small encodings every
store shares (the body's checksum, the metadata's JSON, listing cursors). The interface that moves them
is `mcpcache.stores.base.Store`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import xxhash


@dataclass(frozen=True, slots=True)
class Item:
    meta: Mapping[str, Any]
    body: bytes
    group: str = ""
    created_at: float = 0.0
    expires_at: float | None = None
    """Wall-clock epoch seconds after which the store may drop the item; None keeps it until evicted."""
    tag: str | None = None
    """The version of the body (for tool answers, the entity tag); what `update_meta(if_tag=...)` compares."""
    stamp: float = 0.0
    """When the request behind this item was sent: a save never replaces an item with a later stamp."""
    checksum: str = field(default="", compare=False)
    """`body_checksum(body)` as the store recorded it; filled on load, ignored on save. Not compared: an item
    loaded back equals the item saved."""
    server: str = ""
    """A label a person can read and list by: for a tool answer, the server it came from ("" for none)."""
    tool: str = ""
    """A label a person can read and list by: for a tool answer, the tool's name ("" for none)."""

    @property
    def size(self) -> int:
        """What the item counts against a byte bound (body plus encoded metadata; not the tag, stamp or labels)."""
        return len(self.body) + len(encode_meta(self.meta))


@dataclass(frozen=True, slots=True)
class Usage:
    items: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Match:
    """Which items a listing, a count or a removal covers: one group and, when given, one server and one tool
    (exact labels, see `Item.server` and `Item.tool`)."""

    group: str
    server: str | None = None
    tool: str | None = None

    def matches(self, group: str, server: str, tool: str) -> bool:
        return (
            group == self.group
            and (self.server is None or server == self.server)
            and (self.tool is None or tool == self.tool)
        )


@dataclass(frozen=True, slots=True)
class Listed:
    """One item of a listing: its key, the item without its body (`body=b""`), and what it counts against a
    byte bound (`Item.size` of the item as stored)."""

    key: str
    item: Item
    size: int


@dataclass(frozen=True, slots=True)
class Page:
    entries: tuple[Listed, ...]
    cursor: str | None
    """Where the next page starts (opaque; pass it back as is), or None when the walk is done."""


DEFAULT_PAGE_SIZE = 200


def position_cursor(server: str, tool: str, key: str) -> str:
    """The cursor of a listing in (server, tool, key) order that continues after that position."""
    return orjson.dumps([server, tool, key]).decode()


def cursor_position(cursor: str | None) -> tuple[str, str, str] | None:
    """The position `position_cursor` wrote (None: from the start); any other string raises ValueError."""
    if cursor is None:
        return None
    try:
        value = orjson.loads(cursor)
    except orjson.JSONDecodeError:
        value = None
    if not (isinstance(value, list) and len(value) == 3 and all(isinstance(part, str) for part in value)):
        raise ValueError(f"not a listing cursor of this store: {cursor!r}")
    return value[0], value[1], value[2]


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """Bounds a store enforces on save; None means unbounded."""

    max_bytes: int | None = None
    max_items: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_items"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")


DEFAULT_SECONDS_PER_MB = 0.05
"""What a store operation is allowed for every MB (10^6 bytes) of body it moves, on top of its fixed deadline
or timeout. Saving or loading a body ran at 7 to 15 ms per MB on SQLite and Redis on a loaded 2-core
machine (docs/benchmarks.md, section 8), so this leaves three to seven times that; fetching the same MB
from a server over HTTP cost 50 to 180 ms there, so waiting on a store that freezes mid-transfer costs
less than the fetch it was meant to save."""


def transfer_budget_s(fixed_s: float, seconds_per_mb: float, nbytes: int, most_bytes: int) -> float:
    """How long an operation moving `nbytes` of body may take: `fixed_s` (what any operation gets, however
    small) plus `seconds_per_mb` for every MB. `nbytes` counts at most `most_bytes`: a size read from a
    record is a claim, and a store that freezes must not get a long wait because a record claims to be huge."""
    moved = min(max(nbytes, 0), max(most_bytes, 0))
    return fixed_s + seconds_per_mb * moved / 1_000_000


def body_checksum(body: bytes) -> str:
    """The checksum a store keeps with a body and verifies on every load: xxh3_64, as 16 hex digits."""
    return xxhash.xxh3_64_hexdigest(body)


def check_stamp(stamp: float) -> float:
    """The stamp as a float; a NaN or infinite stamp cannot be ordered and is refused with ValueError."""
    value = float(stamp)
    if not math.isfinite(value):
        raise ValueError(f"stamp must be a finite number, got {stamp!r}")
    return value


def encode_meta(meta: Mapping[str, Any]) -> bytes:
    return orjson.dumps(dict(meta))


def decode_meta(raw: bytes | str) -> dict[str, Any] | None:
    """The metadata object, or None when the bytes are not a JSON object (a corrupt record)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
