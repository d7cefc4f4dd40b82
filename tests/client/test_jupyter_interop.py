"""mcpcache and jupyter-mcp-server interoperate in both directions (docs/protocol.md section 10).

jupyter-mcp-server 2.2.4 already speaks `_meta["io.modelcontextprotocol/cache"]` on `read_notebook` and
`read_cell`. Three layers, cheapest first:

1. Our `ToolCache` against jupyter's own server-side code, in-process: an `MCPServer` with jupyter's
   `RevalidationExtension` and tools wrapped by jupyter's `results.structured(..., etag=True)`, exactly as
   its `server.py` declares them.
2. The other direction: jupyter's own reading helpers (`answered_etag`, `answered_kind`, `_cache_block`,
   `requested_etag`) applied to what mcpcache servers answer and to the conditional requests our cache
   sends.
3. The real thing: a `jupyter server` and a `jupyter-mcp-server` process on 127.0.0.1 serving a real
   notebook; our cache stores, serves, revalidates (not-modified) and replaces its answers.

Needs `pip install jupyter-mcp-server==2.2.4` (not a dependency of mcpcache). Without it the module is
skipped locally and fails under CI=true, where a silent skip would hide that interop went untested.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from support.jupyter import JupyterStack, require_jupyter_mcp_server

require_jupyter_mcp_server()

import mcp_types as mt  # noqa: E402
from fixture_servers.catalog import SERVER_KINDS, ServerKind, build  # noqa: E402
from jupyter_mcp_server import results as jresults  # noqa: E402
from jupyter_mcp_server import revalidation as jreval  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402
from support.calls import call_raw, call_stock  # noqa: E402
from support.transports import ERAS, MODERN, Era, ServerTarget, stock_client  # noqa: E402

from mcpcache.client import CacheSettings, ToolCache  # noqa: E402
from mcpcache.protocol import (  # noqa: E402
    META_KEY,
    NOT_MODIFIED_KEY,
    CacheBlock,
    NotModifiedReply,
    parse_etag,
)
from mcpcache.stores import MemoryStore  # noqa: E402

from .harness import VIEW_KINDS, FakeClock, ViewKind, assert_full_answer, block, connect, plain  # noqa: E402

pytestmark = pytest.mark.anyio

JUPYTER_CELL_ID = jresults.meta_key("cell_id")


def test_the_vocabulary_is_the_same() -> None:
    assert jresults.CACHE_META_KEY == META_KEY
    assert jreval.NOT_MODIFIED_KEY == NOT_MODIFIED_KEY
    # The two ends build the same not-modified reply from the same block and kind.
    stamped = {"ttlMs": 5000, "cacheScope": "private", "etag": 'W/"' + "ab" * 16 + '"'}
    theirs = jreval.not_modified(stamped, "notebook.read").model_dump(by_alias=True, mode="json", exclude_none=True)
    ours = NotModifiedReply.build(CacheBlock.model_validate(stamped), "notebook.read").to_wire()
    theirs.pop("resultType", None)
    assert theirs == ours


# -- 1. our cache against jupyter's server-side revalidation --------------------------------------


@dataclass
class JupyterStyle:
    """Notebook texts by name, and what jupyter's extension read from each conditional request."""

    texts: dict[str, str]
    runs: int = 0
    requested: list[str] | None = None


