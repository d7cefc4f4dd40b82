"""The server half on both SDKs: what a declared tool answers, and when it answers not-modified.

Each test runs against the FastMCP 4.1.6 adapter (`install` / `RevalidationMiddleware`) and the MCP SDK
2.3.0 adapter (`RevalidationExtension`), through real clients on memory streams. The catalogue server
(tests/fixture_servers/catalog.py) is built twice where a comparison needs it: once with mcpcache, once without.
The transports and the other client are covered in tests/server/test_transports.py.
"""

from __future__ import annotations

import logging
import math
import re
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal

import mcp_types as mt
import pytest
from fastmcp import FastMCP
from fastmcp.server.middleware import Middleware
from fastmcp.server.middleware.caching import ResponseCachingMiddleware
from fixture_servers.catalog import (
    NOT_MODIFIED_KIND,
    OWN_META_KEY,
    SERVER_KINDS,
    STOCK_SHAPES,
    STRUCTURED,
    STUB_REFUSED,
    DocStore,
    ServerKind,
    build,
    policy_of,
)
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel
from support.calls import block_of, call_conditional, call_raw, call_stock, raw_block, wire
from support.served_tags import served_tag
from support.tags import tag_of
from support.transports import ERAS, MODERN, ClientKind, Era, ServerTarget, StockClient, stock_client

from mcpcache.delta import FORMATS
from mcpcache.etag import content_tag, validator_tag
from mcpcache.protocol import EXTENSION_ID, META_KEY, CacheBlock, conditional_request_meta, extension_settings
from mcpcache.server.fastmcp import RevalidationMiddleware, install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.server.sdk import RevalidationExtension

pytestmark = pytest.mark.anyio

SERVER_LOGGER = "mcpcache.server"


@pytest.fixture(params=SERVER_KINDS)
def kind(request: pytest.FixtureRequest) -> ServerKind:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def store() -> DocStore:
    return DocStore()


@pytest.fixture
def server(kind: ServerKind, store: DocStore) -> FastMCP | MCPServer:
    return build(kind, store)


def connect(
    server: FastMCP | MCPServer, era: Era = MODERN, client: ClientKind = "mcp"
) -> AbstractAsyncContextManager[StockClient]:
    return stock_client(client, ServerTarget.memory(server), era)


def without_block(result: mt.CallToolResult) -> dict[str, Any]:
    """The wire form with the cache block taken out (and an emptied `_meta` dropped)."""
    data = wire(result)
    meta = {k: v for k, v in data.pop("_meta", {}).items() if k != META_KEY}
    if meta:
        data["_meta"] = meta
    return data


def expected_block(tool: str, etag: str | None) -> dict[str, Any]:
    policy = policy_of(tool)
    block: dict[str, Any] = {"ttlMs": policy.ttl_ms, "cacheScope": policy.scope}
    if etag is not None:
        block["etag"] = etag
    return block


def assert_not_modified(result: mt.CallToolResult, *, etag: str, kind: str | None, ttl_ms: int, scope: str) -> None:
    """docs/protocol.md section 4, field by field."""
    data = wire(result)
    assert data["content"] == []
    assert data["isError"] is False
    if kind is None:
        assert "structuredContent" not in data
    else:
        assert data["structuredContent"] == {"kind": kind}
    assert data["_meta"][META_KEY] == {"ttlMs": ttl_ms, "cacheScope": scope, "etag": etag, "notModified": True}


def assert_full(result: mt.CallToolResult) -> CacheBlock:
    """A full answer: not an error, a cache block, and no notModified."""
    assert not result.is_error, wire(result)
    block = block_of(result)
    assert block is not None
    assert not block.not_modified
    assert "notModified" not in (raw_block(result) or {})
    return block


