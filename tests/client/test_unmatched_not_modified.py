"""A not-modified reply the cache cannot match, for a tool whose output schema requires more than `kind`.

The server is an SDK `MCPServer` with mcpcache's revalidation and the lab's hostile layer (tests/client/
lab.py), serving `strict`, whose output model requires `key` and `text`: a not-modified stub
`{"kind": "doc"}` fails its schema, so a cache that passed the stub to the client's own check would raise
the check's RuntimeError, and one that returned it would hand the caller a stub. Neither may happen: the
call is repeated without a tag, and the caller gets the real answer, or an error result when the server
insists.

Every request the cache sends on the caller's behalf, the conditional one and the repeat included,
carries what the caller's own request carried: its progress token (and progress reaches the caller's
callback), its `_meta` keys, and the W3C trace context of the caller's span.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio
import fastmcp
import mcp_types as mt
import pytest
from mcp.server.mcpserver import Context as SDKContext
from mcp.server.mcpserver import MCPServer
from opentelemetry.sdk.trace import TracerProvider
from pydantic import BaseModel
from support.transports import ERAS, MODERN, Era, ServerTarget

from mcpcache.client import ToolCache
from mcpcache.protocol import META_KEY, NOT_MODIFIED_KEY
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.server.sdk import RevalidationExtension

from .harness import VIEW_KINDS, Conn, FakeClock, ViewKind, assert_full_answer, connect
from .lab import Lab, Rewrite, _hostile

pytestmark = pytest.mark.anyio

KEY = {"key": "k"}
OTHER_TAG = 'W/"00000000000000000000000000000000"'
CALLER_KEY = "example.com/caller"


class StrictDoc(BaseModel):
    """An output model a not-modified `{"kind": "doc"}` does not satisfy."""

    kind: Literal["doc"] = "doc"
    key: str
    text: str


def build_strict(lab: Lab) -> MCPServer:
    policies = ToolPolicies({"strict": CachePolicy(ttl_ms=5000)})
    server = MCPServer("strict-sdk", extensions=[RevalidationExtension(policies)], middleware=[_hostile(lab)])

    async def strict(key: str, ctx: SDKContext) -> StrictDoc:
        await ctx.report_progress(1, 2, "reading")
        lab.docs.ran("strict", key)
        return StrictDoc(key=key, text=lab.docs.text(key))

    server.add_tool(strict, annotations=mt.ToolAnnotations(read_only_hint=True))
    return server


def sent_tag(meta: dict[str, Any] | None) -> bool:
    return isinstance(meta, dict) and isinstance(meta.get(META_KEY), dict) and "etag" in meta[META_KEY]


def stub(result: dict[str, Any], etag: str | None = None) -> dict[str, Any]:
    """The reply of the brief: `{"kind": "doc"}`, no content, and a block that says not modified."""
    block = dict((result.get("_meta") or {}).get(META_KEY) or {"ttlMs": 5000, "cacheScope": "private"})
    block[NOT_MODIFIED_KEY] = True
    if etag is not None:
        block["etag"] = etag
    return {**result, "structuredContent": {"kind": "doc"}, "content": [], "isError": False, "_meta": {META_KEY: block}}


def untagged_stub_then_honest() -> Rewrite:
    """The stub to the first untagged call; every later call answered honestly."""
    answered = 0

    def rewrite(result: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
        nonlocal answered
        answered += 1
        return stub(result) if answered == 1 and not sent_tag(meta) else result

    return rewrite


def always_stub(result: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
    return stub(result)


async def stored_then_stale(conn: Conn, clock: FakeClock) -> None:
    first = await conn.call("strict", KEY)
    assert first.outcome.stored
    clock.advance(6)


# -- the untagged call answered with the stub -----------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_stub_to_an_untagged_call_is_asked_again_and_the_honest_answer_returned(
    view_kind: ViewKind, era: Era, clock: FakeClock, cache: ToolCache
) -> None:
    lab = Lab()
    async with connect(view_kind, ServerTarget.memory(build_strict(lab)), era, cache) as conn:
        # What the stub does to a stock client: its own schema check refuses it.
        lab.rewrite = always_stub
        with pytest.raises(RuntimeError):
            await conn.direct("strict", KEY)

        lab.rewrite = untagged_stub_then_honest()
        lab.seen_meta.clear()
        mark = conn.mark()
        call = await conn.call("strict", KEY)
        assert conn.tool_calls(mark) == 2
        assert [sent_tag(meta) for meta in lab.seen_meta] == [False, False]
        if view_kind == "fastmcp":
            # FastMCP's own call_tool parses `.data` from the real answer, never from the stub.
            parsed = await conn.view.call_tool("strict", KEY)
            assert (parsed.data.key, parsed.data.text) == ("k", "k: first edition")

    assert_full_answer(call.result)
    assert not call.result.is_error
    assert call.result.structured_content == {"kind": "doc", "key": "k", "text": "k: first edition"}
    assert (call.outcome.status, call.outcome.stored) == ("miss", True)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_server_that_insists_gets_an_error_result_never_the_stub_nor_the_schema_error(
    view_kind: ViewKind, era: Era, clock: FakeClock, cache: ToolCache
) -> None:
    lab = Lab(rewrite=always_stub)
    async with connect(view_kind, ServerTarget.memory(build_strict(lab)), era, cache) as conn:
        mark = conn.mark()
        call = await conn.call("strict", KEY)  # raises nothing
        assert conn.tool_calls(mark) == 2
        assert [sent_tag(meta) for meta in lab.seen_meta] == [False, False]
        if view_kind == "fastmcp":
            # An error result, which FastMCP's own call_tool raises as it raises any tool error.
            with pytest.raises(fastmcp.exceptions.ToolError, match="not modified"):
                await conn.view.call_tool("strict", KEY)
        else:
            result = await conn.view.call_tool("strict", KEY)
            assert result.is_error

    assert call.result.is_error
    assert call.result.structured_content is None, "never the stub's {'kind': ...}"
    assert "not modified" in call.result.content[0].text  # type: ignore[union-attr]
    assert not call.outcome.stored


# -- what every request the cache sends carries ---------------------------------------------------


class Caller:
    """One caller's per-call options, and what reached its progress callback."""

    def __init__(self) -> None:
        self.progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append((progress, total, message))

    async def call(self, conn: Conn, meta: dict[str, Any]) -> Any:
        if conn.kind == "fastmcp":
            return await conn.view.call_mcp("strict", KEY, progress_handler=self.on_progress, meta=meta)
        return await conn.view.call("strict", KEY, progress_callback=self.on_progress, meta=meta)