def build_jupyter_style(state: JupyterStyle) -> MCPServer:
    state.requested = []

    class Recording(jreval.RevalidationExtension):
        async def intercept_tool_call(self, params: mt.CallToolRequestParams, ctx: Any, call_next: Any) -> Any:
            assert state.requested is not None
            state.requested.append(jreval.requested_etag(params))  # jupyter reading our request
            return await super().intercept_tool_call(params, ctx, call_next)

    server = MCPServer("jupyter-style", extensions=[Recording()])

    # Declared the way jupyter-mcp-server's server.py declares read_notebook and list_notebooks.
    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=True))
    @jresults.structured("notebook.read", ttl_ms=5000, etag=True)
    async def read_notebook(notebook_name: str) -> jresults.ToolAnswer:
        state.runs += 1
        jresults.add_meta(cell_id=f"{notebook_name}-cell-0")
        return state.texts[notebook_name]

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=True))
    @jresults.structured("notebooks.list", ttl_ms=30000, cache_scope=jresults.SCOPE_SESSION, etag=True)
    async def list_notebooks() -> jresults.ToolAnswer:
        return "\n".join(sorted(state.texts))

    return server


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_our_cache_against_jupyters_revalidation(
    view_kind: ViewKind, era: Era, clock: FakeClock, cache: ToolCache
) -> None:
    state = JupyterStyle({"a.ipynb": "cell 0: x = 1"})
    args = {"notebook_name": "a.ipynb"}
    async with connect(view_kind, ServerTarget.memory(build_jupyter_style(state)), era, cache) as conn:
        first = await conn.call("read_notebook", args)
        assert (first.outcome.status, first.outcome.stored) == ("miss", True)
        etag = block(first.result)["etag"]  # type: ignore[index]
        assert parse_etag(etag) == etag, "jupyter's tags are well-formed weak tags"

        assert (await conn.call("read_notebook", args)).outcome.status == "fresh_hit"
        assert state.runs == 1

        clock.advance(6)
        mark = conn.mark()
        again = await conn.call("read_notebook", args)
        assert again.outcome.status == "revalidated"
        _, reply = conn.log.exchange("tools/call", since=mark)
        assert reply.nbytes < 600
        assert state.requested == ["", etag], "jupyter's requested_etag reads the tag our cache sent"
        assert plain(again.result) == plain(first.result)
        assert_full_answer(again.result)
        assert again.result.meta[JUPYTER_CELL_ID] == "a.ipynb-cell-0"  # type: ignore[index]  # jupyter's own key kept
        assert block(again.result) == {"ttlMs": 5000, "cacheScope": "private", "etag": etag}

        # The notebook changes: jupyter answers in full, and the entry is replaced.
        state.texts["a.ipynb"] = "cell 0: x = 2"
        clock.advance(6)
        changed = await conn.call("read_notebook", args)
        assert (changed.outcome.status, changed.outcome.stored) == ("miss", True)
        assert changed.result.structured_content["result"] == "cell 0: x = 2"  # type: ignore[index]
        assert block(changed.result)["etag"] != etag  # type: ignore[index]

        if view_kind == "fastmcp":
            clock.advance(6)
            parsed = await conn.view.call_tool("read_notebook", args)
            assert conn.view.last_outcome.status == "revalidated"
            assert parsed.data.kind == "notebook.read"
            assert parsed.structured_content["result"] == "cell 0: x = 2"


async def test_jupyters_session_scope_is_private(clock: FakeClock, store: MemoryStore) -> None:
    state = JupyterStyle({"a.ipynb": "x", "b.ipynb": "y"})
    server = build_jupyter_style(state)
    alice = ToolCache(store, CacheSettings(share_public=True), partition="alice", clock=clock)
    bob = ToolCache(store, CacheSettings(share_public=True), partition="bob", clock=clock)
    async with (
        connect("mcp", ServerTarget.memory(server), MODERN, alice, server_id="jupyter") as a,
        connect("mcp", ServerTarget.memory(server), MODERN, bob, server_id="jupyter") as b,
    ):
        listed = await a.call("list_notebooks", {})
        assert block(listed.result)["cacheScope"] == "session"  # type: ignore[index]
        assert listed.outcome.stored
        assert (await b.call("list_notebooks", {})).outcome.status == "miss"
        assert (await a.call("list_notebooks", {})).outcome.status == "fresh_hit"


