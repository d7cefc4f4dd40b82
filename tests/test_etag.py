"""Canonical bytes and weak entity tags (docs/protocol.md section 2), as units and as properties.

The property tests state the "for all"s the protocol depends on: key order never changes a tag, array
order always does, every tag has one format, weak comparison is an equivalence on well-formed tags and
equals nothing for malformed ones, and nothing a peer sends makes the tag functions raise anything but
`CanonicalizationError`.
"""

from __future__ import annotations

import decimal
import json
import math
import re
from typing import Any

import orjson
import pytest
import xxhash
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mcpcache.canonical import CanonicalizationError, canonical_json
from mcpcache.etag import (
    content_tag,
    meta_without_block,
    parsed_raw_tag_sized,
    raw_domain,
    raw_tag_sized,
    tag_of_bytes,
    validator_tag,
    wire_content,
)
from mcpcache.protocol import MAX_ETAG_LENGTH, META_KEY, CacheBlock, format_tag, parse_etag, weak_equal, with_block

# Examples are microseconds each; a loaded machine must not turn that into a deadline failure.
property_test = settings(deadline=None)

TAG_FORMAT = re.compile(r'W/"[0-9a-f]{32}"')

# orjson's integer range is 64 bits; JSON numbers outside it are covered by the error tests below.
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)

well_formed_tags = st.builds(format_tag, st.text(alphabet="0123456789abcdef", min_size=32, max_size=32))


def _reordered(value: Any, draw_permutation: Any) -> Any:
    """The same JSON value with every object's keys inserted in another order; arrays untouched."""
    if isinstance(value, dict):
        keys = draw_permutation(list(value))
        return {key: _reordered(value[key], draw_permutation) for key in keys}
    if isinstance(value, list):
        return [_reordered(item, draw_permutation) for item in value]
    return value


# --- canonical bytes -------------------------------------------------------------------------------


def test_canonical_bytes_are_sorted_compact_utf8() -> None:
    value = {"b": 1, "a": [3, 1, 2], "é": {"z": None, "y": True}, "c": "ü"}
    assert canonical_json(value) == '{"a":[3,1,2],"b":1,"c":"ü","é":{"y":true,"z":null}}'.encode()


@property_test
@given(st.data(), json_values)
def test_key_order_never_changes_the_bytes_or_the_tag(data: st.DataObject, value: Any) -> None:
    reordered = _reordered(value, lambda keys: data.draw(st.permutations(keys)))
    assert canonical_json(reordered) == canonical_json(value)
    assert content_tag([], reordered) == content_tag([], value)


@property_test
@given(json_values)
def test_canonical_bytes_are_a_fixpoint_of_parsing(value: Any) -> None:
    """What a peer parses and serialises again gives the same bytes: the tag survives a process hop."""
    once = canonical_json(value)
    assert json.loads(once) == value
    assert canonical_json(json.loads(once)) == once


@property_test
@given(st.data(), st.lists(json_values, min_size=2, max_size=6))
def test_array_order_is_kept_and_changes_the_tag(data: st.DataObject, items: list[Any]) -> None:
    assume(len({canonical_json(item) for item in items}) == len(items))
    shuffled = data.draw(st.permutations(items))
    assume(shuffled != items)
    assert json.loads(canonical_json(items)) == items
    assert canonical_json(shuffled) != canonical_json(items)
    assert content_tag([], {"rows": shuffled}) != content_tag([], {"rows": items})
    assert content_tag([{"type": "text", "text": json.dumps(x)} for x in shuffled], None) != content_tag(
        [{"type": "text", "text": json.dumps(x)} for x in items], None
    )


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        math.inf,
        -math.inf,
        {"a": [1, {"b": math.nan}]},
        [None, (0.5, -math.inf)],
        {"null": None, "x": math.inf},
        {1, 2},
        b"bytes",
        1 + 2j,
        object(),
        decimal.Decimal("1.5"),
        2**64,
        -(2**63) - 1,
        {"n": 10**30},
        {1: "a"},
        {"nested": {(1, 2): "a"}},
    ],
    ids=lambda value: re.sub(r" at 0x[0-9a-f]+", "", repr(value)),  # the same ids in every xdist worker
)
def test_values_without_a_json_form_raise_canonicalization_error(value: Any) -> None:
    with pytest.raises(CanonicalizationError):
        canonical_json(value)
    with pytest.raises(CanonicalizationError):
        content_tag([], value)


