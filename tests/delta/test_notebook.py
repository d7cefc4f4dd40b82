"""Deltas of real answers: the demo server's read_notebook on a ~5 MB generated notebook, through
FastMCP's in-memory client, before and after a real edit_cell, and after cells are inserted and deleted
in the file (every later cell is renumbered, in the structured content and in the JSON text beside it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fastmcp
import mcp_types as mt
import orjson
import pytest

from mcpcache.delta import apply, diff, document_of, result_of
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.demo.server import build_demo_server
from mcpcache.etag import answer_digest, content_tag

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NOTEBOOK = "big.ipynb"


def canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def delta_between(before: mt.CallToolResult, after: mt.CallToolResult) -> tuple[bytes, int]:
    """The delta's bytes (checked to rebuild `after` exactly from `before`) and the full answer's size."""
    base, target = document_of(before), document_of(after)
    full = len(orjson.dumps(target))
    ops = diff(base, target, max_bytes=full // 2)
    assert ops is not None
    wire = orjson.dumps(ops)
    rebuilt = apply(base, orjson.loads(wire))
    assert canonical(rebuilt) == canonical(target)
    answer = result_of(rebuilt)
    assert answer.structured_content == after.structured_content
    assert content_tag(answer.content, answer.structured_content, answer.meta) == content_tag(
        after.content, after.structured_content, after.meta
    )
    # What the client will check before it serves the answer it built.
    assert answer_digest(answer.content, answer.structured_content, answer.meta) == answer_digest(
        after.content, after.structured_content, after.meta
    )
    return wire, full


def rewrite(path: Path, change: Any) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    change(notebook["cells"])
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")


async def test_deltas_of_a_five_megabyte_notebook(tmp_path: Path) -> None:
    path = generate_notebook_of_size(tmp_path / NOTEBOOK, 5_000_000, seed=7)
    server = build_demo_server(tmp_path)
    async with fastmcp.Client(server) as client:

        async def read() -> mt.CallToolResult:
            result = await client.call_tool_mcp("read_notebook", {"path": NOTEBOOK})
            assert not result.is_error
            return result

        first = await read()
        cells = first.structured_content["cells"] if first.structured_content else []
        edited = await client.call_tool_mcp(
            "edit_cell", {"path": NOTEBOOK, "index": 40, "source": cells[40]["source"] + "\nprint('changed')"}
        )
        assert not edited.is_error
        second = await read()

        wire, full = delta_between(first, second)
        assert full > 5_000_000
        assert len(wire) < 4096
        assert {op["op"] for op in orjson.loads(wire)} == {"splice"}

        inserted = {"cell_type": "code", "id": "inserted", "metadata": {}, "execution_count": None, "outputs": []}
        rewrite(path, lambda cells: cells.insert(100, {**inserted, "source": ["x = 1\n", "print(x)"]}))
        third = await read()
        wire, full = delta_between(second, third)
        assert len(wire) < full // 20  # every later cell renumbered, twice: still a small fraction

        rewrite(path, lambda cells: cells.pop(10))
        fourth = await read()
        wire, full = delta_between(third, fourth)
        assert len(wire) < full // 20
