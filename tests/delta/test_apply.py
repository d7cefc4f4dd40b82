"""`apply` beyond RFC 6902: splices, the bounds, copy-on-write, and one DeltaError with a message for
every malformed shape (never another exception, never a partial result)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delta.strategies import json_values, long_text
from mcpcache.delta import MAX_INSERTED_BYTES, MAX_OPS, DeltaError, apply
from mcpcache.delta import spec as delta_spec

property_test = settings(deadline=None)

BASE: dict[str, Any] = {
    "content": [{"type": "text", "text": "a😀b"}],
    "structuredContent": {"n": 1, "s": "héllo", "list": [0, 1, 2], "o": {"x": None}},
}


def splice(path: str, offset: Any, remove: Any, insert: Any) -> dict[str, Any]:
    return {"op": "splice", "path": path, "offset": offset, "remove": remove, "insert": insert}


# Splices ------------------------------------------------------------------------------------------


def test_splice_counts_code_points() -> None:
    """The astral character is one code point (two UTF-16 units, four UTF-8 bytes)."""
    result = apply(BASE, [splice("/content/0/text", 1, 1, "𝄞x")])
    assert result["content"][0]["text"] == "a𝄞xb"
    assert apply(BASE, [splice("/structuredContent/s", 5, 0, "!")])["structuredContent"]["s"] == "héllo!"


def test_consecutive_splices_see_the_string_as_the_previous_left_it() -> None:
    ops = [
        splice("/structuredContent/s", 0, 1, "HH"),
        splice("/structuredContent/s", 1, 2, ""),
        splice("/structuredContent/s", 0, 0, ">"),
    ]
    assert apply(BASE, ops)["structuredContent"]["s"] == ">Hllo"


@property_test
@given(long_text(), st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 50), st.text(max_size=5)), max_size=8))
def test_a_run_of_splices_equals_them_one_at_a_time(text: str, edits: list[tuple[int, int, str]]) -> None:
    """`apply` rebuilds a string once per forward run of splices; the result must be the one each splice
    applied separately gives, whatever the order of offsets."""
    document = {"content": [], "s": text}
    ops = []
    current = text
    for offset, remove, insert in edits:
        offset = min(offset, len(current))
        remove = min(remove, len(current) - offset)
        ops.append(splice("/s", offset, remove, insert))
        current = current[:offset] + insert + current[offset + remove :]
    one_by_one = document
    for op in ops:
        one_by_one = apply(one_by_one, [op])
    assert apply(document, ops) == one_by_one == {"content": [], "s": current}


# Copy-on-write ------------------------------------------------------------------------------------


def test_only_the_touched_path_is_copied_and_nothing_given_is_changed() -> None:
    base = copy.deepcopy(BASE)
    ops = [
        {"op": "add", "path": "/structuredContent/list/-", "value": {"k": [1]}},
        {"op": "add", "path": "/structuredContent/list/3/k/-", "value": 2},
    ]
    snapshot, ops_snapshot = orjson.dumps(base), orjson.dumps(ops)
    result = apply(base, ops)
    assert result["structuredContent"]["list"] == [0, 1, 2, {"k": [1, 2]}]
    assert orjson.dumps(base) == snapshot
    assert orjson.dumps(ops) == ops_snapshot  # the added value was copied before it was changed
    assert result is not base
    assert result["structuredContent"] is not base["structuredContent"]
    assert result["content"] is base["content"]  # untouched: shared, as documented
    assert result["structuredContent"]["o"] is base["structuredContent"]["o"]


def test_a_failure_late_in_the_ops_leaves_the_base_as_it_was() -> None:
    base = copy.deepcopy(BASE)
    snapshot = orjson.dumps(base)
    ops = [
        {"op": "replace", "path": "/structuredContent/n", "value": 2},
        splice("/content/0/text", 0, 1, "z"),
        {"op": "remove", "path": "/structuredContent/list/0"},
        {"op": "test", "path": "/structuredContent/n", "value": 3},
    ]
    with pytest.raises(DeltaError, match=r"op 3 .*not the one tested for"):
        apply(base, ops)
    assert orjson.dumps(base) == snapshot


# Malformed ops ------------------------------------------------------------------------------------

MALFORMED: list[tuple[str, Any, str]] = [
    ("ops an object", {"op": "add"}, "ops must be a JSON array, not an object"),
    ("ops null", None, "ops must be a JSON array, not null"),
    ("ops a string", "[]", "ops must be a JSON array, not a string"),
    ("op not an object", [1], "op 0 is a number, not an object"),
    ("no op member", [{"path": "/a"}], "op 0 has no 'op' member"),
    ("op not a string", [{"op": 1, "path": ""}], "op 0 has no 'op' member"),
    ("unknown op", [{"op": "merge", "path": ""}], "op 0: unknown operation 'merge'"),
    ("no path", [{"op": "add", "value": 1}], "op 0 \\(add\\) has no 'path' member"),
    ("path not a string", [{"op": "remove", "path": 1}], "'path' must be a string, not a number"),
    ("pointer without slash", [{"op": "remove", "path": "content"}], "JSON Pointer is empty or starts with '/'"),
    ("bad escape", [{"op": "remove", "path": "/a~2"}], "'~' is followed by '0' or '1'"),
    ("trailing tilde", [{"op": "remove", "path": "/a~"}], "'~' is followed by '0' or '1'"),
    ("add without value", [{"op": "add", "path": "/x"}], "has no 'value' member"),
    ("replace without value", [{"op": "replace", "path": "/content"}], "has no 'value' member"),
    ("test without value", [{"op": "test", "path": "/content"}], "has no 'value' member"),
    ("move without from", [{"op": "move", "path": "/x"}], "has no 'from' member"),
    ("copy with from not a string", [{"op": "copy", "from": 0, "path": "/x"}], "'from' must be a string"),
    ("missing member", [{"op": "remove", "path": "/structuredContent/nope"}], "has no member 'nope'"),
    (
        "index out of range",
        [{"op": "replace", "path": "/structuredContent/list/3", "value": 0}],
        "index 3 is out of range",
    ),
    ("add past the end", [{"op": "add", "path": "/structuredContent/list/4", "value": 0}], "index 4 is out of range"),
    ("leading zero", [{"op": "remove", "path": "/structuredContent/list/01"}], "'01' is not an array index"),
    ("dash to remove", [{"op": "remove", "path": "/structuredContent/list/-"}], "'-' is not an array index"),
    ("negative index", [{"op": "remove", "path": "/structuredContent/list/-1"}], "'-1' is not an array index"),
    ("huge index", [{"op": "remove", "path": "/structuredContent/list/" + "9" * 40}], "is not an array index"),
    (
        "through a scalar",
        [{"op": "add", "path": "/structuredContent/n/x", "value": 0}],
        "'/structuredContent/n' is a number, not a container",
    ),
    (
        "read through a scalar",
        [{"op": "test", "path": "/structuredContent/s/0", "value": 0}],
        "is a string, not a container",
    ),
    ("remove the root", [{"op": "remove", "path": ""}], "the whole document cannot be removed"),
    (
        "move into itself",
        [{"op": "move", "from": "/structuredContent", "path": "/structuredContent/o/x"}],
        "cannot be moved into itself",
    ),
    ("move from nowhere", [{"op": "move", "from": "/nope", "path": "/nope"}], "has no member 'nope'"),
    ("copy from nowhere", [{"op": "copy", "from": "/nope", "path": "/x"}], "has no member 'nope'"),
    ("failed test", [{"op": "test", "path": "/structuredContent/n", "value": True}], "not the one tested for"),
    ("value not JSON", [{"op": "add", "path": "/x", "value": {1, 2}}], "the value is not JSON"),
    ("value NaN", [{"op": "replace", "path": "/structuredContent/n", "value": float("nan")}], "the value is not JSON"),
    ("value a tuple", [{"op": "add", "path": "/x", "value": (1,)}], "the value is not JSON"),
    ("splice a number", [splice("/structuredContent/n", 0, 0, "x")], "is a number, not a string"),
    ("splice an object", [splice("/structuredContent", 0, 0, "x")], "is an object, not a string"),
    ("splice negative offset", [splice("/structuredContent/s", -1, 0, "")], "'offset' must be an integer >= 0"),
    ("splice bool offset", [splice("/structuredContent/s", True, 0, "")], "'offset' must be an integer >= 0"),
    ("splice float remove", [splice("/structuredContent/s", 0, 1.0, "")], "'remove' must be an integer >= 0"),
    ("splice insert not a string", [splice("/structuredContent/s", 0, 0, 1)], "'insert' must be a string"),
    (
        "splice without insert",
        [{"op": "splice", "path": "/structuredContent/s", "offset": 0, "remove": 0}],
        "has no 'insert' member",
    ),
    ("splice without path", [{"op": "splice", "offset": 0, "remove": 0, "insert": ""}], "has no 'path' member"),
    (
        "splice past the end",
        [splice("/structuredContent/s", 5, 1, "")],
        "range \\[5, 6\\) is outside the string's 5 code points",
    ),
    ("splice offset past the end", [splice("/structuredContent/s", 6, 0, "")], "outside the string's 5 code points"),
    (
        "second splice past the end",
        [splice("/structuredContent/s", 0, 5, ""), splice("/structuredContent/s", 0, 1, "")],
        "op 1 .*outside the string's 0 code points",
    ),
    ("splice a lone surrogate", [splice("/structuredContent/s", 0, 0, "\ud800")], "the value is not JSON"),
    ("splice a missing member", [splice("/structuredContent/t", 0, 0, "")], "has no member 't'"),
    ("result not a document", [{"op": "replace", "path": "", "value": [1]}], "the ops leave an array, not a document"),
]


@pytest.mark.parametrize(("ops", "message"), [case[1:] for case in MALFORMED], ids=[case[0] for case in MALFORMED])
def test_malformed_ops_raise_delta_error_with_a_message(ops: Any, message: str) -> None:
    base = copy.deepcopy(BASE)
    snapshot = orjson.dumps(base)
    with pytest.raises(DeltaError, match=message):
        apply(base, ops)
    assert orjson.dumps(base) == snapshot


def test_a_document_that_is_not_an_object() -> None:
    with pytest.raises(DeltaError, match="the ops leave an array"):
        apply([1], [])  # type: ignore[arg-type]
    with pytest.raises(DeltaError, match="'/0' is a number, not a container"):
        apply([1], [{"op": "add", "path": "/0/a", "value": 1}])  # type: ignore[arg-type]


def test_nesting_past_any_serializer_is_refused() -> None:
    deep: Any = []
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(DeltaError, match="not JSON"):
        apply({}, [{"op": "add", "path": "/x", "value": deep}])


# Bounds -------------------------------------------------------------------------------------------


def test_too_many_ops() -> None:
    with pytest.raises(DeltaError, match=f"{MAX_OPS + 1} ops is more than the {MAX_OPS}"):
        apply({}, [{"op": "test", "path": "", "value": {}}] * (MAX_OPS + 1))


def test_copy_cannot_grow_a_document_past_the_inserted_bound() -> None:
    """Each copy of an array into itself doubles it: a few dozen bytes of ops would make gigabytes."""
    ops = [{"op": "copy", "from": "/a", "path": "/a/-"}] * 40
    with pytest.raises(DeltaError, match=f"more than {MAX_INSERTED_BYTES} bytes"):
        apply({"a": ["x" * 1000]}, ops)


def test_inserted_values_and_strings_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delta_spec, "MAX_INSERTED_BYTES", 100)
    apply({"s": ""}, [{"op": "add", "path": "/a", "value": "x" * 40}, splice("/s", 0, 0, "y" * 40)])
    with pytest.raises(DeltaError, match="more than 100 bytes"):
        apply({"s": ""}, [{"op": "add", "path": "/a", "value": "x" * 60}, splice("/s", 0, 0, "y" * 60)])
    with pytest.raises(DeltaError, match="more than 100 bytes"):
        apply({"a": 1}, [{"op": "replace", "path": "/a", "value": list(range(60))}])


def test_rewriting_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inserting at the front of a long array, or splicing a long string back to front, costs the length
    each time: bounded, so a small delta cannot cost minutes."""
    monkeypatch.setattr(delta_spec, "MAX_REWRITTEN", 10_000)
    front = [{"op": "add", "path": "/a/0", "value": 0}] * 20
    apply({"a": [0] * 100}, front)
    with pytest.raises(DeltaError, match="rewrite more than 10000"):
        apply({"a": [0] * 1000}, front)
    backwards = [splice("/s", offset, 1, "") for offset in range(900, 0, -100)]
    with pytest.raises(DeltaError, match="rewrite more than 10000"):
        apply({"s": "x" * 2000}, backwards)
    forwards = [splice("/s", offset, 1, "") for offset in range(0, 900, 100)]
    assert len(apply({"s": "x" * 2000}, forwards)["s"]) == 1991  # one rebuild for a forward run