def test_canonicalization_error_is_a_value_error() -> None:
    """Callers that already catch ValueError keep working."""
    assert issubclass(CanonicalizationError, ValueError)


@property_test
@given(json_values)
def test_tag_functions_raise_nothing_but_canonicalization_error(value: Any) -> None:
    # Arbitrary JSON-shaped input in every position a peer controls.
    for call in (
        lambda: content_tag([], value),
        lambda: content_tag([value] if isinstance(value, dict) else [], None),
        lambda: validator_tag("tool", value if isinstance(value, dict) else {"v": value}, value),
        lambda: content_tag([], None, {"example.com/x": value, META_KEY: value}),
    ):
        try:
            tag = call()
        except CanonicalizationError:
            continue
        assert TAG_FORMAT.fullmatch(tag)


# --- tags ------------------------------------------------------------------------------------------


@property_test
@given(json_values, json_objects)
def test_every_tag_has_the_weak_32_hex_format(structured: Any, arguments: dict[str, Any]) -> None:
    assert TAG_FORMAT.fullmatch(content_tag([{"type": "text", "text": "x"}], structured))
    assert TAG_FORMAT.fullmatch(validator_tag("read", arguments, structured))
    assert parse_etag(content_tag([], structured)) is not None


def test_tags_are_pinned_across_versions_and_processes() -> None:
    """Golden values: if these change, every tag a client holds stops matching (docs/protocol.md)."""
    assert content_tag([{"type": "text", "text": "hi"}], None) == 'W/"777ef1165351296e41904b7c10e24190"'
    assert content_tag([], {"kind": "doc"}) == 'W/"ebe6b4f51259e5e19b8b6742dee7185e"'
    assert (
        content_tag([{"type": "text", "text": "x = 1"}], {"kind": "cell"}, {"io.jupyter-mcp/cell_id": "c1"})
        == 'W/"480068965a067df922cd8150c0489620"'
    )
    assert validator_tag("t", {"key": "a"}, 3) == 'W/"26e81017862b89ebf2e4f9e019bb49f9"'


def test_the_canonical_document_spelled_out() -> None:
    """The exact bytes a peer must hash to compute the same tag (docs/protocol.md gives this example)."""
    document = (
        b'{"content":[{"text":"x = 1","type":"text"}],'
        b'"meta":{"io.jupyter-mcp/cell_id":"c1"},'
        b'"structuredContent":{"kind":"cell"}}'
    )
    meta = {"io.jupyter-mcp/cell_id": "c1", META_KEY: {"ttlMs": 5000, "cacheScope": "private"}}
    tag = content_tag([{"type": "text", "text": "x = 1"}], {"kind": "cell"}, meta)
    assert tag == f'W/"{xxhash.xxh3_128_hexdigest(document)}"'
    # No _meta (or only the block, or an empty one) is null, not {}.
    assert content_tag([], None) == tag_of_bytes(b'{"content":[],"meta":null,"structuredContent":null}')


def test_the_tag_covers_content_and_structured_content() -> None:
    text = [{"type": "text", "text": "a"}]
    assert content_tag(text, None) != content_tag(text, {})
    assert content_tag(text, {"k": 1}) != content_tag(text, {"k": 2})
    assert content_tag(text, None) != content_tag([{"type": "text", "text": "b"}], None)
    # Content blocks are read as sent: a pydantic block and its wire dict give one tag.
    from mcp_types import ImageContent, TextContent

    blocks = [TextContent(type="text", text="a"), ImageContent(type="image", data="AAAA", mime_type="image/png")]
    assert content_tag(blocks, None) == content_tag(wire_content(blocks), None)
    assert wire_content(blocks)[1] == {"type": "image", "data": "AAAA", "mimeType": "image/png"}


