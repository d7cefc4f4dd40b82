"""How a `RedisStore` record travels: an item's hash fields to and from `Item`, and the scripts' arguments.

Pure functions of bytes and values, apart from Redis: the store's I/O stays in `mcpcache.stores.redis`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from mcpcache.stores.items import Item, Match, body_checksum, decode_meta


def expiry(expires_at: float | None) -> tuple[str, str]:
    """The expiry in whole milliseconds for Redis, and exactly as given for the item's hash."""
    if expires_at is None:
        return "", ""
    return str(math.ceil(expires_at * 1000)), repr(float(expires_at))


def tag(tag: str | None) -> tuple[str, str]:
    """A tag for the script: whether there is one, and its text (None and "" are different tags)."""
    return ("0", "") if tag is None else ("1", tag)


def matching(match: Match) -> tuple[str, str, str, str, str]:
    """A `Match` as the script's arguments: the group, then whether a server is given and which, and the tool."""
    server, tool = match.server, match.tool
    return match.group, "0" if server is None else "1", server or "", "0" if tool is None else "1", tool or ""


def scan_cursor(cursor: str | None) -> str:
    if cursor is None:
        return "0"
    if not cursor.isdigit():
        raise ValueError(f"not a listing cursor of this store: {cursor!r}")
    return cursor


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def version(fields: Sequence[object]) -> bytes:
    """The save version a load or peek read (the last field), for `drop_corrupt`."""
    version = fields[-1] if fields else None
    return version if isinstance(version, bytes) else b""


def decode_fields(fields: Sequence[object], *, verify: bool = True) -> tuple[Item | None, str]:
    """The item from its hash fields, or None and what is wrong: a field missing or malformed, or a body
    that does not match its checksum (a record written before checksums were kept has none)."""
    if len(fields) != 11:
        return None, "unexpected fields"
    raw_meta, body, group, created, expiry, tag, stamp, checksum, server, tool = fields[:10]
    if not (
        isinstance(raw_meta, bytes)
        and isinstance(group, bytes)
        and isinstance(created, bytes)
        and isinstance(expiry, bytes)
        and isinstance(stamp, bytes)
        and (tag is None or isinstance(tag, bytes))
        and (server is None or isinstance(server, bytes))
        and (tool is None or isinstance(tool, bytes))
    ):
        return None, "a field is missing"
    if not isinstance(body, bytes):
        return None, "the body is missing"
    if not isinstance(checksum, bytes):
        return None, "the checksum is missing"
    meta = decode_meta(raw_meta)
    try:
        group_name = group.decode()
        tag_text = None if tag is None else tag.decode()
        created_at = float(created)
        expires_at = float(expiry) if expiry else None
        stamp_value = float(stamp)
        checksum_text = checksum.decode()
        server_label = "" if server is None else server.decode()
        tool_label = "" if tool is None else tool.decode()
    except ValueError:  # UnicodeDecodeError is a ValueError too
        return None, "a field is malformed"
    if meta is None:
        return None, "the metadata is not a JSON object"
    if not (math.isfinite(created_at) and math.isfinite(stamp_value)) or (
        expires_at is not None and math.isnan(expires_at)
    ):
        return None, "a time is not a number"
    if verify and body_checksum(body) != checksum_text:
        return None, "the body does not match its checksum"
    item = Item(
        meta, body, group_name, created_at, expires_at, tag_text, stamp_value, checksum_text, server_label, tool_label
    )
    return item, ""


def glob_escape(text: str) -> str:
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)
