"""The cache block and the not-modified reply (docs/protocol.md sections 1, 3 and 4).

A reader of a peer's `_meta` must be tolerant: whatever JSON arrives, parsing gives a block with safe
values or no block, never an exception. The table tests pin each tolerance rule of section 1; the
property tests say it holds for all JSON.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpcache.protocol import (
    EXTENSION_ID,
    MAX_TTL_MS,
    META_KEY,
    NOT_MODIFIED_KEY,
    TAG_ALGORITHM,
    CacheBlock,
    NotModifiedReply,
    answer_kind,
    conditional_request_meta,
    extension_settings,
    parse_cache_block,
    parse_etag,
    requested_etag,
    with_block,
)

TAG = 'W/"015abd7f5cc57a2dd94b7590f04ad808"'

# Examples are microseconds each; a loaded machine must not turn that into a deadline failure.
property_test = settings(deadline=None)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # unbounded: a peer's JSON may carry any integer
    | st.floats()  # NaN and infinities included: Python's json module reads them
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
# Python field names are in the mix on purpose: they are not wire names and must be ignored.
field_names = st.sampled_from(["ttlMs", "cacheScope", "etag", "notModified", "ttl_ms", "not_modified", "other"])
blocks = st.dictionaries(field_names, json_values, max_size=5) | json_values


def block(raw: Any) -> CacheBlock:
    parsed = parse_cache_block({META_KEY: raw})
    assert parsed is not None
    return parsed


# --- tolerant reading ------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [None, [], [{"ttlMs": 5}], "ttlMs=5", 5, 1.5, True], ids=repr)
def test_a_block_that_is_not_an_object_is_no_block(raw: Any) -> None:
    assert parse_cache_block({META_KEY: raw}) is None


@pytest.mark.parametrize("meta", [None, [], "x", 5, {}, {"other": {"ttlMs": 5}}], ids=repr)
def test_meta_without_a_block_is_no_block(meta: Any) -> None:
    assert parse_cache_block(meta) is None
    assert requested_etag(meta) is None


@pytest.mark.parametrize(
    ("ttl", "expected"),
    [
        (5000, 5000),
        (0, 0),
        (5000.0, 5000),
        (MAX_TTL_MS, MAX_TTL_MS),
        (MAX_TTL_MS + 1, MAX_TTL_MS),
        (10**30, MAX_TTL_MS),
        (1e30, MAX_TTL_MS),
        (-1, 0),
        (-1e30, 0),
        (-(10**30), 0),
        (5000.5, 0),
        (0.1, 0),
        ("5000", 0),
        ("", 0),
        (True, 0),
        (False, 0),
        ([5000], 0),
        ({"ms": 5000}, 0),
        (math.nan, 0),
        (math.inf, 0),
        (-math.inf, 0),
        (None, None),
    ],
    ids=repr,
)
def test_ttl_is_read_tolerantly(ttl: Any, expected: int | None) -> None:
    """Negative or non-integer reads as 0, above 24 h is clamped, null is absent (docs/protocol.md 1)."""
    assert block({"ttlMs": ttl}).ttl_ms == expected


def test_absent_ttl_is_absent() -> None:
    assert block({}).ttl_ms is None
    assert not block({}).cacheable
    assert block({"ttlMs": 0}).cacheable
    assert block({"etag": TAG}).cacheable


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ("public", "public"),
        ("private", "private"),
        ("session", "private"),
        ("PUBLIC", "private"),
        ("", "private"),
        (None, "private"),
        (1, "private"),
        (True, "private"),
        (["public"], "private"),
    ],
    ids=repr,
)
def test_only_an_explicit_public_is_public(scope: Any, expected: str) -> None:
    assert block({"cacheScope": scope}).cache_scope == expected
    assert block({}).cache_scope == "private"


@pytest.mark.parametrize(
    "etag",
    [123, 1.5, None, True, [TAG], {"etag": TAG}, "", "abc", 'W/""', 'W/"a\x01b"', "W/" + '"' + "a" * 1_000_000 + '"'],
    ids=lambda v: repr(v)[:30],
)
def test_a_malformed_etag_reads_as_absent(etag: Any) -> None:
    parsed = block({"etag": etag, "ttlMs": 5})
    assert parsed.etag is None
    assert parsed.ttl_ms == 5
    assert requested_etag({META_KEY: {"etag": etag}}) is None


def test_a_well_formed_etag_is_kept_as_sent() -> None:
    assert block({"etag": TAG}).etag == TAG
    assert block({"etag": '"strong"'}).etag == '"strong"'
    assert requested_etag(conditional_request_meta(TAG)) == TAG


@pytest.mark.parametrize("value", [True, False, "true", 1, 1.0, None, [True], {"v": True}], ids=repr)
def test_not_modified_only_for_literal_true(value: Any) -> None:
    assert block({NOT_MODIFIED_KEY: value}).not_modified is (value is True)


def test_unknown_fields_are_ignored() -> None:
    parsed = block({"ttlMs": 5, "future": {"x": 1}, "etag": TAG})
    assert parsed.to_wire() == {"ttlMs": 5, "cacheScope": "private", "etag": TAG}


def test_python_field_names_are_not_wire_names() -> None:
    """Only camelCase wire fields count: a peer's `not_modified` must not turn a full answer into a stub."""
    parsed = block({"not_modified": True, "ttl_ms": 5, "cache_scope": "public", "etag": TAG})
    assert parsed == CacheBlock(etag=TAG)
    assert not parsed.not_modified