def test_the_tag_covers_meta_but_not_the_cache_block() -> None:
    """A read_cell answer: the same cell text, another cell id in `_meta`, so another answer."""
    text = [{"type": "text", "text": "x = 1"}]
    first = content_tag(text, None, {"io.jupyter-mcp/cell_id": "c1"})
    assert first != content_tag(text, None, {"io.jupyter-mcp/cell_id": "c2"})
    assert first != content_tag(text, None)
    assert first != content_tag(text, None, {"io.jupyter-mcp/cell_id": "c1", "other": 1})
    # Whatever block is on it, under the default key or a configured one, the tag is the same.
    block = CacheBlock(ttl_ms=5000, etag=first)
    stamped = with_block({"io.jupyter-mcp/cell_id": "c1"}, block)
    assert content_tag(text, None, stamped) == first
    assert content_tag(text, None, {**stamped, META_KEY: "not even an object"}) == first
    own = with_block({"io.jupyter-mcp/cell_id": "c1"}, block, "io.example/cache")
    assert content_tag(text, None, own, meta_key="io.example/cache") == first
    # ...but under another key than the configured one it is just another `_meta` key.
    assert content_tag(text, None, own) != first
    # Empty, absent, and "only the block" are all null.
    assert content_tag(text, None, {}) == content_tag(text, None, None) == content_tag(text, None, {META_KEY: {}})
    assert meta_without_block({META_KEY: {"etag": first}}) is None
    assert meta_without_block({"a": 1, META_KEY: {}}) == {"a": 1}


def test_a_meta_without_a_json_form_raises_canonicalization_error() -> None:
    with pytest.raises(CanonicalizationError):
        content_tag([], None, {"x": math.nan})
    with pytest.raises(CanonicalizationError):
        content_tag([], None, {"x": object()})
    with pytest.raises(CanonicalizationError):
        content_tag([], None, {1: "non-str key"})  # type: ignore[dict-item]
    # The block is left out before anything is dumped: whatever is in it cannot matter.
    assert content_tag([], None, {META_KEY: math.nan}) == content_tag([], None)


text_blocks = st.builds(lambda text: {"type": "text", "text": text}, st.text())
any_blocks = st.one_of(text_blocks, json_objects)
metas = st.none() | st.dictionaries(st.text(max_size=8) | st.just(META_KEY), json_values, max_size=5)


@property_test
@given(st.lists(any_blocks, max_size=5), json_values, metas)
def test_the_streamed_tag_is_the_hash_of_one_sorted_dump(
    content: list[dict[str, Any]], structured: Any, meta: dict[str, Any] | None
) -> None:
    """The pieces fed to xxh3 one by one make exactly one `orjson.dumps(..., OPT_SORT_KEYS)` of the
    whole document, so another implementation may build the document and hash it in one go."""
    rest = {key: value for key, value in (meta or {}).items() if key != META_KEY}
    document = {"content": content, "structuredContent": structured, "meta": rest or None}
    assert content_tag(content, structured, meta) == format_tag(
        xxhash.xxh3_128_hexdigest(orjson.dumps(document, option=orjson.OPT_SORT_KEYS))
    )


@property_test
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6) | json_values)
def test_a_raw_tag_streamed_piece_by_piece_is_the_hash_of_one_dump(value: Any) -> None:
    """The raw value's JSON is fed to xxh3 in pieces (no multi-megabyte buffer); it hashes the same bytes
    as one `orjson.dumps`, with or without the walk that proves the value exact."""
    domain = raw_domain(tool="t")
    data = orjson.dumps(value)
    expected = (format_tag(xxhash.xxh3_128_hexdigest(domain + data)), len(data))
    assert parsed_raw_tag_sized(domain, value) == expected
    assert raw_tag_sized(domain, value) == expected


