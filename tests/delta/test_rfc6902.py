"""The six standard operations follow RFC 6902 exactly: every example of its appendix A, as written there."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mcpcache.delta import DeltaError, apply

# (section, document, patch, result or None for an error), from RFC 6902 appendix A.
APPENDIX_A: list[tuple[str, dict[str, Any], str, dict[str, Any] | None]] = [
    ("A.1", {"foo": "bar"}, '[{ "op": "add", "path": "/baz", "value": "qux" }]', {"baz": "qux", "foo": "bar"}),
    (
        "A.2",
        {"foo": ["bar", "baz"]},
        '[{ "op": "add", "path": "/foo/1", "value": "qux" }]',
        {"foo": ["bar", "qux", "baz"]},
    ),
    ("A.3", {"baz": "qux", "foo": "bar"}, '[{ "op": "remove", "path": "/baz" }]', {"foo": "bar"}),
    ("A.4", {"foo": ["bar", "qux", "baz"]}, '[{ "op": "remove", "path": "/foo/1" }]', {"foo": ["bar", "baz"]}),
    (
        "A.5",
        {"baz": "qux", "foo": "bar"},
        '[{ "op": "replace", "path": "/baz", "value": "boo" }]',
        {"baz": "boo", "foo": "bar"},
    ),
    (
        "A.6",
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        '[{ "op": "move", "from": "/foo/waldo", "path": "/qux/thud" }]',
        {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
    ),
    (
        "A.7",
        {"foo": ["all", "grass", "cows", "eat"]},
        '[{ "op": "move", "from": "/foo/1", "path": "/foo/3" }]',
        {"foo": ["all", "cows", "eat", "grass"]},
    ),
    (
        "A.8",
        {"baz": "qux", "foo": ["a", 2, "c"]},
        '[{ "op": "test", "path": "/baz", "value": "qux" }, { "op": "test", "path": "/foo/1", "value": 2 }]',
        {"baz": "qux", "foo": ["a", 2, "c"]},
    ),
    ("A.9", {"baz": "qux"}, '[{ "op": "test", "path": "/baz", "value": "bar" }]', None),
    (
        "A.10",
        {"foo": "bar"},
        '[{ "op": "add", "path": "/child", "value": { "grandchild": { } } }]',
        {"foo": "bar", "child": {"grandchild": {}}},
    ),
    (
        "A.11",
        {"foo": "bar"},
        '[{ "op": "add", "path": "/baz", "value": "qux", "xyz": 123 }]',
        {"foo": "bar", "baz": "qux"},
    ),
    ("A.12", {"foo": "bar"}, '[{ "op": "add", "path": "/baz/bat", "value": "qux" }]', None),
    # A.13's patch repeats "op"; once parsed (the last one wins) it removes a member that is not there.
    ("A.13", {"foo": "bar"}, '[{ "op": "add", "path": "/baz", "value": "qux", "op": "remove" }]', None),
    ("A.14", {"/": 9, "~1": 10}, '[{"op": "test", "path": "/~01", "value": 10}]', {"/": 9, "~1": 10}),
    ("A.15", {"/": 9, "~1": 10}, '[{"op": "test", "path": "/~01", "value": "10"}]', None),
    (
        "A.16",
        {"foo": ["bar"]},
        '[{ "op": "add", "path": "/foo/-", "value": ["abc", "def"] }]',
        {"foo": ["bar", ["abc", "def"]]},
    ),
]


@pytest.mark.parametrize(
    ("document", "patch", "result"), [case[1:] for case in APPENDIX_A], ids=[c[0] for c in APPENDIX_A]
)
def test_appendix_a(document: dict[str, Any], patch: str, result: dict[str, Any] | None) -> None:
    before = orjson.dumps(document)
    if result is None:
        with pytest.raises(DeltaError):
            apply(document, orjson.loads(patch))
    else:
        assert apply(document, orjson.loads(patch)) == result
    assert orjson.dumps(document) == before  # applied to a copy, success or not


def test_operations_apply_in_order_to_the_result_of_the_previous() -> None:
    patch = [
        {"op": "add", "path": "/a", "value": {"b": []}},
        {"op": "add", "path": "/a/b/-", "value": 1},
        {"op": "copy", "from": "/a/b", "path": "/a/c"},
        {"op": "add", "path": "/a/c/0", "value": 0},
        {"op": "move", "from": "/a/c", "path": "/d"},
        {"op": "test", "path": "/d", "value": [0, 1.0]},
    ]
    assert apply({}, patch) == {"a": {"b": [1]}, "d": [0, 1]}


def test_the_root_can_be_replaced_and_moved_to_the_same_place() -> None:
    assert apply({"a": 1}, [{"op": "replace", "path": "", "value": {"b": 2}}]) == {"b": 2}
    assert apply({"a": 1}, [{"op": "add", "path": "", "value": {"c": 3}}]) == {"c": 3}
    assert apply({"a": 1}, [{"op": "move", "from": "/a", "path": "/a"}]) == {"a": 1}
    assert apply({"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/a/c"}]) == {"a": {"b": 1, "c": {"b": 1}}}


def test_an_empty_member_name_and_escapes() -> None:
    document = {"": 1, "a/b": 2, "m~n": 3}
    assert apply(document, [{"op": "replace", "path": "/", "value": 9}])[""] == 9
    assert apply(document, [{"op": "remove", "path": "/a~1b"}]) == {"": 1, "m~n": 3}
    assert apply(document, [{"op": "test", "path": "/m~0n", "value": 3}]) == document