@property_test
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=4), blocks)
def test_parsing_any_json_never_raises_and_gives_safe_values(meta: dict[str, Any], raw: Any) -> None:
    meta = {**meta, META_KEY: raw}
    parsed = parse_cache_block(meta)
    if not isinstance(raw, dict):
        assert parsed is None
        return
    assert parsed is not None
    assert (parsed.ttl_ms is None) == (raw.get("ttlMs") is None)
    assert parsed.ttl_ms is None or (isinstance(parsed.ttl_ms, int) and 0 <= parsed.ttl_ms <= MAX_TTL_MS)
    assert parsed.cache_scope in ("private", "public")
    assert parsed.etag is None or parse_etag(parsed.etag) == parsed.etag
    assert parsed.not_modified is (raw.get("notModified") is True)
    # What we write back is always a block we read the same way.
    assert parse_cache_block({META_KEY: parsed.to_wire()}) == parsed
    requested_etag(meta)


@property_test
@given(json_values)
def test_parsing_any_json_meta_never_raises(meta: Any) -> None:
    parse_cache_block(meta)
    requested_etag(meta)


@property_test
@given(
    st.one_of(st.none(), st.integers(min_value=0, max_value=MAX_TTL_MS)),
    st.sampled_from(["private", "public"]),
    st.one_of(st.none(), st.just(TAG)),
    st.booleans(),
)
def test_blocks_round_trip_through_the_wire(ttl: int | None, scope: str, etag: str | None, nm: bool) -> None:
    original = CacheBlock(ttl_ms=ttl, cache_scope=scope, etag=etag, not_modified=nm)  # type: ignore[arg-type]
    wire = original.to_wire()
    assert parse_cache_block({META_KEY: wire}) == original
    assert (NOT_MODIFIED_KEY in wire) is nm
    assert ("ttlMs" in wire) is (ttl is not None)
    assert ("etag" in wire) is (etag is not None)


def test_a_configured_meta_key_is_honoured() -> None:
    key = "io.example/cache"
    assert parse_cache_block({META_KEY: {"ttlMs": 5}}, key) is None
    assert parse_cache_block({key: {"ttlMs": 5}}, key) == CacheBlock(ttl_ms=5)
    assert requested_etag(conditional_request_meta(TAG, key), key) == TAG
    assert extension_settings(key)["metaKey"] == key


# --- writing ---------------------------------------------------------------------------------------


def test_with_block_keeps_every_other_key_and_copies() -> None:
    meta = {"other": 1, META_KEY: {"ttlMs": 1}}
    merged = with_block(meta, CacheBlock(ttl_ms=5, etag=TAG))
    assert merged == {"other": 1, META_KEY: {"ttlMs": 5, "cacheScope": "private", "etag": TAG}}
    assert meta == {"other": 1, META_KEY: {"ttlMs": 1}}
    assert with_block(None, CacheBlock()) == {META_KEY: {"cacheScope": "private"}}


def test_conditional_request_meta_is_section_3() -> None:
    assert conditional_request_meta(TAG) == {META_KEY: {"etag": TAG}}


def test_extension_settings() -> None:
    assert EXTENSION_ID == "io.github.mcpcache/revalidation"
    assert extension_settings() == {
        "metaKey": META_KEY,
        "notModifiedKey": NOT_MODIFIED_KEY,
        "tagAlgorithm": TAG_ALGORITHM,
    }


@pytest.mark.parametrize(
    ("structured", "kind"),
    [
        ({"kind": "doc"}, "doc"),
        ({"kind": 3}, None),
        ({"kind": None}, None),
        ({"other": "doc"}, None),
        ([{"kind": "doc"}], None),
        ("doc", None),
        (None, None),
    ],
    ids=repr,
)
def test_answer_kind_is_a_string_kind_or_none(structured: Any, kind: str | None) -> None:
    assert answer_kind(structured) == kind


def test_not_modified_reply_is_section_4() -> None:
    fresh = CacheBlock(ttl_ms=5000, cache_scope="private", etag=TAG)
    reply = NotModifiedReply.build(fresh, "notebook.read")
    assert reply.to_wire() == {
        "content": [],
        "structuredContent": {"kind": "notebook.read"},
        "isError": False,
        "_meta": {META_KEY: {"ttlMs": 5000, "cacheScope": "private", "etag": TAG, "notModified": True}},
    }


def test_not_modified_reply_without_structured_output_has_no_structured_content() -> None:
    wire = NotModifiedReply.build(CacheBlock(ttl_ms=0, etag=TAG, cache_scope="public"), None).to_wire()
    assert "structuredContent" not in wire
    assert wire["content"] == []
    assert wire["_meta"][META_KEY] == {"ttlMs": 0, "cacheScope": "public", "etag": TAG, "notModified": True}


def test_the_ttl_bound_is_the_sdks() -> None:
    from mcp.client.caching import MAX_TTL_MS as SDK_MAX_TTL_MS

    from mcpcache.protocol import MAX_TTL_MS

    assert MAX_TTL_MS == SDK_MAX_TTL_MS