# --- full answers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("tool", STOCK_SHAPES)
async def test_every_shape_is_its_plain_answer_plus_the_cache_block(kind: ServerKind, tool: str, era: Era) -> None:
    """With mcpcache a stock client gets exactly what it got without it, plus `_meta[KEY]`."""
    args = {"key": "k1"}
    cached_server = build(kind)
    async with connect(cached_server, era) as client:
        cached = await call_stock(client, tool, args)
    async with connect(build(kind, cache=False), era) as client:
        plain = await call_stock(client, tool, args)

    assert without_block(cached) == wire(plain)
    assert raw_block(plain) is None
    block = raw_block(cached)
    etag = await served_tag(cached_server, tool, cached)
    assert block == expected_block(tool, etag)
    if tool in ("doc_result", "doc_mcp_result"):
        assert cached.meta is not None
        assert OWN_META_KEY in cached.meta
    assert (cached.structured_content is not None) is STRUCTURED[tool]


@pytest.mark.parametrize("era", ERAS)
async def test_undeclared_tools_are_left_exactly_as_they_were(kind: ServerKind, era: Era) -> None:
    tag = content_tag([], {"kind": "doc"})
    calls: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = [
        ("doc_undeclared", {"key": "u"}, None),
        ("doc_undeclared", {"key": "u"}, conditional_request_meta(tag)),
        ("write_doc", {"key": "u", "text": "new"}, None),
        ("doc_undeclared", {"key": "u"}, None),
        ("body_runs", {"key": "u"}, None),
    ]
    answers: dict[bool, list[dict[str, Any]]] = {}
    for cache in (True, False):
        async with connect(build(kind, cache=cache), era) as client:
            answers[cache] = [wire(await call_raw(client, name, args, meta)) for name, args, meta in calls]
    assert answers[True] == answers[False]
    assert all(META_KEY not in answer.get("_meta", {}) for answer in answers[True])


async def test_the_adapters_touch_only_declared_tools() -> None:
    """Declaring nothing changes nothing, on either SDK."""
    policies = ToolPolicies()
    fast = FastMCP("f")
    fast.tool(lambda key: {"key": key}, name="t")
    install(fast, policies)
    sdk = MCPServer("s", extensions=[RevalidationExtension(policies)])
    sdk.add_tool(lambda key: {"key": key}, name="t")
    for server in (fast, sdk):
        async with connect(server) as client:
            result = await call_stock(client, "t", {"key": "a"})
        assert META_KEY not in (result.meta or {})


# --- the not-modified reply ------------------------------------------------------------------------


@pytest.mark.parametrize("tool", STOCK_SHAPES)
async def test_a_matching_tag_gets_not_modified_and_a_change_gets_the_new_answer(
    server: FastMCP | MCPServer, tool: str
) -> None:
    args = {"key": f"nm-{tool}"}
    policy = policy_of(tool)
    async with connect(server) as client:
        first = await call_stock(client, tool, args)
        tag = assert_full(first).etag
        assert tag is not None

        reply = await call_conditional(client, tool, args, tag)
        if tool in STUB_REFUSED:
            # The schema refuses {"kind": K}: the full answer again, under the same tag (docs/protocol.md 4).
            assert assert_full(reply).etag == tag
            assert without_block(reply) == without_block(first)
        else:
            kind = NOT_MODIFIED_KIND.get(tool)
            assert_not_modified(reply, etag=tag, kind=kind, ttl_ms=policy.ttl_ms, scope=policy.scope)
        # Weak comparison: the same opaque tag without W/ matches, and the reply names the current tag.
        strong = await call_conditional(client, tool, args, tag.removeprefix("W/"))
        assert block_of(strong) == block_of(reply)

        await call_stock(client, "write_doc", {**args, "text": "second edition"})
        changed = await call_conditional(client, tool, args, tag)
        new_tag = assert_full(changed).etag
        assert new_tag is not None
        assert new_tag != tag
        assert new_tag == await served_tag(server, tool, changed)
        assert "second edition" in str(wire(changed)["content"])

        again = await call_conditional(client, tool, args, new_tag)
        assert block_of(again) == CacheBlock(
            ttl_ms=policy.ttl_ms, cache_scope=policy.scope, etag=new_tag, not_modified=tool not in STUB_REFUSED
        )