def assert_carries(meta: dict[str, Any] | None, trace_id: str) -> None:
    assert isinstance(meta, dict), meta
    assert "progressToken" in meta, meta
    assert meta.get(CALLER_KEY) == {"n": 1}, meta
    traceparent = meta.get("traceparent")
    assert isinstance(traceparent, str), meta
    assert traceparent.split("-")[1] == trace_id, (traceparent, trace_id)


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_every_request_carries_the_callers_progress_token_meta_and_trace_context(
    view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    lab = Lab()
    caller = Caller()
    # A tracer provider of the test's own (not installed globally): the SDK's propagator injects the
    # current span's context into every request's `_meta`.
    tracer = TracerProvider().get_tracer("mcpcache-tests")
    async with connect(view_kind, ServerTarget.memory(build_strict(lab)), MODERN, cache) as conn:
        with tracer.start_as_current_span("caller") as span:
            trace_id = format(span.get_span_context().trace_id, "032x")

            # An ordinary call, answered with the stub, and its repeat.
            lab.rewrite = untagged_stub_then_honest()
            first = await caller.call(conn, {CALLER_KEY: {"n": 1}})
            assert first.outcome.stored
            assert [sent_tag(meta) for meta in lab.seen_meta] == [False, False]

            # A conditional call, confirmed.
            clock.advance(6)
            lab.rewrite = None
            confirmed = await caller.call(conn, {CALLER_KEY: {"n": 1}})
            assert confirmed.outcome.status == "revalidated"

            # A conditional call answered with a tag that is not the one sent, and its repeat.
            clock.advance(6)
            lab.rewrite = lambda result, meta: stub(result, OTHER_TAG) if sent_tag(meta) else result
            repeated = await caller.call(conn, {CALLER_KEY: {"n": 1}})
            assert repeated.outcome.status == "miss"
        await anyio.wait_all_tasks_blocked()

    assert [sent_tag(meta) for meta in lab.seen_meta] == [False, False, True, True, False]
    for meta in lab.seen_meta:
        assert_carries(meta, trace_id)
    # The server reported progress on each of the five requests, and each report reached the caller.
    assert caller.progress == [(1, 2, "reading")] * 5
    for call in (first, confirmed, repeated):
        assert call.result.structured_content == {"kind": "doc", "key": "k", "text": "k: first edition"}


async def test_fastmcps_client_wide_progress_handler_hears_cached_calls_as_it_hears_stock_ones(
    cache: ToolCache,
) -> None:
    # fastmcp.Client(progress_handler=...) applies to every call that does not name its own.
    lab = Lab()
    heard: list[float] = []

    async def handler(progress: float, total: float | None, message: str | None) -> None:
        heard.append(progress)

    target = ServerTarget.memory(build_strict(lab))
    async with connect("fastmcp", target, MODERN, cache, progress_handler=handler) as conn:
        await conn.client.call_tool("strict", {"key": "stock"})
        assert heard == [1]
        call = await conn.view.call_mcp("strict", KEY)
        assert call.outcome.stored
        await anyio.wait_all_tasks_blocked()
    assert "progressToken" in (lab.seen_meta[-1] or {})
    assert heard == [1, 1]


# -- a full answer that fails the schema ----------------------------------------------------------


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_full_answer_to_a_conditional_call_that_fails_the_schema_raises_as_for_a_stock_client(
    view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    def changed_but_broken(result: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
        # A changed full answer (a new tag, no not-modified claim) whose structured content lacks fields
        # the tool's output schema requires.
        return {
            **result,
            "structuredContent": {"kind": "doc"},
            "content": [{"type": "text", "text": "changed"}],
            "_meta": {META_KEY: {"ttlMs": 5000, "cacheScope": "private", "etag": OTHER_TAG}},
        }

    lab = Lab()
    async with connect(view_kind, ServerTarget.memory(build_strict(lab)), MODERN, cache) as conn:
        await stored_then_stale(conn, clock)
        lab.rewrite = changed_but_broken
        with pytest.raises(Exception) as stock:  # noqa: PT011 - whatever the stock client raises
            await conn.direct("strict", KEY)
        lab.seen_meta.clear()
        with pytest.raises(type(stock.value)) as cached:
            await conn.call("strict", KEY)
        assert [sent_tag(meta) for meta in lab.seen_meta] == [True]
        assert str(cached.value) == str(stock.value)
        if view_kind == "fastmcp":
            with pytest.raises(type(stock.value), match=str(stock.value)[:20]):
                await conn.view.call_tool("strict", KEY)
        lab.rewrite = None
        after = await conn.call("strict", KEY)
    # The broken answer replaced nothing.
    assert after.outcome.status == "revalidated"
    assert after.result.structured_content == {"kind": "doc", "key": "k", "text": "k: first edition"}