REAL_POINTERS = st.sampled_from(
    [
        "",
        "/content",
        "/content/0",
        "/content/0/text",
        "/content/-",
        "/structuredContent",
        "/structuredContent/n",
        "/structuredContent/s",
        "/structuredContent/list",
        "/structuredContent/list/0",
        "/structuredContent/list/2",
        "/structuredContent/list/3",
        "/structuredContent/list/-",
        "/structuredContent/o",
        "/structuredContent/o/x",
        "/structuredContent/o/new",
    ]
)
ODD_POINTERS = st.lists(st.sampled_from(["content", "0", "-", "s", "~", "~0", "~1", "01", ""]), max_size=4).map(
    lambda tokens: "".join("/" + token for token in tokens)
)
POINTERS = st.one_of(REAL_POINTERS, REAL_POINTERS, REAL_POINTERS, ODD_POINTERS, json_values)
NUMBERS = st.one_of(st.integers(0, 6), st.integers(0, 6), st.integers(-2, 12), json_values)
NEAR_OPS = st.fixed_dictionaries(
    {"op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "splice", "nope"]), "path": POINTERS},
    optional={
        "from": POINTERS,
        "value": json_values,
        "offset": NUMBERS,
        "remove": NUMBERS,
        "insert": st.text(max_size=4) | json_values,
    },
)


@property_test
@given(st.lists(NEAR_OPS, max_size=6) | st.lists(json_values, max_size=3))
def test_arbitrary_ops_raise_only_delta_error(ops: list[Any]) -> None:
    """Ops near well-formed (right names, pointers into the document, any members) and plain garbage."""
    base = copy.deepcopy(BASE)
    snapshot = orjson.dumps(base)
    message = None
    try:
        orjson.dumps(apply(base, ops))  # a JSON document
    except DeltaError as exc:
        message = str(exc)
    assert message is None or message
    assert orjson.dumps(base) == snapshot