@pytest.mark.parametrize("client_kind", ["mcp", "fastmcp"])
async def test_a_kind_only_schema_lets_call_tool_with_meta_revalidate(
    server: FastMCP | MCPServer, client_kind: ClientKind
) -> None:
    """When the output schema requires only `kind`, the stock `call_tool(meta=...)` accepts the reply."""
    args = {"key": "meta-path"}
    async with connect(server, client=client_kind) as client:
        first = await call_stock(client, "doc_answer", args)
        tag = assert_full(first).etag
        assert tag is not None
        reply = await call_stock(client, "doc_answer", args, meta=conditional_request_meta(tag))
    assert_not_modified(reply, etag=tag, kind="doc.answer", ttl_ms=5000, scope="private")


# --- never not-modified ----------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["fails", "refuses"])
async def test_an_error_is_never_stamped_nor_not_modified(
    server: FastMCP | MCPServer, store: DocStore, tool: str
) -> None:
    args = {"key": "err"}
    async with connect(server) as client:
        first = await call_stock(client, tool, args)
        # The tag the error would carry if errors were stamped: sending it must still get the error.
        would_be = tag_of(first)
        conditional = await call_conditional(client, tool, args, would_be)
    for result in (first, conditional):
        assert result.is_error
        assert raw_block(result) is None
    assert wire(conditional) == wire(first)
    assert store.runs_of(tool, "err") == 2


async def test_etag_false_stamps_hints_but_never_a_tag(server: FastMCP | MCPServer) -> None:
    args = {"key": "untagged"}
    async with connect(server) as client:
        first = await call_stock(client, "doc_untagged", args)
        assert raw_block(first) == {"ttlMs": 5000, "cacheScope": "private"}
        conditional = await call_conditional(client, "doc_untagged", args, tag_of(first))
    assert wire(conditional) == wire(first)


@pytest.mark.parametrize(
    "meta",
    [
        None,
        {},
        {META_KEY: {}},
        {META_KEY: {"ttlMs": 5000}},
        {META_KEY: {"etag": None}},
        {"other/cache": {"etag": "CURRENT"}},
    ],
    ids=["no meta", "empty meta", "empty block", "block without etag", "null etag", "another key"],
)
async def test_a_request_without_a_tag_gets_the_full_answer(server: FastMCP | MCPServer, meta: Any) -> None:
    args = {"key": "no-tag"}
    async with connect(server) as client:
        first = await call_stock(client, "doc_dict", args)
        tag = assert_full(first).etag
        if meta and "other/cache" in meta:
            meta = {"other/cache": {"etag": tag}}
        result = await call_raw(client, "doc_dict", args, meta)
    assert wire(result) == wire(first)


