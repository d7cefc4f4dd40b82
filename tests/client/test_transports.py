"""The core flows over real process boundaries: stdio and streamable HTTP, in both protocol eras.

The servers are the catalogue's (tests/fixture_servers/serve.py) in their own processes, so the cache only ever
sees what crossed the wire. Body runs are read from the server with its undeclared `body_runs` tool,
called around the cache. The HTTP servers are shared by the module; each cell uses keys of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fixture_servers.catalog import SERVER_KINDS, ServerKind
from support.transports import LEGACY, MODERN, Era, ServerTarget, catalogue_command, http_servers

from mcpcache.client import ToolCache
from mcpcache.stores import MemoryStore

from .harness import Conn, FakeClock, ViewKind, assert_full_answer, connect, plain

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module")
def http_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[ServerKind, str]]:
    log_path = tmp_path_factory.mktemp("client-http") / "servers.log"
    with log_path.open("wb") as log, http_servers([catalogue_command(kind) for kind in SERVER_KINDS], log=log) as urls:
        yield dict(zip(SERVER_KINDS, urls, strict=True))


async def runs(conn: Conn, key: str) -> dict[str, int]:
    result = await conn.direct("body_runs", {"key": key})
    counts: dict[str, int] = result.structured_content or {}
    return counts


async def core_flow(conn: Conn, clock: FakeClock, key: str) -> None:
    args = {"key": key}
    first = await conn.call("doc_model", args)
    assert (first.outcome.status, first.outcome.stored) == ("miss", True)
    assert (await runs(conn, key)).get("doc_model") == 1

    mark = conn.mark()
    hit = await conn.call("doc_model", args)
    assert hit.outcome.status == "fresh_hit"
    assert conn.tool_calls(mark) == 0
    assert hit.result == first.result
    assert (await runs(conn, key)).get("doc_model") == 1

    # Stale: revalidated through the user's own call_tool. doc_model's schema requires more than `kind`,
    # so the server sends the full answer under the tag the cache sent (docs/protocol.md section 4), and
    # the cache keeps it; the client's own check passes.
    clock.advance(6)
    mark = conn.mark()
    again = await conn.view.call_tool("doc_model", args)
    assert conn.view.last_outcome.status == "miss"
    assert "same tag" in conn.view.last_outcome.reason
    assert conn.tool_calls(mark) == 1
    if conn.kind == "fastmcp":
        assert (again.data.key, again.data.text) == (key, f"{key}: first edition")
    else:
        assert plain(again) == plain(first.result)
        assert_full_answer(again)
    assert (await runs(conn, key)).get("doc_model") == 2

    # The answer changes on the server: the full new answer replaces the entry.
    await conn.direct("write_doc", {"key": key, "text": f"{key}: second edition"})
    clock.advance(6)
    changed = await conn.call("doc_model", args)
    assert (changed.outcome.status, changed.outcome.stored) == ("miss", True)
    assert changed.result.structured_content["text"] == f"{key}: second edition"  # type: ignore[index]
    assert (await conn.call("doc_model", args)).outcome.status == "fresh_hit"

    # A not-modified reply whose `_meta` carries a tool's own keys keeps them on the served copy.
    await conn.call("doc_result", args)
    clock.advance(1.5)
    merged = await conn.call("doc_result", args)
    assert merged.outcome.status == "revalidated"
    assert merged.result.meta is not None
    assert merged.result.meta["example.com/own"] == {"n": 1}

    # Errors come back, and are never stored.
    for _ in range(2):
        failed = await conn.call("fails", args)
        assert failed.result.is_error
        assert not failed.outcome.stored
    assert (await runs(conn, key)).get("fails") == 2


CELLS = [("mcp", MODERN), ("fastmcp", MODERN), ("mcp", LEGACY), ("fastmcp", LEGACY)]


@pytest.mark.parametrize("server_kind", SERVER_KINDS)
@pytest.mark.parametrize(("view_kind", "era"), CELLS)
async def test_over_streamable_http(
    view_kind: ViewKind, era: Era, server_kind: ServerKind, http_urls: dict[ServerKind, str]
) -> None:
    clock = FakeClock()
    cache = ToolCache(MemoryStore(clock=clock), clock=clock)
    target = ServerTarget.http(server_kind, http_urls[server_kind])
    async with connect(view_kind, target, era, cache) as conn:
        await core_flow(conn, clock, f"client-http-{view_kind}-{era}")


@pytest.mark.parametrize(
    ("view_kind", "era", "server_kind"),
    [
        ("mcp", MODERN, "fastmcp"),
        ("fastmcp", LEGACY, "fastmcp"),
        ("session", LEGACY, "sdk"),
        ("fastmcp", MODERN, "sdk"),
    ],
)
async def test_over_stdio(view_kind: ViewKind, era: Era, server_kind: ServerKind) -> None:
    clock = FakeClock()
    cache = ToolCache(MemoryStore(clock=clock), clock=clock)
    async with connect(view_kind, ServerTarget.stdio(server_kind), era, cache) as conn:
        await core_flow(conn, clock, "client-stdio")