# -- 2. jupyter's client-side helpers on mcpcache's answers ----------------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("server_kind", SERVER_KINDS)
async def test_jupyters_helpers_read_mcpcache_answers(server_kind: ServerKind, era: Era) -> None:
    async with stock_client("mcp", ServerTarget.memory(build(server_kind)), era) as client:
        for tool, kind in (("doc_dict", "doc"), ("doc_answer", "doc.answer"), ("doc_model", "doc.model")):
            full = await call_stock(client, tool, {"key": "k"})
            ours = block(full)
            assert ours is not None
            assert jreval.answered_etag(full) == ours["etag"]
            assert jreval.answered_kind(full) == kind
            assert jreval._cache_block(full.meta) == ours

            # A conditional request in the form jupyter's requested_etag reads, sent as is.
            params = mt.CallToolRequestParams(
                name=tool, arguments={"key": "k"}, _meta={META_KEY: {"etag": ours["etag"]}}
            )
            assert jreval.requested_etag(params) == ours["etag"]
            reply = await call_raw(client, tool, {"key": "k"}, params.meta)  # type: ignore[arg-type]
            assert jreval.answered_etag(reply) == ours["etag"]
            assert jreval.answered_kind(reply) == kind
            if tool == "doc_model":  # its schema refuses {"kind": K}: the full answer under the tag
                assert reply.content
                assert not jreval._cache_block(reply.meta).get(jreval.NOT_MODIFIED_KEY)
                continue
            assert reply.content == []
            assert jreval._cache_block(reply.meta)[jreval.NOT_MODIFIED_KEY] is True


async def test_jupyters_helpers_read_what_our_cache_sends_and_serves(clock: FakeClock, cache: ToolCache) -> None:
    from .lab import Lab, build_lab

    lab = Lab()
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        first = await conn.call("read", {"key": "k"})
        clock.advance(6)
        served = await conn.call("read", {"key": "k"})
    tag = jreval.answered_etag(first.result)
    sent = mt.CallToolRequestParams(name="read", arguments={"key": "k"}, _meta=lab.seen_meta[-1])
    assert jreval.requested_etag(sent) == tag
    # What the cache hands its caller reads, to jupyter's helpers, as a full answer (no notModified).
    assert jreval.answered_etag(served.result) == tag
    assert jreval.answered_kind(served.result) == "doc"
    assert jreval.NOT_MODIFIED_KEY not in jreval._cache_block(served.result.meta)


# -- 3. the real jupyter-mcp-server, on a real notebook --------------------------------------------


NOTEBOOK = {"notebook_name": "default", "response_format": "detailed"}
CELL = {"notebook_name": "default", "cell_index": 0}


@pytest.mark.slow
@pytest.mark.parametrize("era", ERAS)
async def test_the_real_jupyter_mcp_server(jupyter_stack: JupyterStack, era: Era) -> None:
    clock = FakeClock()
    cache = ToolCache(MemoryStore(clock=clock), CacheSettings(trusted=True), clock=clock)
    target = ServerTarget.http("sdk", jupyter_stack.url)
    async with connect("mcp", target, era, cache) as conn:
        for tool, args in (("read_notebook", NOTEBOOK), ("read_cell", CELL)):
            first = await conn.call(tool, args)
            assert not first.result.is_error, first.result
            assert (first.outcome.status, first.outcome.stored) == ("miss", True)
            etag = block(first.result)["etag"]  # type: ignore[index]

            mark = conn.mark()
            assert (await conn.call(tool, args)).outcome.status == "fresh_hit"
            assert conn.tool_calls(mark) == 0

            clock.advance(6)
            mark = conn.mark()
            again = await conn.call(tool, args)
            assert again.outcome.status == "revalidated", again.outcome
            _, reply = conn.log.exchange("tools/call", since=mark)
            assert reply.nbytes < 600, "jupyter-mcp-server answered not-modified"
            assert plain(again.result) == plain(first.result)
            assert_full_answer(again.result)
            assert block(again.result) == {"ttlMs": 5000, "cacheScope": "private", "etag": etag}
            if tool == "read_cell":
                assert again.result.meta[JUPYTER_CELL_ID] == first.result.meta[JUPYTER_CELL_ID]  # type: ignore[index]

        # An edit through the cache: insert_cell is not read-only (trusted annotations), so the stored
        # notebook is revalidated at once, and the changed notebook replaces it.
        clock.advance(0.5)
        inserted = await conn.call(
            "insert_cell", {**CELL, "cell_index": 2, "cell_type": "markdown", "cell_source": f"added in {era}"}
        )
        assert not inserted.result.is_error, inserted.result
        clock.advance(0.001)
        changed = await conn.call("read_notebook", NOTEBOOK)
        assert (changed.outcome.status, changed.outcome.stored) == ("miss", True)
        assert f"added in {era}" in changed.result.structured_content["result"]  # type: ignore[index]
        assert (await conn.call("read_notebook", NOTEBOOK)).outcome.status == "fresh_hit"
