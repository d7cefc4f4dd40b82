"""Stock clients, real transports, both protocol eras, both server kinds.

Every cell of (mcp.Client | fastmcp.Client) x (FastMCP | MCPServer) x (memory | stdio | streamable HTTP)
x (2026-07-28 | 2025-11-25) runs the same script against the catalogue server:

- a stock call of every return shape gets the full answer plus the cache block, and the client's own
  output-schema validation passes (it runs inside `call_tool`);
- the tag on it is the tag of what arrived, and the same tag that an in-process server gives the same
  answer: so one logical answer has one tag on every transport, in every era and in every process
  (stdio and HTTP servers are other processes);
- a conditional call with that tag gets the not-modified reply of docs/protocol.md section 4, and after the
  data changes the full new answer with a new tag;
- on 2026-07-28 the server advertises the extension.

The HTTP servers are two subprocesses shared by the module; stdio servers are started by the client
transports, one per connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import mcp_types as mt
import pytest
from fixture_servers.catalog import (
    NOT_MODIFIED_KIND,
    SERVER_KINDS,
    STOCK_SHAPES,
    STRUCTURED,
    STUB_REFUSED,
    ServerKind,
    build,
    policy_of,
)
from support.calls import block_of, call_conditional, call_stock, raw_block, wire
from support.served_tags import served_tag
from support.tags import tag_of
from support.transports import (
    CLIENT_KINDS,
    ERAS,
    MODERN,
    TRANSPORTS,
    ClientKind,
    Era,
    ServerTarget,
    TransportKind,
    catalogue_command,
    http_servers,
    stock_client,
)

from mcpcache.delta import FORMATS
from mcpcache.protocol import EXTENSION_ID, META_KEY, conditional_request_meta, extension_settings

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module")
def http_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[ServerKind, str]]:
    log_path = tmp_path_factory.mktemp("http-servers") / "servers.log"
    with log_path.open("wb") as log, http_servers([catalogue_command(kind) for kind in SERVER_KINDS], log=log) as urls:
        yield dict(zip(SERVER_KINDS, urls, strict=True))


def target_for(kind: ServerKind, transport: TransportKind, http_urls: dict[ServerKind, str]) -> ServerTarget:
    if transport == "memory":
        return ServerTarget.memory(build(kind))
    if transport == "stdio":
        return ServerTarget.stdio(kind)
    return ServerTarget.http(kind, http_urls[kind])


async def reference_tags(kind: ServerKind, key_of: dict[str, str]) -> dict[str, str]:
    """The tags a fresh in-process server of `kind` stamps on the same calls."""
    tags = {}
    async with stock_client("mcp", ServerTarget.memory(build(kind)), MODERN) as client:
        for tool, key in key_of.items():
            block = block_of(await call_stock(client, tool, {"key": key}))
            assert block is not None
            assert block.etag is not None
            tags[tool] = block.etag
    return tags


def assert_section_4(reply: mt.CallToolResult, tool: str, etag: str) -> None:
    policy = policy_of(tool)
    data = wire(reply)
    if tool in STUB_REFUSED:
        # The schema refuses {"kind": K}: the full answer under the tag instead of the not-modified reply.
        assert data["isError"] is False
        assert data["content"] != []
        assert data["_meta"][META_KEY] == {"ttlMs": policy.ttl_ms, "cacheScope": policy.scope, "etag": etag}
        return
    assert data["content"] == []
    assert data["isError"] is False
    if STRUCTURED[tool]:
        assert data["structuredContent"] == {"kind": NOT_MODIFIED_KIND[tool]}
    else:
        assert "structuredContent" not in data
    assert data["_meta"][META_KEY] == {
        "ttlMs": policy.ttl_ms,
        "cacheScope": policy.scope,
        "etag": etag,
        "notModified": True,
    }


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("kind", SERVER_KINDS)
@pytest.mark.parametrize("client_kind", CLIENT_KINDS)
async def test_stock_and_conditional_calls(
    client_kind: ClientKind, kind: ServerKind, transport: TransportKind, era: Era, http_urls: dict[ServerKind, str]
) -> None:
    # Keys shared by every cell (never written) make "the same answer" literal across cells; keys of this
    # cell alone are the ones the test changes, since HTTP servers are shared by the whole module.
    shared = {tool: f"shared-{tool}" for tool in STOCK_SHAPES}
    own = {tool: f"{client_kind}-{transport}-{era}-{tool}" for tool in STOCK_SHAPES}
    expected_tags = await reference_tags(kind, shared)
    reference = build(kind)  # the same tools in this process: what their tags are computed from

    async with stock_client(client_kind, target_for(kind, transport, http_urls), era) as client:
        if era == MODERN:
            capabilities = client.server_capabilities
            assert capabilities is not None
            assert capabilities.extensions is not None
            assert capabilities.extensions[EXTENSION_ID] == extension_settings(delta_formats=list(FORMATS))

        for tool in STOCK_SHAPES:
            args = {"key": shared[tool]}
            full = await call_stock(client, tool, args)  # the client validates it against the output schema
            assert not full.is_error
            etag = expected_tags[tool]
            policy = policy_of(tool)
            assert raw_block(full) == {"ttlMs": policy.ttl_ms, "cacheScope": policy.scope, "etag": etag}
            assert await served_tag(reference, tool, full) == etag
            assert (full.structured_content is not None) is STRUCTURED[tool]

            assert_section_4(await call_conditional(client, tool, args, etag), tool, etag)

        # The stock call_tool itself can revalidate when the schema requires only `kind`.
        tag = expected_tags["doc_answer"]
        meta = conditional_request_meta(tag)
        assert_section_4(
            await call_stock(client, "doc_answer", {"key": shared["doc_answer"]}, meta=meta), "doc_answer", tag
        )

        # A change on the server: the held tag now gets the full new answer, with a new tag.
        for tool in ("doc_dict", "doc_image", "doc_text_plain"):
            args = {"key": own[tool]}
            old = block_of(await call_stock(client, tool, args))
            assert old is not None
            assert old.etag is not None
            await call_stock(client, "write_doc", {**args, "text": "second edition"})
            changed = await call_conditional(client, tool, args, old.etag)
            new = block_of(changed)
            assert not changed.is_error
            assert new is not None
            assert not new.not_modified
            assert new.etag is not None
            assert new.etag != old.etag
            assert new.etag == await served_tag(reference, tool, changed)
            assert "second edition" in str(wire(changed)["content"])
            assert_section_4(await call_conditional(client, tool, args, new.etag), tool, new.etag)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("kind", SERVER_KINDS)
async def test_errors_and_malformed_tags_over_http(
    kind: ServerKind, era: Era, http_urls: dict[ServerKind, str]
) -> None:
    """The refusals of section 4 hold on a real network too: an error is never stamped or not-modified,
    and a malformed tag gets the full answer."""
    key = f"refusals-{era}"
    async with stock_client("mcp", ServerTarget.http(kind, http_urls[kind]), era) as client:
        for tool in ("fails", "refuses"):
            first = await call_stock(client, tool, {"key": key})
            again = await call_conditional(client, tool, {"key": key}, tag_of(first))
            for result in (first, again):
                assert result.is_error
                assert raw_block(result) is None

        full = await call_stock(client, "doc_dict", {"key": key})
        etag = raw_block(full)["etag"]  # type: ignore[index]
        malformed: list[Any] = [etag[3:-1], 'W/""', f'W/"{etag[3:-1]}\x01"', [etag], 7, "x" * 1_000_000]
        for tag in malformed:
            assert wire(await call_conditional(client, "doc_dict", {"key": key}, tag)) == wire(full)
