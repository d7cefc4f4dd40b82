"""The wire shapes of delta replies (docs/protocol.md section 11), read as tolerantly as the rest of the
block: `acceptDelta` on a conditional request, the `delta` field of a reply's block (which reads as
`MalformedDelta`, never as absent, when it is there but broken), the delta reply, the advertised formats."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpcache.delta import FORMAT
from mcpcache.protocol import (
    MAX_ACCEPTED_FORMATS,
    META_KEY,
    NO_CONDITIONS,
    CacheBlock,
    Conditions,
    DeltaBlock,
    DeltaReply,
    MalformedDelta,
    accepted_delta_formats,
    conditional_request_meta,
    extension_settings,
    parse_cache_block,
    parse_delta,
    read_conditions,
)

TAG = 'W/"015abd7f5cc57a2dd94b7590f04ad808"'
BASE = 'W/"ffffffffffffffffffffffffffffffff"'
DIGEST = "sha256:" + "0f" * 32
GOOD = {"base": BASE, "format": FORMAT, "ops": [{"op": "remove", "path": "/content/0"}], "digest": DIGEST}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


# The conditional request ---------------------------------------------------------------------------


def test_a_conditional_request_lists_the_formats_beside_the_tag() -> None:
    assert conditional_request_meta(TAG, accept_delta=[FORMAT]) == {META_KEY: {"etag": TAG, "acceptDelta": [FORMAT]}}
    assert conditional_request_meta(TAG) == {META_KEY: {"etag": TAG}}  # section 3, unchanged
    assert read_conditions(conditional_request_meta(TAG, accept_delta=[FORMAT])) == Conditions(TAG, (FORMAT,))


@pytest.mark.parametrize(
    ("listed", "read"),
    [
        ([FORMAT], (FORMAT,)),
        ([], ()),
        (FORMAT, ()),  # only an array counts
        ({"0": FORMAT}, ()),
        (None, ()),
        ([FORMAT, FORMAT, "other/1"], (FORMAT, "other/1")),
        ([1, None, "", "x" * 129, FORMAT, ["nested"]], (FORMAT,)),
        ([f"f/{n}" for n in range(40)], tuple(f"f/{n}" for n in range(MAX_ACCEPTED_FORMATS))),
    ],
    ids=repr,
)
def test_accept_delta_is_read_tolerantly(listed: Any, read: tuple[str, ...]) -> None:
    assert accepted_delta_formats({META_KEY: {"etag": TAG, "acceptDelta": listed}}) == read


def test_formats_without_a_well_formed_tag_ask_for_nothing() -> None:
    assert read_conditions({META_KEY: {"acceptDelta": [FORMAT]}}) == NO_CONDITIONS
    assert read_conditions({META_KEY: {"etag": "unquoted", "acceptDelta": [FORMAT]}}) == NO_CONDITIONS
    assert read_conditions({"other": {"etag": TAG, "acceptDelta": [FORMAT]}}) == NO_CONDITIONS
    assert read_conditions({"k": {"etag": TAG, "acceptDelta": [FORMAT]}}, "k") == Conditions(TAG, (FORMAT,))


@settings(deadline=None)
@given(json_values, json_values)
def test_reading_a_request_never_raises(etag: Any, listed: Any) -> None:
    conditions = read_conditions({META_KEY: {"etag": etag, "acceptDelta": listed}})
    assert all(isinstance(name, str) for name in conditions.accept_delta)


# The delta block ------------------------------------------------------------------------------------


def test_a_well_formed_delta_reads_as_a_delta_block_and_writes_back_the_same() -> None:
    block = parse_cache_block({META_KEY: {"ttlMs": 5000, "etag": TAG, "delta": GOOD}})
    assert block is not None
    assert block.delta == DeltaBlock(**GOOD)
    assert block.to_wire()["delta"] == GOOD
    assert parse_cache_block({META_KEY: {"etag": TAG}}).delta is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "the delta is null, not an object"),
        ([GOOD], "the delta is an array, not an object"),
        ("ops", "the delta is a string, not an object"),
        (GOOD | {"base": "unquoted"}, "its base is not a well-formed entity tag"),
        ({k: v for k, v in GOOD.items() if k != "base"}, "its base is not a well-formed entity tag"),
        (GOOD | {"format": ""}, "its format is not a name"),
        (GOOD | {"format": 1}, "its format is not a name"),
        (GOOD | {"ops": {"op": "remove"}}, "its ops are not an array"),
        (GOOD | {"digest": "sha256:" + "0F" * 32}, "its digest is not sha256:<64 lowercase hex digits>"),
        (GOOD | {"digest": "xxh3:" + "0f" * 16}, "its digest is not sha256:<64 lowercase hex digits>"),
    ],
    ids=repr,
)
def test_a_malformed_delta_is_never_read_as_absent(raw: Any, reason: str) -> None:
    """A reply carrying one has a stub in place of the answer: read as "no delta", the stub would pass
    for the answer. It reads as malformed, which a client answers by repeating the call without a tag."""
    block = parse_cache_block({META_KEY: {"etag": TAG, "delta": raw}})
    assert block is not None
    assert block.delta == MalformedDelta(reason=reason)
    assert "delta" not in block.to_wire()  # read, never written


@settings(deadline=None)
@given(st.dictionaries(st.sampled_from(["base", "format", "ops", "digest", "other"]), json_values) | json_values)
def test_reading_a_delta_never_raises(raw: Any) -> None:
    assert isinstance(parse_delta(raw), DeltaBlock | MalformedDelta)
    block = parse_cache_block({META_KEY: {"delta": raw}})
    assert block is not None
    assert block.delta is not None


# The reply and the capability -------------------------------------------------------------------------


def test_the_delta_reply_is_the_not_modified_stub_with_a_delta_instead_of_the_flag() -> None:
    block = CacheBlock(ttl_ms=5000, cache_scope="private", etag=TAG, not_modified=True)
    reply = DeltaReply.build(block, DeltaBlock(**GOOD), "notebook.read").to_wire()
    assert reply == {
        "content": [],
        "structuredContent": {"kind": "notebook.read"},
        "isError": False,
        "_meta": {META_KEY: {"ttlMs": 5000, "cacheScope": "private", "etag": TAG, "delta": GOOD}},
    }
    assert "structuredContent" not in DeltaReply.build(block, DeltaBlock(**GOOD), None).to_wire()


def test_the_formats_a_server_sends_are_advertised_only_when_it_sends_any() -> None:
    assert "deltaFormats" not in extension_settings()
    assert extension_settings(delta_formats=[FORMAT])["deltaFormats"] == [FORMAT]
