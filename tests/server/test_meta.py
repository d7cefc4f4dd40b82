"""The tag covers the answer's `_meta` (without the cache block), on both server kinds, over real transports.

A `read_cell` whose cell was replaced by one with the same source answers the same content and the same
structured content, and another cell id in `_meta`. Had the tag left `_meta` out, a client holding the
old answer would be told "not modified" and go on serving the old cell id beside current content. Here
the old tag gets the full new answer, with a new tag, on FastMCP and on `MCPServer`, with both stock
clients, over memory streams, stdio and streamable HTTP, in both protocol eras.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from fixture_servers.cells import CELL_ID_KEY, KIND, SCRIPT, ServerKind, build
from support.calls import block_of, call_conditional, call_stock, raw_block, wire
from support.tags import answered_meta, tag_of
from support.transports import (
    CLIENT_KINDS,
    ERAS,
    TRANSPORTS,
    ClientKind,
    Era,
    ServerTarget,
    TransportKind,
    http_servers,
    stock_client,
)

from mcpcache.protocol import META_KEY

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVER_KINDS: tuple[ServerKind, ...] = ("fastmcp", "sdk")


@pytest.fixture(scope="module")
def http_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[ServerKind, str]]:
    log_path = tmp_path_factory.mktemp("cells-servers") / "servers.log"
    commands = [[sys.executable, str(SCRIPT), kind, "http"] for kind in SERVER_KINDS]
    with log_path.open("wb") as log, http_servers(commands, log=log) as urls:
        yield dict(zip(SERVER_KINDS, urls, strict=True))


def target_for(kind: ServerKind, transport: TransportKind, http_urls: dict[ServerKind, str]) -> ServerTarget:
    if transport == "memory":
        return ServerTarget.memory(build(kind))
    if transport == "stdio":
        return ServerTarget.stdio(kind, SCRIPT, kind, "stdio")
    return ServerTarget.http(kind, http_urls[kind])


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("kind", SERVER_KINDS)
@pytest.mark.parametrize("client_kind", CLIENT_KINDS)
async def test_an_answer_that_differs_only_in_meta_gets_a_new_tag(
    client_kind: ClientKind, kind: ServerKind, transport: TransportKind, era: Era, http_urls: dict[ServerKind, str]
) -> None:
    notebook = f"{client_kind}-{transport}-{era}"  # HTTP servers are shared by the module
    async with stock_client(client_kind, target_for(kind, transport, http_urls), era) as client:
        for tool, structured in (("read_cell", True), ("read_cell_text", False)):
            index = 0 if structured else 1
            args = {"notebook": notebook, "index": index}
            first = await call_stock(client, tool, args)
            old = block_of(first)
            assert old is not None
            assert old.etag is not None
            assert old.etag == tag_of(first)
            assert answered_meta(first) == {CELL_ID_KEY: f"{notebook}-{index}-0", META_KEY: raw_block(first)}
            assert (first.structured_content is not None) is structured

            held = await call_conditional(client, tool, args, old.etag)
            assert block_of(held) == old.model_copy(update={"not_modified": True})
            assert held.structured_content == ({"kind": KIND} if structured else None)

            # A new cell with the same source: the content is identical, only the cell id moved.
            source = first.content[0].text  # type: ignore[union-attr]
            await call_stock(client, "replace_cell", {**args, "source": source})
            changed = await call_conditional(client, tool, args, old.etag)
            new = block_of(changed)
            assert not changed.is_error
            assert new is not None
            assert not new.not_modified, "an old _meta must not be confirmed as current"
            assert wire(changed)["content"] == wire(first)["content"]
            assert changed.structured_content == first.structured_content
            assert changed.meta is not None
            assert changed.meta[CELL_ID_KEY] == f"{notebook}-{index}-1"
            assert new.etag is not None
            assert new.etag != old.etag
            assert new.etag == tag_of(changed)

            confirmed = await call_conditional(client, tool, args, new.etag)
            assert block_of(confirmed) == new.model_copy(update={"not_modified": True})
