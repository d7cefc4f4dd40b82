"""The stale windows of the cache block (docs/protocol.md section 12), read tolerantly: a malformed window is
ignored and the rest of the block stands, a window is clamped like `ttlMs`, and 0 is written as absent."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpcache.protocol import MAX_TTL_MS, META_KEY, CacheBlock, NotModifiedReply, parse_cache_block

TAG = 'W/"0123456789abcdef0123456789abcdef"'
WINDOWS = ("staleWhileRevalidateMs", "staleIfErrorMs")


def read(fields: dict[str, Any]) -> CacheBlock:
    block = parse_cache_block({META_KEY: {"ttlMs": 5000, "etag": TAG, "cacheScope": "public", **fields}})
    assert block is not None
    return block


@pytest.mark.parametrize("name", WINDOWS)
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (30_000, 30_000),
        (0, 0),
        (30_000.0, 30_000),
        (-1, 0),
        (-1e30, 0),
        (MAX_TTL_MS + 1, MAX_TTL_MS),
        (10**30, MAX_TTL_MS),
        (1e30, MAX_TTL_MS),
        (1.5, None),
        ("30000", None),
        (True, None),
        (False, None),
        ([30_000], None),
        ({"ms": 1}, None),
        (math.nan, None),
        (math.inf, None),
        (None, None),
    ],
    ids=repr,
)
def test_a_window_is_read_tolerantly_and_the_block_stands(name: str, value: Any, expected: int | None) -> None:
    block = read({name: value})
    attribute = "stale_while_revalidate_ms" if name == "staleWhileRevalidateMs" else "stale_if_error_ms"
    assert getattr(block, attribute) == expected
    assert (block.ttl_ms, block.etag, block.cache_scope) == (5000, TAG, "public")


def test_absent_windows_are_absent_and_the_wire_form_is_unchanged() -> None:
    block = read({})
    assert block.stale_while_revalidate_ms is None
    assert block.stale_if_error_ms is None
    assert block.to_wire() == {"ttlMs": 5000, "etag": TAG, "cacheScope": "public"}
    assert read(dict.fromkeys(WINDOWS, 0)).to_wire() == block.to_wire()  # 0 says what absence says


def test_windows_travel_on_full_answers_and_not_modified_replies() -> None:
    block = read({"staleWhileRevalidateMs": 30_000, "staleIfErrorMs": 600_000})
    wire = block.to_wire()
    assert wire["staleWhileRevalidateMs"] == 30_000
    assert wire["staleIfErrorMs"] == 600_000
    assert parse_cache_block({META_KEY: wire}) == block
    reply = NotModifiedReply.build(block, "doc").to_wire()["_meta"][META_KEY]
    assert reply["notModified"] is True
    assert reply["staleWhileRevalidateMs"] == 30_000


def test_python_names_are_not_wire_names() -> None:
    block = read({"stale_while_revalidate_ms": 30_000, "stale_if_error_ms": 1})
    assert block.stale_while_revalidate_ms is None
    assert block.stale_if_error_ms is None


@given(st.dictionaries(st.sampled_from(WINDOWS), st.none() | st.booleans() | st.integers() | st.floats() | st.text()))
def test_any_window_value_reads_as_absent_or_a_bounded_count(fields: dict[str, Any]) -> None:
    block = read(fields)
    for value in (block.stale_while_revalidate_ms, block.stale_if_error_ms):
        assert value is None or (type(value) is int and 0 <= value <= MAX_TTL_MS)
