"""What `diff` writes for the changes answers go through: the ops themselves, not only that they apply."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from mcpcache.delta import apply, diff
from mcpcache.delta import spec as delta_spec

WORDS = " ".join(f"word{index}" for index in range(400))


def under(member: str, op: dict[str, Any]) -> dict[str, Any]:
    """The op with its pointers moved under `/member` (a document is an object; these values are not)."""
    moved = {**op, "path": f"/{member}{op['path']}"}
    if "from" in op:
        moved["from"] = f"/{member}{op['from']}"
    return moved


def ops_for(old: Any, new: Any) -> list[dict[str, Any]]:
    """The ops from `old` to `new`, checked to apply."""
    ops = diff(old, new, max_bytes=1 << 30)
    assert ops is not None
    assert apply({"d": old}, [under("d", op) for op in ops]) == {"d": new}
    return ops


def test_an_edit_inside_a_long_string_is_one_splice_counted_in_code_points() -> None:
    old = "😀" * 10 + WORDS
    new = "😀" * 10 + WORDS.replace("word200", "wörd200!")
    at = 10 + WORDS.index("word200") + 1  # ten astral characters count ten
    assert ops_for(old, new) == [{"op": "splice", "path": "", "offset": at, "remove": 6, "insert": "örd200!"}]


def test_scattered_changes_in_a_long_string_are_spliced_where_they_are() -> None:
    new = WORDS.replace("word10 ", "word10+ ").replace("word200 ", "").replace("word390", "WORD390")
    ops = ops_for(WORDS, new)
    assert [op["op"] for op in ops] == ["splice"] * 3
    assert sum(len(op["insert"]) for op in ops) <= len("+WORD")


def test_short_or_unrelated_strings_are_replaced() -> None:
    assert ops_for({"s": "abc"}, {"s": "abd"}) == [{"op": "replace", "path": "/s", "value": "abd"}]
    assert ops_for({"s": WORDS}, {"s": "x" * 3000})[0]["op"] == "replace"


def test_arrays_insert_delete_and_move_as_such() -> None:
    cells = [{"id": f"c{index}", "source": f"{WORDS[: 100 + index]}"} for index in range(12)]
    inserted = [*cells[:5], {"id": "new", "source": "x"}, *cells[5:]]
    assert ops_for(cells, inserted) == [{"op": "add", "path": "/5", "value": {"id": "new", "source": "x"}}]
    assert ops_for(cells, cells[:3] + cells[4:]) == [{"op": "remove", "path": "/3"}]
    moved = [*cells[:2], *cells[3:9], cells[2], *cells[9:]]
    assert ops_for(cells, moved) == [{"op": "move", "from": "/2", "path": "/8"}]


def test_renumbered_elements_are_aligned_not_rewritten() -> None:
    """A cell inserted before others that carry their index: one add, then one replace per index."""
    cells = [{"index": index, "id": f"c{index}", "source": WORDS[index:]} for index in range(20)]
    after = [
        *cells[:4],
        {"index": 4, "id": "new", "source": "x"},
        *({**cell, "index": cell["index"] + 1} for cell in cells[4:]),
    ]
    ops = ops_for(cells, after)
    assert ops[0] == {"op": "add", "path": "/4", "value": {"index": 4, "id": "new", "source": "x"}}
    assert ops[1:] == [{"op": "replace", "path": f"/{index}/index", "value": index} for index in range(5, 21)]


def test_members_and_types() -> None:
    assert ops_for({"a": 1, "b": 2}, {"a": 1, "c": 3}) == [
        {"op": "remove", "path": "/b"},
        {"op": "add", "path": "/c", "value": 3},
    ]
    assert ops_for({"a/b": {"~": 1}}, {"a/b": {"~": True}}) == [{"op": "replace", "path": "/a~1b/~0", "value": True}]
    assert ops_for({"x": [1, 2]}, {"x": {"0": 1}}) == [{"op": "replace", "path": "/x", "value": {"0": 1}}]
    assert ops_for({"x": 0.0}, {"x": -0.0}) == [{"op": "replace", "path": "/x", "value": -0.0}]
    assert ops_for({"x": [2]}, {"x": [2.0]}) == [{"op": "replace", "path": "/x/0", "value": 2.0}]


def test_a_container_mostly_replaced_is_replaced_whole_when_smaller() -> None:
    changed = [-value for value in range(100)]
    assert ops_for({"series": list(range(100))}, {"series": changed}) == [
        {"op": "replace", "path": "/series", "value": changed}
    ]
    # Shifted by one is not changed throughout: the first moves to the end, and that one is replaced.
    assert ops_for(list(range(100)), list(range(1, 101))) == [
        {"op": "move", "from": "/0", "path": "/99"},
        {"op": "replace", "path": "/99", "value": 100},
    ]


def test_rows_reordered_members_are_equal_and_retyped_values_are_not() -> None:
    rows = [{"id": index, "ok": index % 2 == 0, "v": 1.0} for index in range(40)]
    after = [dict(row) for row in rows]
    after[7] = {"v": 1.0, "ok": False, "id": 7}  # the same row, members in another order
    after[30]["v"] = 1  # 1.0 became 1: equal to Python, not to JSON
    assert ops_for(rows, after) == [{"op": "replace", "path": "/30/v", "value": 1}]


def test_the_size_bound_and_the_receivers_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = {"s": WORDS}, {"s": WORDS + "!"}
    exact = len(orjson.dumps(ops_for(old, new)))
    assert diff(old, new, max_bytes=exact) is not None
    assert diff(old, new, max_bytes=exact - 1) is None
    monkeypatch.setattr(delta_spec, "MAX_OPS", 2)
    assert diff({"a": 1, "b": 1, "c": 1}, {"a": 2, "b": 2, "c": 2}, max_bytes=1 << 20) is None
    monkeypatch.setattr(delta_spec, "MAX_OPS", 100)
    monkeypatch.setattr(delta_spec, "MAX_REWRITTEN", 1000)
    assert diff({"a": list(range(2000))}, {"a": [-1, *range(2000)]}, max_bytes=1 << 20) is None


def test_values_without_a_json_form_give_no_delta() -> None:
    assert diff({"a": 1}, {"a": 2**70}, max_bytes=1 << 20) is None


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),  # reordered
        ({"a": 1, "b": 2}, {"c": 3, "a": 1, "b": 2}),  # added before the others
        ({"x": {"a": 1, "b": 2, "c": 3}}, {"x": {"b": 2, "a": 9, "c": 3}}),  # nested, one changed too
        ({"a": 1, "b": 2}, {"a": 1, "c": 3}),  # removed and added at the end: order kept by the ops
    ],
)
def test_the_patched_object_has_the_new_member_order(old: dict[str, Any], new: dict[str, Any]) -> None:
    """A serializer writes members in their order, and the answer served must be the full read byte for
    byte: an object whose order the ops cannot leave comes whole."""
    ops = diff(old, new, max_bytes=1 << 20)
    assert ops is not None
    patched = apply(old, ops)
    assert json.dumps(patched) == json.dumps(new)
