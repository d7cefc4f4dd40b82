"""A stub the tool's output schema refuses is never sent (docs/protocol.md section 4).

A not-modified reply and a delta reply carry `structuredContent: {"kind": K}`. When the tool's output
schema requires more than `kind`, a server MUST NOT answer that way: the full answer goes, stamped with
its tag. A schema that accepts the stub, and a tool with none, still get not-modified. The decisions are
tested pure; the adapters on a real FastMCP server and a real MCP SDK `MCPServer` through stock clients
(which validate every answer against the schema) on memory streams.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import mcp_types as mt
import pytest
from fastmcp import FastMCP
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, ConfigDict
from support.calls import block_of, call_raw, call_stock, wire
from support.transports import MODERN, ServerTarget, stock_client

from mcpcache.delta import FORMAT
from mcpcache.protocol import NO_CONDITIONS, CacheBlock, Conditions, conditional_request_meta
from mcpcache.server.decisions import (
    Answer,
    AnswerNotModified,
    RunBody,
    SendFull,
    SkipBody,
    Stamp,
    TryDelta,
    decide_after_body,
    decide_before_body,
    decide_delta,
    plan_delta,
)
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.server.sdk import RevalidationExtension
from mcpcache.server.stubs import NO_OUTPUT_SCHEMA, StubCheck, StubChecks

pytestmark = pytest.mark.anyio

TAG = 'W/"0123456789abcdef0123456789abcdef"'
OLD = 'W/"fedcba9876543210fedcba9876543210"'
STRICT_SCHEMA = {
    "type": "object",
    "properties": {"kind": {"type": "string"}, "text": {"type": "string"}},
    "required": ["kind", "text"],
}
LOOSE_SCHEMA = {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"]}
POLICY = CachePolicy(ttl_ms=5000)


def answer(structured: Any = None) -> Answer:
    return Answer(content=[mt.TextContent(type="text", text="x")], structured_content=structured, is_error=False)


# --- the decisions, pure ---------------------------------------------------------------------------


def test_a_refused_stub_makes_a_matching_tag_a_stamped_full_answer() -> None:
    strict = StubCheck(STRICT_SCHEMA)
    decision = decide_after_body("read", POLICY, TAG, TAG, answer({"kind": "doc", "text": "t"}), stub=strict)
    assert isinstance(decision, Stamp)
    assert decision.block.etag == TAG
    assert "'text' is a required property" in decision.reason
    assert "full answer" in decision.reason


@pytest.mark.parametrize("stub", [NO_OUTPUT_SCHEMA, StubCheck(LOOSE_SCHEMA), StubCheck.unknown("attach it")])
def test_no_schema_a_schema_that_takes_the_stub_or_an_unknown_one_keep_not_modified(stub: StubCheck) -> None:
    decision = decide_after_body("read", POLICY, TAG, TAG, answer({"kind": "doc", "text": "t"}), stub=stub)
    assert isinstance(decision, AnswerNotModified)
    assert decision.reply.structured_content == {"kind": "doc"}


def test_an_answer_without_structured_content_has_no_stub_to_refuse() -> None:
    decision = decide_after_body("read", POLICY, TAG, TAG, answer(None), stub=StubCheck(STRICT_SCHEMA))
    assert isinstance(decision, AnswerNotModified)
    assert decision.reply.structured_content is None


def test_the_stub_is_checked_with_the_kind_it_would_carry() -> None:
    """The K rule picks the kind; a schema may accept one kind and not another (a `const`)."""
    schema = {"type": "object", "properties": {"kind": {"const": "doc"}}, "required": ["kind"]}
    stub = StubCheck(schema)
    own = decide_after_body("read", POLICY, TAG, TAG, answer({"kind": "doc"}), stub=stub)
    assert isinstance(own, AnswerNotModified)
    named = decide_after_body("read", POLICY, TAG, TAG, answer({"text": "t"}), stub=stub)  # K = the tool name
    assert isinstance(named, Stamp)


def test_a_validator_match_runs_the_body_when_the_stub_is_refused() -> None:
    refused = decide_before_body("read", POLICY, TAG, TAG, True, stub=StubCheck(STRICT_SCHEMA))
    assert isinstance(refused, RunBody)
    assert "fails the tool's output schema" in refused.reason
    assert isinstance(decide_before_body("read", POLICY, TAG, TAG, True, stub=StubCheck(LOOSE_SCHEMA)), SkipBody)
    # No structured content: no stub, nothing to refuse.
    assert isinstance(decide_before_body("read", POLICY, TAG, TAG, False, stub=StubCheck(STRICT_SCHEMA)), SkipBody)


def test_a_refused_stub_sends_no_delta() -> None:
    conditions = Conditions(etag=OLD, accept_delta=(FORMAT,))
    plan = plan_delta(POLICY, conditions, TAG, offered=(FORMAT,), kept=True, refused="the schema refuses it")
    assert isinstance(plan, SendFull)
    assert "a delta reply carries the same stub" in plan.reason
    tried = plan_delta(POLICY, conditions, TAG, offered=(FORMAT,), kept=True)
    assert isinstance(tried, TryDelta)
    choice = decide_delta(
        "read",
        POLICY,
        CacheBlock(ttl_ms=5000, cache_scope="private", etag=TAG),
        tried,
        {"kind": "doc", "text": "t"},
        base_held=True,
        answer_size=1000,
        ops=[{"op": "replace", "path": "/s/text", "value": "t"}],
        ops_size=50,
        digest="d",
        stub=StubCheck(STRICT_SCHEMA),
    )
    assert isinstance(choice, SendFull)
    assert NO_CONDITIONS.accept_delta == ()


def test_a_schema_that_cannot_be_used_refuses_the_stub() -> None:
    broken = StubCheck({"type": "no such type"})
    reason = broken.refusal("doc")
    assert reason is not None
    assert "cannot be used" in reason


def test_verdicts_are_kept_per_tool_and_schema() -> None:
    checks = StubChecks()
    first = checks.get("read", dict(STRICT_SCHEMA))
    assert checks.get("read", dict(STRICT_SCHEMA)) is first  # an equal schema: the same check, compiled once
    assert first.refusal("doc") is first.refusal("doc")
    changed = checks.get("read", LOOSE_SCHEMA)
    assert changed is not first
    assert changed.refusal("doc") is None
    assert checks.get("read", None) is NO_OUTPUT_SCHEMA


# --- the adapters, on real servers -----------------------------------------------------------------


class Strict(BaseModel):
    """Requires `text`: `{"kind": ...}` alone fails it."""

    kind: Literal["doc"] = "doc"
    text: str


class Loose(BaseModel):
    """Requires only `kind`: the stub passes."""

    model_config = ConfigDict(extra="allow")
    kind: str
    text: str | None = None


class Source:
    def __init__(self) -> None:
        self.text = "first"
        self.version = 0
        self.runs: dict[str, int] = {}

    def ran(self, tool: str) -> None:
        self.runs[tool] = self.runs.get(tool, 0) + 1


def policies(source: Source) -> ToolPolicies:
    return ToolPolicies(
        {
            "strict": CachePolicy(ttl_ms=5000),
            "strict_versioned": CachePolicy(ttl_ms=5000, validator=lambda args: source.version),
            "loose": CachePolicy(ttl_ms=5000),
        }
    )


def tools(source: Source) -> list[Any]:
    def strict(key: str) -> Strict:
        source.ran("strict")
        return Strict(text=source.text)

    def strict_versioned(key: str) -> Strict:
        source.ran("strict_versioned")
        return Strict(text=source.text)

    def loose(key: str) -> Loose:
        source.ran("loose")
        return Loose(kind="doc", text=source.text)

    return [strict, strict_versioned, loose]


ServerKind = Literal["fastmcp", "sdk"]


def build(kind: ServerKind, source: Source, *, attach: bool = True) -> tuple[FastMCP | MCPServer, Any]:
    """The server and the object whose `stats` count what mcpcache did."""
    if kind == "fastmcp":
        server = FastMCP("stubs")
        for fn in tools(source):
            server.tool(fn)
        return server, install(server, policies(source))
    extension = RevalidationExtension(policies(source))
    sdk = MCPServer("stubs", extensions=[extension])
    for fn in tools(source):
        sdk.add_tool(fn)
    if attach:
        extension.attach(sdk)
    return sdk, extension


@pytest.fixture(params=["fastmcp", "sdk"])
def kind(request: pytest.FixtureRequest) -> ServerKind:
    return request.param  # type: ignore[no-any-return]


ARGS = {"key": "k"}


@pytest.mark.parametrize("client_kind", ["mcp", "fastmcp"])
async def test_a_strict_schema_gets_the_full_answer_under_its_tag(kind: ServerKind, client_kind: str) -> None:
    """The stock client's own `call_tool(meta=...)` validates the reply against the schema: it passes,
    being the whole answer, stamped with the tag that matched."""
    source = Source()
    server, adapter = build(kind, source)
    async with stock_client(client_kind, ServerTarget.memory(server), MODERN) as client:  # type: ignore[arg-type]
        first = await call_stock(client, "strict", ARGS)
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag is not None
        again = await call_stock(client, "strict", ARGS, meta=conditional_request_meta(tag))
    block = block_of(again)
    assert block is not None
    assert block.etag == tag
    assert not block.not_modified
    assert again.structured_content == {"kind": "doc", "text": "first"}
    assert wire(again)["content"] == wire(first)["content"]
    assert source.runs["strict"] == 2
    assert adapter.stats.not_modified == 0
    assert adapter.stats.stamped == 2


async def test_a_schema_that_takes_the_stub_still_gets_not_modified(kind: ServerKind) -> None:
    source = Source()
    server, adapter = build(kind, source)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "loose", ARGS)
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag is not None
        again = await call_stock(client, "loose", ARGS, meta=conditional_request_meta(tag))
    assert again.content == []
    assert again.structured_content == {"kind": "doc"}
    assert block_of(again) == CacheBlock(ttl_ms=5000, cache_scope="private", etag=tag, not_modified=True)
    assert adapter.stats.not_modified == 1


async def test_a_validator_match_runs_the_body_for_a_strict_schema(kind: ServerKind) -> None:
    """Where the tag names a version and the body would be skipped, it runs: the full answer needs it."""
    source = Source()
    server, adapter = build(kind, source)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "strict_versioned", ARGS)
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag is not None
        for _ in range(2):
            again = await call_stock(client, "strict_versioned", ARGS, meta=conditional_request_meta(tag))
            assert block_of(again) == CacheBlock(ttl_ms=5000, cache_scope="private", etag=tag)
            assert again.structured_content == {"kind": "doc", "text": "first"}
    assert source.runs["strict_versioned"] == 3
    assert adapter.stats.body_skipped == 0
    assert adapter.stats.not_modified == 0


async def test_a_caller_accepting_a_delta_gets_the_full_answer_for_a_strict_schema(kind: ServerKind) -> None:
    """The delta reply carries the same stub: never sent where the schema refuses it."""
    source = Source()
    source.text = "long " * 100
    server, adapter = build(kind, source)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "strict", ARGS)
        old = block_of(first).etag  # type: ignore[union-attr]
        assert old is not None
        loose_first = await call_stock(client, "loose", ARGS)
        loose_old = block_of(loose_first).etag  # type: ignore[union-attr]
        assert loose_old is not None
        source.text += "!"  # a small change: a delta would be a fraction of the answer
        changed = await call_raw(client, "strict", ARGS, conditional_request_meta(old, accept_delta=(FORMAT,)))
        # The loose tool, changed the same way, does get a delta: the history and the caller are ready for one.
        loose_meta = conditional_request_meta(loose_old, accept_delta=(FORMAT,))
        loose_changed = await call_raw(client, "loose", ARGS, loose_meta)
    block = block_of(changed)
    assert block is not None
    assert block.delta is None
    assert block.etag not in (None, old)
    assert changed.structured_content == {"kind": "doc", "text": source.text}
    assert adapter.stats.deltas_declined == 1
    loose_block = block_of(loose_changed)
    assert loose_block is not None
    assert loose_block.delta is not None
    assert adapter.stats.deltas_sent == 1


async def test_an_sdk_extension_not_attached_cannot_check_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """Without `attach`, the SDK extension cannot see the schema: the stub goes unchecked, as before, and
    a warning names the tool (once) and how to let it check."""
    source = Source()
    server, _ = build("sdk", source, attach=False)
    caplog.set_level(logging.WARNING, "mcpcache.server")
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        first = await call_stock(client, "strict", ARGS)
        tag = block_of(first).etag  # type: ignore[union-attr]
        assert tag is not None
        for _ in range(2):
            reply = await call_raw(client, "strict", ARGS, conditional_request_meta(tag))
            assert reply.structured_content == {"kind": "doc"}
    warnings = [r.getMessage() for r in caplog.records if r.name == "mcpcache.server"]
    assert len(warnings) == 1
    assert "'strict'" in warnings[0]
    assert "attach" in warnings[0]
