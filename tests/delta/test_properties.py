"""The delta engine's "for all"s: diff then apply gives the new document exactly, whatever the edit;
the bound on the ops' size is kept; nothing given to either function is changed; and a corrupted delta
fails as DeltaError or yields some document (which the client's digest check then rejects), never
another exception."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from delta.strategies import documents, edited_pairs, json_values, notebook_pairs, table_pairs
from mcpcache.delta import DeltaError, apply, diff, result_of

property_test = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

UNBOUNDED = 1 << 40


def canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def assert_round_trip(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    old_bytes, new_bytes = canonical(old), canonical(new)
    ops = diff(old, new, max_bytes=UNBOUNDED)
    assert ops is not None
    # As a client receives them: serialized, then parsed.
    received = orjson.loads(orjson.dumps(ops))
    result = apply(old, received)
    assert result == new
    assert canonical(result) == new_bytes
    # Neither function changed what it was given.
    assert canonical(old) == old_bytes
    assert canonical(new) == new_bytes
    assert orjson.loads(orjson.dumps(ops)) == received
    return ops


@property_test
@given(edited_pairs())
@example(({"content": [], "structuredContent": {"a": 1}}, {"content": [], "structuredContent": {"a": True}}))
@example(({"content": [], "structuredContent": {"a": [0.0]}}, {"content": [], "structuredContent": {"a": [-0.0]}}))
@example(
    ({"content": [], "structuredContent": {"a": {"b": 2}}}, {"content": [], "structuredContent": {"a": {"b": 2.0}}})
)
@example(({"content": [], "structuredContent": {"a": [1, 2]}}, {"content": [], "structuredContent": {"a": {"0": 1}}}))
@example(({"content": [], "structuredContent": {"~/": "x"}}, {"content": [], "structuredContent": {"~/": "y"}}))
def test_diff_then_apply_gives_the_edited_document(pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    assert_round_trip(*pair)


@property_test
@given(documents(), documents())
def test_diff_then_apply_gives_any_other_document(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert_round_trip(old, new)


@property_test
@given(notebook_pairs())
def test_notebook_edits_round_trip(pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Cells inserted, deleted, moved and changed, with every later cell renumbered in both the structured
    content and the JSON text beside it: the multi-splice and alignment paths."""
    old, new = pair
    ops = assert_round_trip(old, new)
    assert all(op["op"] in {"add", "remove", "replace", "move", "splice"} for op in ops)


@property_test
@given(table_pairs())
def test_table_edits_round_trip(pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Rows of small values are compared by their serialized bytes first: a row whose members were only
    reordered is equal, and one whose 1 became true or 1.0 is not."""
    old, new = pair
    assert_round_trip(old, new)


@property_test
@given(edited_pairs(), st.integers(0, 4000))
def test_the_size_bound_is_kept(pair: tuple[dict[str, Any], dict[str, Any]], max_bytes: int) -> None:
    old, new = pair
    ops = diff(old, new, max_bytes=max_bytes)
    if ops is None:
        return
    assert len(orjson.dumps(ops)) <= max_bytes
    assert canonical(apply(old, ops)) == canonical(new)


@property_test
@given(documents())
def test_an_unchanged_document_needs_no_ops(document: dict[str, Any]) -> None:
    assert diff(document, copy.deepcopy(document), max_bytes=2) == []
    assert diff(document, document, max_bytes=1) is None  # "[]" is two bytes


@property_test
@given(edited_pairs() | notebook_pairs() | table_pairs(), st.data())
def test_a_flipped_byte_is_caught_or_harmless(pair: tuple[dict[str, Any], dict[str, Any]], data: st.DataObject) -> None:
    """A delta damaged on the way either fails to parse, fails to apply or to make an answer (DeltaError),
    or gives some answer, which the client tells from the new one by its digest. No other exception, ever."""
    old, new = pair
    ops = diff(old, new, max_bytes=UNBOUNDED)
    assert ops is not None
    wire = bytearray(orjson.dumps(ops))
    at = data.draw(st.integers(0, len(wire) - 1), label="at")
    wire[at] ^= data.draw(st.integers(1, 255), label="xor")
    try:
        damaged = orjson.loads(bytes(wire))
    except orjson.JSONDecodeError:
        return
    old_bytes = canonical(old)
    message = None
    try:
        rebuilt = apply(old, damaged)
        canonical(rebuilt)  # still a JSON document
        result_of(rebuilt)  # what the client does next: an answer, or DeltaError
    except DeltaError as exc:
        message = str(exc)
    assert message is None or message
    assert canonical(old) == old_bytes


# Standard ops, against python-json-patch as a second implementation ----------------------------------

POINTER_TOKENS = st.sampled_from(["a", "b", "0", "1", "2", "-", "~0", "~1", "c~1d", "", "01"])
pointers = st.lists(POINTER_TOKENS, max_size=3).map(lambda tokens: "".join("/" + token for token in tokens))
standard_ops = st.one_of(
    st.builds(lambda path, value: {"op": "add", "path": path, "value": value}, pointers, json_values),
    st.builds(lambda path: {"op": "remove", "path": path}, pointers),
    st.builds(lambda path, value: {"op": "replace", "path": path, "value": value}, pointers, json_values),
    st.builds(lambda source, path: {"op": "move", "from": source, "path": path}, pointers, pointers),
    st.builds(lambda source, path: {"op": "copy", "from": source, "path": path}, pointers, pointers),
    st.builds(lambda path, value: {"op": "test", "path": path, "value": value}, pointers, json_values),
)
small_documents = st.dictionaries(st.sampled_from(["a", "b", "/", "~", "c/d"]), json_values, max_size=4).map(
    lambda document: {**document, "a": document.get("a", [1, {"b": [2]}, "x"])}
)


@property_test
@given(small_documents, st.lists(standard_ops, min_size=1, max_size=4))
def test_standard_ops_agree_with_python_json_patch(document: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """Where python-json-patch applies a patch, we give the same document; where it refuses, so do we.
    (It is not a dependency of mcpcache: it is the independent reading of RFC 6902 we test against.)"""
    before = canonical(document)
    try:
        expected = jsonpatch.apply_patch(copy.deepcopy(document), ops)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
        expected = None
    if expected is not None and not isinstance(expected, dict):
        expected = None  # a patch that replaces the document by a non-object is a failed delta here
    try:
        result = apply(document, ops)
    except DeltaError:
        result = None
    if expected is None:
        assert result is None
    else:
        assert result is not None
        assert canonical(result) == canonical(expected)
    assert canonical(document) == before


@pytest.mark.parametrize("value", [1, 1.0, True, 0, False, None, "1", [1], {"a": 1}])
def test_test_compares_as_json(value: Any) -> None:
    """RFC 6902 4.6: numbers are equal by value (1 and 1.0), but a number never equals a boolean."""
    document = {"a": 1}
    passes = value in (1, 1.0) and not isinstance(value, bool)
    try:
        apply(document, [{"op": "test", "path": "/a", "value": value}])
    except DeltaError:
        assert not passes
    else:
        assert passes