def _malformed_variants(tag: str) -> dict[str, Any]:
    """Malformed tags, most of them derived from the current tag so that only the form is wrong."""
    opaque = tag[3:-1]
    return {
        "number": 12345,
        "float": 1.5,
        "bool": True,
        "list": [tag],
        "object": {"etag": tag},
        "1 MB": 'W/"' + opaque * (1_000_000 // len(opaque)) + '"',
        "no quotes": opaque,
        "W/ without quotes": f"W/{opaque}",
        "control characters": f'W/"{opaque}\x00"',
        "newline": f'W/"{opaque}\n"',
        "empty opaque": 'W/""',
        "empty": "",
        "lowercase w/": f'w/"{opaque}"',
        "trailing space": f"{tag} ",
        "unterminated": f'W/"{opaque}',
    }


@pytest.mark.parametrize("variant", list(_malformed_variants('W/"' + "0" * 32 + '"')))
async def test_a_malformed_tag_gets_the_full_answer_never_an_exception(
    server: FastMCP | MCPServer, variant: str
) -> None:
    args = {"key": "malformed"}
    async with connect(server) as client:
        first = await call_stock(client, "doc_dict", args)
        tag = assert_full(first).etag
        assert tag is not None
        result = await call_conditional(client, "doc_dict", args, _malformed_variants(tag)[variant])
    assert wire(result) == wire(first)


@pytest.mark.parametrize("block", ['W/"x"', ["x"], 5, None], ids=repr)
async def test_a_request_block_that_is_not_an_object_is_ignored(server: FastMCP | MCPServer, block: Any) -> None:
    args = {"key": "odd-block"}
    async with connect(server) as client:
        first = await call_stock(client, "doc_dict", args)
        result = await call_raw(client, "doc_dict", args, {META_KEY: block})
    assert wire(result) == wire(first)


# --- answers without a canonical form --------------------------------------------------------------


async def test_sdk_a_nan_answer_is_sent_without_a_tag_and_the_reason_logged(caplog: pytest.LogCaptureFixture) -> None:
    """MCPServer hands the extension a float NaN as is: no canonical form, so no tag, and a log line."""
    args = {"key": "nan"}
    with caplog.at_level(logging.WARNING, logger=SERVER_LOGGER):
        async with connect(build("sdk")) as client:
            first = await call_raw(client, "nan_answer", args)
            conditional = await call_conditional(client, "nan_answer", args, content_tag([], {"x": None, "y": 1.5}))
    assert raw_block(first) == {"ttlMs": 0, "cacheScope": "private"}
    assert not first.is_error
    assert first.structured_content == {"x": None, "y": 1.5}  # NaN went out as null: never lost
    assert wire(conditional) == wire(first)
    reasons = [r for r in caplog.records if r.name == SERVER_LOGGER and "nan_answer" in r.getMessage()]
    assert len(reasons) == 2
    assert all("no canonical form" in r.getMessage() for r in reasons)


async def test_sdk_whatever_reaches_the_extension_a_tag_matches_what_was_sent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What MCPServer hands the extension depends on the return annotation: a NaN under `Any` is already
    null, a NaN typed `float` is still NaN. Either way the answer arrives, and it carries a tag only when
    the tag is the one of what was sent."""
    policies = ToolPolicies({name: CachePolicy() for name in ("as_any", "as_float", "as_scalar")})
    server = MCPServer("nan", extensions=[RevalidationExtension(policies)])

    def as_any() -> dict[str, Any]:
        return {"x": math.nan}

    def as_float() -> dict[str, float]:
        return {"x": math.nan}

    def as_scalar() -> float:
        return math.inf

    for fn in (as_any, as_float, as_scalar):
        server.add_tool(fn)
    tagged = {}
    with caplog.at_level(logging.WARNING, logger=SERVER_LOGGER):
        async with connect(server) as client:
            for name in ("as_any", "as_float", "as_scalar"):
                result = await call_raw(client, name, {})
                assert not result.is_error
                assert result.structured_content is not None
                assert None in result.structured_content.values()
                block = block_of(result)
                assert block is not None
                tagged[name] = block.etag
                if block.etag is not None:
                    assert block.etag == tag_of(result)
    logged = {name for name in tagged if any(name in r.getMessage() for r in caplog.records)}
    assert logged == {name for name, etag in tagged.items() if etag is None}
    assert tagged["as_any"] is not None
    assert tagged["as_float"] is None
    assert tagged["as_scalar"] is None


async def test_fastmcp_never_tags_a_nan_answer(caplog: pytest.LogCaptureFixture) -> None:
    """FastMCP handles a tool's NaN before the middleware sees it. 4.1 serialises it to null when it builds
    the ToolResult, so the middleware tags the null answer, which is exactly what the client receives;
    4.2 refuses it as an error, which is never stamped. Either way no tag ever stands for a NaN."""
    args = {"key": "nan"}
    with caplog.at_level(logging.WARNING, logger=SERVER_LOGGER):
        async with connect(build("fastmcp")) as client:
            first = await call_raw(client, "nan_answer", args)
            if first.is_error:
                assert block_of(first) is None
                return
            tag = assert_full(first).etag
            conditional = await call_conditional(client, "nan_answer", args, tag)
    assert first.structured_content == {"x": None, "y": 1.5}
    assert tag == tag_of(first)
    assert block_of(conditional) is not None
    assert block_of(conditional).not_modified  # type: ignore[union-attr]
    assert not [r for r in caplog.records if r.name == SERVER_LOGGER]


async def test_fastmcp_a_nan_from_an_inner_middleware_is_sent_without_a_tag(caplog: pytest.LogCaptureFixture) -> None:
    """The one way a NaN reaches the FastMCP middleware: another middleware inside it put one there."""

    class PutNaNIn(Middleware):
        async def on_call_tool(self, context: Any, call_next: Any) -> Any:
            result = await call_next(context)
            result.structured_content["x"] = math.nan
            return result

    server = build("fastmcp")
    server.add_middleware(PutNaNIn())  # appended: inside mcpcache's middleware, which install() put first
    args = {"key": "nan-inner"}
    with caplog.at_level(logging.WARNING, logger=SERVER_LOGGER):
        async with connect(server) as client:
            first = await call_raw(client, "doc_dict", args)
    # mcpcache sends it on untagged; FastMCP 4.1 then writes the NaN as null, 4.2 refuses it as an error.
    block = raw_block(first)
    if first.is_error:
        assert block is None or "etag" not in block
    else:
        assert block is not None
        assert "etag" not in block
        assert first.structured_content is not None
        assert first.structured_content["x"] is None
    assert any("no canonical form" in r.getMessage() for r in caplog.records if r.name == SERVER_LOGGER)


# --- validators ------------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["doc_versioned", "doc_async_validator"])
async def test_a_validator_match_answers_without_running_the_body(
    server: FastMCP | MCPServer, store: DocStore, tool: str
) -> None:
    key = f"v-{tool}"
    args = {"key": key}
    policy = policy_of(tool)
    async with connect(server) as client:
        first = await call_stock(client, tool, args)
        tag = assert_full(first).etag
        assert tag == validator_tag(tool, args, 0)
        assert store.runs_of(tool, key) == 1

        for _ in range(3):
            reply = await call_conditional(client, tool, args, tag)
            assert_not_modified(reply, etag=tag, kind="doc", ttl_ms=policy.ttl_ms, scope="private")
        assert store.runs_of(tool, key) == 1

        store.write(key, "second edition")
        changed = await call_conditional(client, tool, args, tag)
        assert assert_full(changed).etag == validator_tag(tool, args, 1)
        assert changed.structured_content == {"kind": "doc", "key": key, "text": "second edition", "version": 1}
        assert store.runs_of(tool, key) == 2


async def test_fastmcp_a_validator_match_skips_the_body_even_in_a_fresh_process(store: DocStore) -> None:
    """Validator tags name (tool, arguments, version), so a tag from another process still matches; FastMCP
    reads the output schema to shape the reply, so even the first call can skip the body."""
    args = {"key": "fresh"}
    async with connect(build("fastmcp", store)) as client:
        reply = await call_conditional(client, "doc_versioned", args, validator_tag("doc_versioned", args, 0))
    assert block_of(reply) == CacheBlock(ttl_ms=5000, etag=validator_tag("doc_versioned", args, 0), not_modified=True)
    assert store.runs_of("doc_versioned", "fresh") == 0


async def test_the_stamped_tag_is_the_one_computed_before_the_body(
    server: FastMCP | MCPServer, store: DocStore
) -> None:
    """`doc_racy`'s body reads version N and then moves the source to N+1 before it returns.

    The tag on its answer must name version N, what the answer holds. Had it been computed after the body,
    it would name N+1, and the next conditional call would be told "not modified" about N+1 content the
    client never received.
    """
    key = "racy"
    args = {"key": key}
    async with connect(server) as client:
        first = await call_stock(client, "doc_racy", args)
        assert first.structured_content is not None
        assert first.structured_content["version"] == 0
        assert store.version(key) == 1
        assert assert_full(first).etag == validator_tag("doc_racy", args, 0)
        assert assert_full(first).etag != validator_tag("doc_racy", args, 1)

        second = await call_conditional(client, "doc_racy", args, validator_tag("doc_racy", args, 0))
        assert assert_full(second).etag == validator_tag("doc_racy", args, 1)
        assert second.structured_content is not None
        assert second.structured_content["version"] == 1
        assert second.structured_content["text"] == f"{key}: edition 1"
    assert store.runs_of("doc_racy", key) == 2


async def test_a_failing_validator_falls_back_to_hashing_the_answer(
    server: FastMCP | MCPServer, store: DocStore, caplog: pytest.LogCaptureFixture
) -> None:
    args = {"key": "broken"}
    with caplog.at_level(logging.WARNING, logger=SERVER_LOGGER):
        async with connect(server) as client:
            first = await call_stock(client, "doc_validator_fails", args)
            tag = assert_full(first).etag
            reply = await call_conditional(client, "doc_validator_fails", args, tag)
    assert tag == await served_tag(server, "doc_validator_fails", first)
    assert_not_modified(reply, etag=tag, kind="doc", ttl_ms=0, scope="private")  # type: ignore[arg-type]
    assert store.runs_of("doc_validator_fails", "broken") == 2  # hashing saves bandwidth, not work
    failures = [r for r in caplog.records if r.name == SERVER_LOGGER and "validator failed" in r.getMessage()]
    assert len(failures) == 2
    assert all(r.exc_info is not None for r in failures)


@pytest.mark.parametrize("attached", [True, False])
async def test_sdk_a_validator_match_in_a_fresh_process_runs_the_body_once(store: DocStore, attached: bool) -> None:
    """The SDK extension sees a tool's output schema only through the server it was attached to. Without
    it, until the tool has answered once in this process it cannot tell whether the reply needs
    structuredContent: it runs the body, then answers not-modified (the validator tag still matches).
    From then on the body is skipped. Attached, the schema says so, and the body never runs (so no
    answer has told it the tool's own kind: the reply names the tool, as FastMCP's does)."""
    args = {"key": "fresh"}
    tag = validator_tag("doc_versioned", args, 0)
    async with connect(build("sdk", store, stubs_checked=attached)) as client:
        first = await call_conditional(client, "doc_versioned", args, tag)
        second = await call_conditional(client, "doc_versioned", args, tag)
    for reply in (first, second):
        kind = "doc_versioned" if attached else "doc"
        assert_not_modified(reply, etag=tag, kind=kind, ttl_ms=5000, scope="private")
    assert store.runs_of("doc_versioned", "fresh") == (0 if attached else 1)


class Stub(BaseModel):
    """An output model whose `kind` is a constant: a reply naming another kind fails stock validation."""

    kind: Literal["own.kind"] = "own.kind"
    key: str | None = None


async def test_a_body_skipped_reply_names_the_answers_own_kind(kind: ServerKind) -> None:
    """The K rule holds when the body did not run: the reply names the kind the tool's answers carry,
    not the declared kind or the tool name, so a stock client validating `kind: const` accepts it."""
    policies = ToolPolicies({"read": CachePolicy(validator=lambda args: 0, kind="declared")})

    def read(key: str) -> Stub:
        return Stub(key=key)

    server: FastMCP | MCPServer
    if kind == "fastmcp":
        server = FastMCP("k")
        server.tool(read)
        install(server, policies)
    else:
        server = MCPServer("k", extensions=[RevalidationExtension(policies)])
        server.add_tool(read)
    args = {"key": "a"}
    tag = validator_tag("read", args, 0)
    async with connect(server) as client:
        await call_stock(client, "read", args)
        # The stock call_tool validates the reply against the schema: kind must be "own.kind".
        reply = await call_stock(client, "read", args, meta=conditional_request_meta(tag))
    assert_not_modified(reply, etag=tag, kind="own.kind", ttl_ms=0, scope="private")


# --- FastMCP's ResponseCachingMiddleware -----------------------------------------------------------


def _memo_server(store: DocStore, *, memo_outside: bool = False) -> FastMCP:
    server = FastMCP("memo")

    @server.tool
    def memo_doc(key: str) -> dict[str, Any]:
        store.ran("memo_doc", key)
        return {"kind": "doc", "key": key, "text": store.text(key)}

    policies = ToolPolicies({"memo_doc": CachePolicy(ttl_ms=1000)})
    if memo_outside:
        server.middleware.insert(0, RevalidationMiddleware(policies))
        server.middleware.insert(0, ResponseCachingMiddleware())
    else:
        server.add_middleware(ResponseCachingMiddleware())
        install(server, policies)
    return server


async def test_response_caching_middleware_inside_mcpcache_keeps_both_savings(store: DocStore) -> None:
    """The order that works: mcpcache's middleware OUTSIDE (before) FastMCP's ResponseCachingMiddleware.

    `install()` inserts mcpcache's middleware first in `server.middleware`, so whether the memo was added
    before install() (as here, or through `FastMCP(middleware=[...])`) or after it (`add_middleware`
    appends), the memo sits inside. Then a memo hit skips the body and mcpcache still compares the memo's
    answer with the client's tag, so a conditional call gets not-modified without running the body.
    """
    server = _memo_server(store)
    assert isinstance(server.middleware[0], RevalidationMiddleware)
    args = {"key": "memo"}
    async with connect(server) as client:
        first = await call_stock(client, "memo_doc", args)
        tag = assert_full(first).etag
        assert tag is not None
        hit = await call_stock(client, "memo_doc", args)
        assert wire(hit) == wire(first)
        reply = await call_conditional(client, "memo_doc", args, tag)
        assert_not_modified(reply, etag=tag, kind="doc", ttl_ms=1000, scope="private")
        # A stock client after the not-modified reply still gets the full answer: the memo holds the body's.
        after = await call_stock(client, "memo_doc", args)
        assert wire(after) == wire(first)
    assert store.runs_of("memo_doc", "memo") == 1


async def test_a_validator_is_not_trusted_for_a_tool_a_memo_answers(store: DocStore) -> None:
    """A memo inside mcpcache may answer from an older version than the validator names. Stamping the
    validator's newer tag on the memo's older answer would later confirm content the client never got,
    so for tools the memo covers the tag comes from what was actually answered."""
    server = FastMCP("memo-validator")

    @server.tool
    def memo_doc(key: str) -> dict[str, Any]:
        store.ran("memo_doc", key)
        return {"kind": "doc", "key": key, "text": store.text(key)}

    server.add_middleware(ResponseCachingMiddleware())
    install(server, {"memo_doc": CachePolicy(ttl_ms=1000, validator=lambda a: store.version(a["key"]))})
    args = {"key": "memo-v"}
    async with connect(server) as client:
        first = await call_raw(client, "memo_doc", args)
        store.write("memo-v", "second edition")  # the memo still holds the first edition
        second = await call_raw(client, "memo_doc", args)
    for answer in (first, second):
        sent_tag = tag_of(answer)
        assert block_of(answer).etag == sent_tag  # type: ignore[union-attr]
    assert second.structured_content == first.structured_content


async def test_a_memo_outside_mcpcache_never_receives_a_not_modified_stub(store: DocStore) -> None:
    """With the memo OUTSIDE mcpcache, a not-modified reply would be memoised and served to the next stock
    client as an empty answer. The middleware sees the memo above it and answers in full instead."""
    server = _memo_server(store, memo_outside=True)
    args = {"key": "memo"}
    async with connect(server) as client:
        first = await call_raw(client, "memo_doc", args)
        tag = block_of(first).etag  # type: ignore[union-attr]
        reply = await call_conditional(client, "memo_doc", args, tag)
        stock = await call_raw(client, "memo_doc", args)
    assert block_of(reply) is not None
    assert not block_of(reply).not_modified  # type: ignore[union-attr]
    assert reply.structured_content == first.structured_content
    assert stock.content == first.content  # never the empty stub


# --- capability ------------------------------------------------------------------------------------


@pytest.mark.parametrize("client_kind", ["mcp", "fastmcp"])
async def test_the_extension_is_advertised_on_2026_07_28(server: FastMCP | MCPServer, client_kind: ClientKind) -> None:
    async with connect(server, MODERN, client_kind) as client:
        capabilities = client.server_capabilities
        assert capabilities is not None
        assert capabilities.extensions is not None
        # Deltas are on by default, so the formats the server sends are advertised with the rest.
        assert capabilities.extensions[EXTENSION_ID] == extension_settings(delta_formats=list(FORMATS))


async def test_a_configured_meta_key_is_used_and_advertised(kind: ServerKind) -> None:
    key = "io.example/cache"
    policies = ToolPolicies({"read": CachePolicy(ttl_ms=7)})

    def read(key: str) -> dict[str, Any]:
        return {"kind": "doc", "key": key}

    server: FastMCP | MCPServer
    if kind == "fastmcp":
        server = FastMCP("k")
        server.tool(read)
        install(server, policies, meta_key=key)
    else:
        server = MCPServer("k", extensions=[RevalidationExtension(policies, meta_key=key)])
        server.add_tool(read)
    async with connect(server) as client:
        assert client.server_capabilities.extensions[EXTENSION_ID]["metaKey"] == key  # type: ignore[index]
        first = await call_stock(client, "read", {"key": "a"})
        assert META_KEY not in (first.meta or {})
        tag = first.meta[key]["etag"]  # type: ignore[index]
        reply = await call_raw(client, "read", {"key": "a"}, {key: {"etag": tag}})
        ignored = await call_raw(client, "read", {"key": "a"}, {META_KEY: {"etag": tag}})
    assert reply.meta[key] == {"ttlMs": 7, "cacheScope": "private", "etag": tag, "notModified": True}  # type: ignore[index]
    assert wire(ignored) == wire(first)


# --- declarations ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"ttl_ms": -1}, ValueError),
        ({"ttl_ms": 24 * 3600 * 1000 + 1}, ValueError),
        ({"ttl_ms": 1.5}, TypeError),
        ({"ttl_ms": True}, TypeError),
        ({"scope": "session"}, ValueError),
        ({"kind": 3}, TypeError),
        ({"validator": "not callable"}, TypeError),
        ({"validator": lambda args: 1, "etag": False}, ValueError),
    ],
    ids=lambda value: re.sub(r" at 0x[0-9a-f]+", "", repr(value)),  # the same ids in every xdist worker
)
def test_a_bad_declaration_fails_at_declaration_time(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        CachePolicy(**kwargs)


def test_policies_registry() -> None:
    policies = ToolPolicies({"a": CachePolicy()})

    @policies.cacheable(ttl_ms=5, name="renamed")
    def b() -> None: ...

    assert set(policies) == {"a", "renamed"}
    assert len(policies) == 2
    assert "renamed" in policies
    assert policies.get("renamed") == CachePolicy(ttl_ms=5)
    assert policies.get("b") is None
    with pytest.raises(TypeError):
        policies.declare("c", {"ttl_ms": 5})  # type: ignore[arg-type]


# --- FastMCP proxies -------------------------------------------------------------------------------


async def test_fastmcp_a_proxied_non_object_answer_is_stamped_not_broken() -> None:
    """A FastMCP proxy hands the middleware a `RawStructuredToolResult` (structuredContent that is not an
    object, as the backend sent it). Stamping edits it with model_copy, as FastMCP asks of middleware; a
    rebuilt `ToolResult` would refuse the list and the call would fail with an internal error."""
    from fastmcp.server import create_proxy

    backend = MCPServer("backend")

    @backend.tool()
    def numbers() -> mt.CallToolResult:
        return mt.CallToolResult(content=[mt.TextContent(type="text", text="[1,2]")], structured_content=[1, 2])

    proxy = create_proxy(backend)
    install(proxy, {"numbers": CachePolicy(ttl_ms=5)})
    async with connect(proxy) as client:
        first = await call_raw(client, "numbers", {})
        tag = assert_full(first).etag
        assert first.structured_content == [1, 2]
        assert tag == tag_of(first)
        reply = await call_conditional(client, "numbers", {}, tag)
    assert_not_modified(reply, etag=tag, kind="numbers", ttl_ms=5, scope="private")  # type: ignore[arg-type]
