"""The case deltas are for: a one-cell edit of the demo server's 5 MB notebook. The delta reply is a few
hundred bytes where the full answer is nearly 10 MB (the notebook as text and as structured content),
with the tag from the raw value (FastMCP's default) and from a validator, and it rebuilds the answer the
server now sends exactly."""

from __future__ import annotations

from pathlib import Path

import fastmcp
import orjson
import pytest

from mcpcache.delta import FORMAT, apply, document_of, result_of
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.demo.server import build_demo_server
from mcpcache.etag import answer_digest
from mcpcache.protocol import DeltaBlock, conditional_request_meta, parse_cache_block

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NOTEBOOK = "big.ipynb"


@pytest.mark.parametrize("validator", [False, True], ids=["raw-tag", "validator"])
async def test_a_one_cell_edit_of_a_five_megabyte_notebook_is_a_few_hundred_bytes(
    tmp_path: Path, validator: bool
) -> None:
    generate_notebook_of_size(tmp_path / NOTEBOOK, 5_000_000, seed=7)
    server = build_demo_server(tmp_path, validator=validator)
    async with fastmcp.Client(server) as client:
        held = await client.call_tool_mcp("read_notebook", {"path": NOTEBOOK})
        block = parse_cache_block(held.meta)
        assert block is not None
        tag = block.etag
        assert tag is not None
        cells = held.structured_content["cells"]
        source = cells[40]["source"] + "\nprint('changed')"
        assert not (await client.call_tool_mcp("edit_cell", {"path": NOTEBOOK, "index": 40, "source": source})).is_error
        reply = await client.call_tool_mcp(
            "read_notebook", {"path": NOTEBOOK}, meta=conditional_request_meta(tag, accept_delta=[FORMAT])
        )
        current = await client.call_tool_mcp("read_notebook", {"path": NOTEBOOK})
    reply_block = parse_cache_block(reply.meta)
    assert reply_block is not None
    delta = reply_block.delta
    assert isinstance(delta, DeltaBlock)
    full_size = len(orjson.dumps(current.model_dump(by_alias=True, mode="json", exclude_none=True)))
    reply_size = len(orjson.dumps(reply.model_dump(by_alias=True, mode="json", exclude_none=True)))
    assert full_size > 9_000_000
    assert reply_size < 1024
    rebuilt = result_of(apply(document_of(held), orjson.loads(orjson.dumps(delta.ops))))
    assert answer_digest(rebuilt.content, rebuilt.structured_content, rebuilt.meta) == delta.digest
    assert rebuilt.content == current.content
    assert rebuilt.structured_content == current.structured_content
    assert rebuilt.structured_content["cells"][40]["source"] == source
