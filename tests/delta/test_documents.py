"""An answer's document: what delta ops point into, and the answer it gives back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as mt
import pytest

from mcpcache.delta import DeltaError, apply, diff, document_of, result_of
from mcpcache.etag import content_tag
from mcpcache.protocol import META_KEY

BLOCK = {"ttlMs": 5000, "cacheScope": "private", "etag": 'W/"' + "0" * 32 + '"'}


def answer(**fields: Any) -> mt.CallToolResult:
    return mt.CallToolResult.model_validate(fields)


RICH = answer(
    content=[
        {"type": "text", "text": "héllo 😀"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "a", "mimeType": "text/plain"}},
        {"type": "resource_link", "uri": "file:///b.txt", "name": "b"},
    ],
    structuredContent={"kind": "x", "rows": [{"a": 1, "b": None}]},
    _meta={META_KEY: BLOCK, "io.example/trace": "t-1"},
)


def test_the_document_holds_content_structured_content_and_meta_without_the_block() -> None:
    document = document_of(RICH)
    assert set(document) == {"content", "structuredContent", "_meta"}
    assert document["content"][1] == {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    assert document["_meta"] == {"io.example/trace": "t-1"}
    assert document["structuredContent"] is RICH.structured_content  # shared, as documented


def test_absent_parts_are_left_out() -> None:
    assert document_of(answer(content=[])) == {"content": []}
    assert document_of(answer(content=[], _meta={META_KEY: BLOCK})) == {"content": []}
    assert document_of(answer(content=[], _meta={"k": 1, "mine": BLOCK}), meta_key="mine") == {
        "content": [],
        "_meta": {"k": 1},
    }


@pytest.mark.parametrize(
    "result", [RICH, answer(content=[]), answer(content=[{"type": "text", "text": ""}], structuredContent={})]
)
def test_result_of_gives_back_the_answer(result: mt.CallToolResult) -> None:
    again = result_of(document_of(result))
    assert document_of(again) == document_of(result)
    assert again.is_error is False
    assert content_tag(again.content, again.structured_content, again.meta) == content_tag(
        result.content, result.structured_content, result.meta
    )


def test_a_delta_between_two_answers_gives_the_second() -> None:
    second = answer(
        content=[{"type": "text", "text": "héllo 😀!"}, {"type": "text", "text": "added"}],
        structuredContent={"kind": "x", "rows": [{"a": 1, "b": None}, {"a": 2}]},
        _meta={META_KEY: BLOCK, "io.example/trace": "t-2"},
    )
    base = document_of(RICH)
    ops = diff(base, document_of(second), max_bytes=10_000)
    assert ops is not None
    assert document_of(result_of(apply(base, ops))) == document_of(second)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "a document is a JSON object, not an array"),
        ({}, "content must be an array"),
        ({"content": {}}, "content must be an array"),
        ({"content": [], "isError": True}, "not \\['isError'\\]"),
        ({"content": [{"type": "text"}]}, "not an answer: content/0/.*text: Field required"),
        ({"content": [{"type": "nope"}]}, "not an answer"),
        ({"content": [], "_meta": "x"}, "not an answer: _meta"),
    ],
)
def test_result_of_refuses_what_is_not_an_answer(document: Any, message: str) -> None:
    with pytest.raises(DeltaError, match=message):
        result_of(document)


def test_the_engine_imports_no_half_of_mcpcache() -> None:
    """The engine is core: the client, server, gateway and proxy wrap it, so it imports none of them."""
    import ast

    import mcpcache.delta

    imported: set[str] = set()
    for module in Path(mcpcache.delta.__file__).parent.glob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    mcpcache_modules = {
        name for name in imported if name.startswith("mcpcache") and not name.startswith("mcpcache.delta")
    }
    assert mcpcache_modules <= {"mcpcache.canonical", "mcpcache.etag", "mcpcache.protocol"}
    assert not {name.split(".")[0] for name in imported} & {"jsonpatch", "jsonpointer", "fastmcp"}