def test_a_parsed_value_with_an_integer_beyond_64_bits_has_no_raw_tag() -> None:
    with pytest.raises(CanonicalizationError):
        parsed_raw_tag_sized(b"d", {"a": [1, {"b": 2**64}]})
    with pytest.raises(CanonicalizationError):
        raw_tag_sized(b"d", {"a": [1, {"b": 2**64}]})


@property_test
@given(st.lists(any_blocks, max_size=3), json_values, metas, st.builds(CacheBlock, ttl_ms=st.integers(0, 10**6)))
def test_stamping_never_changes_the_tag(
    content: list[dict[str, Any]], structured: Any, meta: dict[str, Any] | None, block: CacheBlock
) -> None:
    tag = content_tag(content, structured, meta)
    stamped = with_block(meta, block.model_copy(update={"etag": tag}))
    assert content_tag(content, structured, stamped) == tag


def test_validator_tags_are_apart_from_content_tags() -> None:
    """A validator tag names (tool, arguments, version); it never collides with an answer's own tag."""
    assert validator_tag("t", {"key": "a"}, 1) != validator_tag("t", {"key": "a"}, 2)
    assert validator_tag("t", {"key": "a"}, 1) != validator_tag("u", {"key": "a"}, 1)
    assert validator_tag("t", {"key": "a"}, 1) != validator_tag("t", {"key": "b"}, 1)
    assert validator_tag("t", {"b": 1, "a": 2}, 1) == validator_tag("t", {"a": 2, "b": 1}, 1)
    document = {"tool": "t", "arguments": {"key": "a"}, "version": 1}
    assert validator_tag("t", {"key": "a"}, 1) != tag_of_bytes(canonical_json(document))
    assert validator_tag("t", None, 1) == validator_tag("t", {}, 1)


# --- weak comparison -------------------------------------------------------------------------------


@property_test
@given(well_formed_tags)
def test_a_well_formed_tag_equals_itself_with_or_without_w(tag: str) -> None:
    strong = tag.removeprefix("W/")
    assert weak_equal(tag, tag)
    assert weak_equal(tag, strong)
    assert weak_equal(strong, tag)
    assert parse_etag(tag) == tag


@property_test
@given(well_formed_tags, well_formed_tags)
def test_weak_comparison_compares_the_opaque_tags(a: str, b: str) -> None:
    assert weak_equal(a, b) == (a == b)
    assert weak_equal(a, b) == weak_equal(b, a)


@pytest.mark.parametrize(
    "malformed",
    [
        "",
        'W/""',
        '""',
        "W/",
        "abc",
        "W/abc",
        '"abc',
        'W/"abc',
        'w/"abc"',
        'W/"a"b"',
        'W/"a b"',
        'W/"a\x00b"',
        'W/"a\nb"',
        'W/"a\x7fb"',
        'W/"é"',
        ' W/"abc"',
        'W/"abc" ',
        'W/"' + "a" * (MAX_ETAG_LENGTH) + '"',
        'W/"' + "a" * 1_000_000 + '"',
        None,
        123,
        1.5,
        True,
        ['W/"abc"'],
        {"etag": 'W/"abc"'},
    ],
    ids=lambda v: repr(v)[:40],
)
def test_a_malformed_tag_equals_nothing_not_even_itself(malformed: Any) -> None:
    good = 'W/"abc"'
    assert parse_etag(malformed) is None
    assert not weak_equal(malformed, malformed)
    assert not weak_equal(malformed, good)
    assert not weak_equal(good, malformed)


@property_test
@given(st.text(max_size=300) | json_values)
def test_parse_etag_never_raises_and_agrees_with_weak_equal(value: Any) -> None:
    parsed = parse_etag(value)
    assert parsed is None or parsed == value
    assert weak_equal(value, value) == (parsed is not None)


@property_test
@given(st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters='"'), min_size=1))
def test_any_rfc9110_opaque_tag_is_accepted(opaque: str) -> None:
    assume(len(opaque) + 4 <= MAX_ETAG_LENGTH)
    assert parse_etag(f'W/"{opaque}"') == f'W/"{opaque}"'
    assert weak_equal(f'W/"{opaque}"', f'"{opaque}"')
