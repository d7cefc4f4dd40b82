"""Reading tool results exactly as a peer sent them, without the tolerant reading a cache applies.

A conformance check must see what was sent: `parse_cache_block` reads a malformed `ttlMs` as 0 so that a
cache never breaks, which is right for a cache and wrong for a judge. These helpers look at the raw JSON
of a `tools/call` result (a dict, as it came off the wire) and never raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import RootModel

from mcpcache.protocol import SERVER_INFO_KEY, parse_etag


class RawResult(RootModel[dict[str, Any]]):
    """A result type for `session.send_request` that keeps the JSON as it arrived (after the SDK's own
    check that it is a result of the method it answers)."""


def meta_of(result: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = result.get("_meta")
    return meta if isinstance(meta, Mapping) else {}


def raw_block(result: Mapping[str, Any], meta_key: str) -> object:
    """The cache block as sent (any JSON value), or None when the key is absent."""
    return meta_of(result).get(meta_key)


def block_dict(result: Mapping[str, Any], meta_key: str) -> Mapping[str, Any] | None:
    block = raw_block(result, meta_key)
    return block if isinstance(block, Mapping) else None


def sent_tag(result: Mapping[str, Any], meta_key: str) -> str | None:
    """The well-formed tag the result carries, or None."""
    block = block_dict(result, meta_key)
    return parse_etag(block.get("etag")) if block is not None else None


def claims_not_modified(result: Mapping[str, Any], meta_key: str) -> bool:
    """Whether the result says "not modified" in any form (a client must read `"yes"` or 1 as a claim too)."""
    block = block_dict(result, meta_key)
    return block is not None and "notModified" in block and block["notModified"] not in (False, None)


def is_error(result: Mapping[str, Any]) -> bool:
    return result.get("isError") is True


def other_meta(result: Mapping[str, Any], meta_key: str) -> dict[str, Any]:
    """The result's `_meta` as a tag covers it: without the cache block and the SDK's serverInfo."""
    return {k: v for k, v in meta_of(result).items() if k not in (meta_key, SERVER_INFO_KEY)}


def answer_of(result: Mapping[str, Any], meta_key: str) -> dict[str, Any]:
    """The parts of a result a not-modified reply leaves out, as a tag covers them."""
    return {
        "content": result.get("content"),
        "structuredContent": result.get("structuredContent"),
        "_meta": other_meta(result, meta_key) or None,
    }


def differences(a: Mapping[str, Any], b: Mapping[str, Any], meta_key: str) -> list[str]:
    """What differs between two answers, in words: `content`, `structuredContent`, `_meta key K: x -> y`."""
    changed: list[str] = []
    for name in ("content", "structuredContent"):
        if a.get(name) != b.get(name):
            changed.append(name)
    meta_a, meta_b = other_meta(a, meta_key), other_meta(b, meta_key)
    for key in sorted(set(meta_a) | set(meta_b)):
        if meta_a.get(key) != meta_b.get(key):
            changed.append(f"_meta key {key}: {short(meta_a.get(key))} -> {short(meta_b.get(key))}")
    return changed


def meta_only_differences(a: Mapping[str, Any], b: Mapping[str, Any], meta_key: str) -> bool:
    found = differences(a, b, meta_key)
    return bool(found) and all(item.startswith("_meta key ") for item in found)


def short(value: object, limit: int = 40) -> str:
    """A value for a one-line detail: its repr, cut with an ellipsis."""
    text = "absent" if value is None else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}" if count == 1 else f"{count:,} {word}s"
