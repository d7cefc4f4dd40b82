"""`trust_upstream_tags = false`: the gateway validates with its own tags, for an upstream whose tags do not
cover everything its answers carry.

jupyter-mcp-server 2.2.4 tags only a result's structured content. Delete a cell and insert the same
source in its place: `read_cell` answers the same structured content under a new cell id in `_meta`, and
the same tag: a holder of the first answer that revalidates with that tag may be told it is unchanged
and keep the old cell id. With the setting off, the gateway never forwards a tag to jupyter and hashes
each answer itself (`_meta` included): the two answers get two tags.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.jupyter import JupyterStack, require_jupyter_mcp_server

require_jupyter_mcp_server()

from jupyter_mcp_server import results as jresults  # noqa: E402
from support.transports import LEGACY, ServerTarget, stock_client  # noqa: E402

from mcpcache.gateway.app import build_gateway  # noqa: E402
from mcpcache.gateway.config import GatewayConfig  # noqa: E402
from mcpcache.protocol import META_KEY  # noqa: E402
from mcpcache.stores import MemoryStore  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CELL_ID = jresults.meta_key("cell_id")
SOURCE = "# the same source, a new cell"


def _config(url: str, trust: bool) -> GatewayConfig:
    upstream = {"url": url, "trust_upstream_tags": trust, "tools": {"read_cell": {"ttl_ms": 0}}}
    return GatewayConfig.model_validate({"store": {"memory": True}, "upstreams": {"jupyter": upstream}})


async def _call(client: Any, tool: str, arguments: dict[str, Any]) -> Any:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result
    return result


@pytest.mark.parametrize("trust", [True, False], ids=["trusted", "untrusted"])
async def test_a_cell_deleted_and_inserted_again_is_read_with_its_new_id(
    jupyter_stack: JupyterStack, trust: bool
) -> None:
    gateway = build_gateway(_config(jupyter_stack.url, trust), store=MemoryStore())
    cell = {"notebook_name": "default", "cell_index": 0}
    try:
        async with stock_client("mcp", ServerTarget.memory(gateway.server), LEGACY) as client:
            await _call(client, "insert_cell", {**cell, "cell_type": "markdown", "cell_source": SOURCE})
            for _ in range(3):  # held, then held decoded (the gateway keeps a copy it serves often)
                before = await _call(client, "read_cell", cell)
            await _call(client, "delete_cell", {"notebook_name": "default", "cell_indices": [0]})
            await _call(client, "insert_cell", {**cell, "cell_type": "markdown", "cell_source": SOURCE})
            direct = await _call(client, "read_cell", cell)  # through the gateway, a stock client: no tag
            await _call(client, "delete_cell", {"notebook_name": "default", "cell_indices": [0]})  # as it was
    finally:
        await gateway.aclose()
    assert before.structured_content == direct.structured_content
    assert direct.meta[CELL_ID] != before.meta[CELL_ID]
    tags = (before.meta[META_KEY]["etag"], direct.meta[META_KEY]["etag"])
    # jupyter's tag covers the structured content only: two answers that differ in `_meta` share it, and
    # a holder of the first may be told the second is "not modified". The gateway's own tags tell them apart.
    assert (tags[0] == tags[1]) is trust
