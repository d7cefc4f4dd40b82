"""Which calls the server check makes, decided from tools/list entries alone (mcpcache/check/selection.py)."""

from __future__ import annotations

from typing import Any

from mcpcache.check.harvest import find_arguments
from mcpcache.check.selection import ToolCall, arguments_from_schema, invalid_arguments, select
from mcpcache.protocol import META_KEY


def entry(name: str, schema: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "inputSchema": schema or {"type": "object", "properties": {}}, **extra}


KEYED = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}


def test_declared_and_read_only_tools_are_chosen_and_writers_never_called_unasked() -> None:
    entries = [
        entry("declared", _meta={META_KEY: {"ttlMs": 5000}}),
        entry("reader", annotations={"readOnlyHint": True}),
        entry("writer", annotations={"destructiveHint": True}),
        entry("needs_key", KEYED, _meta={META_KEY: {}}),
    ]
    chosen = select(entries, META_KEY)
    assert [call.name for call, _ in chosen.probe] == ["declared"]
    assert [call.name for call, _ in chosen.candidates] == ["reader"], "probed only if its answer carries a block"
    assert dict(chosen.skipped) == {
        "writer": "neither declares a cache block nor is annotated read-only; name it with --tool",
    }
    [wanting] = chosen.wanting
    assert (wanting.name, wanting.missing, wanting.declared) == ("needs_key", ("key",), True)
    assert wanting.hint() == (
        "needs arguments (key) that no schema example or listing answer gave; "
        """add --tool needs_key --args '{"key": <string>}', or put it in --args-from FILE"""
    )


def test_arguments_from_a_file_go_to_the_tools_chosen_by_default() -> None:
    entries = [
        entry("needs_key", KEYED, _meta={META_KEY: {}}),
        entry("reader", KEYED, annotations={"readOnlyHint": True}),
    ]
    chosen = select(entries, META_KEY, known={"needs_key": {"key": "a"}, "reader": {"key": "b"}})
    assert [(call.name, call.arguments) for call, _ in chosen.probe] == [("needs_key", {"key": "a"})]
    assert [(call.name, call.arguments) for call, _ in chosen.candidates] == [("reader", {"key": "b"})]
    assert chosen.wanting == ()


def test_arguments_are_found_in_listing_answers() -> None:
    listing = {
        "structuredContent": {
            "kind": "notebooks.list",
            "items": [{"Name": "default", "Path": "a.ipynb", "Size": 353}],
        }
    }
    schema = {
        "type": "object",
        "properties": {
            "notebook_name": {"type": "string"},
            "path": {"type": "string"},
            "size": {"type": "string"},
            "cell_index": {"type": "integer"},
        },
    }
    found = find_arguments(schema, ["notebook_name", "path", "size", "cell_index"], [("list_notebooks", listing)])
    # `path` by its own name; `notebook_name` by its last word, since the listing tool names notebooks;
    # `size` is there but a number, not a string; nothing names a cell index.
    assert {prop: (f.value, f.key) for prop, f in found.items()} == {
        "notebook_name": ("default", "Name"),
        "path": ("a.ipynb", "Path"),
    }
    assert found["notebook_name"].describe("notebook_name") == (
        "notebook_name=\"default\" (key 'Name' in the answer of list_notebooks)"
    )
    # The last word alone is not enough: the listing must be about notebooks.
    assert find_arguments(schema, ["notebook_name"], [("list_kernels", listing)]) == {}
    # A text block that is JSON is read too, and the first answer that names the property wins.
    text = {"content": [{"type": "text", "text": '{"files": [{"path": "b.txt"}]}'}]}
    assert (
        find_arguments(schema, ["path"], [("list_files", text), ("list_notebooks", listing)])["path"].value == "b.txt"
    )


def test_named_tools_are_exactly_what_is_probed() -> None:
    entries = [entry("a", KEYED), entry("b", annotations={"readOnlyHint": True})]
    chosen = select(entries, META_KEY, [ToolCall("a", {"key": "k"}), ToolCall("missing")])
    assert [(call.name, call.arguments) for call, _ in chosen.probe] == [("a", {"key": "k"})]
    assert dict(chosen.skipped) == {"missing": "not in tools/list"}


def test_arguments_come_from_the_schemas_examples() -> None:
    whole = {**KEYED, "examples": [{"key": "from the schema"}]}
    assert arguments_from_schema(whole) == ({"key": "from the schema"}, [])
    per_property = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "examples": ["x", "y"]},
            "b": {"type": "integer", "default": 3},
            "c": {"const": True},
            "d": {"enum": ["only"]},
            "optional": {"type": "string"},
        },
        "required": ["a", "b", "c", "d"],
    }
    assert arguments_from_schema(per_property) == ({"a": "x", "b": 3, "c": True, "d": "only"}, [])
    assert arguments_from_schema(KEYED) == (None, ["key"])
    assert arguments_from_schema("not a schema") == ({}, [])


def test_invalid_arguments_leave_out_a_required_property_or_break_a_type() -> None:
    assert invalid_arguments(KEYED, {"key": "k"}) == {}
    typed = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert invalid_arguments(typed, {"n": 1}) == {"n": "not a number"}
    assert invalid_arguments({"type": "object", "properties": {}}, {}) is None
