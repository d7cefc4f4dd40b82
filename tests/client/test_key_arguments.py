"""Keys that ignore volatile arguments (docs/protocol.md section 8, docs/client.md "Key arguments").

A real FastMCP server (tests/fixture_servers/keyed.py) declares, in `tools/list`, which arguments name each
tool's answer; real clients (mcp.Client, mcp.ClientSession, fastmcp.Client) call it through `ToolCache` on
each of the three stores, over memory streams and over streamable HTTP on 127.0.0.1. What is counted:
`tools/call` messages on the wire and the server's body runs.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import anyio
import pytest
from fixture_servers import keyed
from fixture_servers.keyed import KeyedState, build_keyed
from mcp.server.mcpserver import MCPServer
from stores.backends import Backend, clock_of
from support.transports import LEGACY, MODERN, ServerTarget, http_servers

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.client.keys import CallIdentity
from mcpcache.key_arguments import KeyArguments, MalformedKeyArguments, key_arguments_of
from mcpcache.server import CachePolicy, DeclarationError, RevalidationExtension, ToolPolicies, cache_meta
from mcpcache.server.policies import policy_from_block
from mcpcache.stores import MemoryStore, Store

from .harness import VIEW_KINDS, Conn, ViewKind, connect, plain

pytestmark = pytest.mark.anyio

KEYED_SCRIPT = keyed.__file__


# The projection and the declaration ----------------------------------------------------------------


def test_the_projection_keeps_null_apart_from_absent() -> None:
    ignore = KeyArguments.drop(["request_id"])
    assert ignore.project({"path": "a", "request_id": "r1"}) == {"path": "a"}
    assert ignore.project({"path": None}) == {"path": None}
    keep = KeyArguments.keep(["path"])
    assert keep.project({"path": "a", "request_id": "r1", "n": 3}) == {"path": "a"}
    assert keep.project({"path": None}) != keep.project({})  # null is an answer-naming value, absent is not
    assert KeyArguments.keep([]).project({"a": 1}) == {}  # no argument names the answer
    assert KeyArguments.drop([]).trivial


@pytest.mark.parametrize(
    "block",
    [
        {"keyArguments": "path"},
        {"keyArguments": {"path": True}},
        {"keyArguments": ["path", 3]},
        {"keyArguments": [""]},
        {"ignoreArguments": None},
        {"keyArguments": ["path"], "ignoreArguments": ["request_id"]},
        {"ignoreArguments": ["x"] * 1000},
    ],
)
def test_a_malformed_declaration_is_named_never_guessed(block: dict[str, Any]) -> None:
    assert isinstance(key_arguments_of(block), MalformedKeyArguments)
    with pytest.raises(DeclarationError):
        policy_from_block({"ttlMs": 1000, **block})


def test_the_declaration_round_trips() -> None:
    meta = cache_meta(ttl_ms=5000, key_arguments=["path", "cell"])
    block = meta["io.modelcontextprotocol/cache"]
    assert block == {"ttlMs": 5000, "cacheScope": "private", "keyArguments": ["cell", "path"]}
    assert policy_from_block(block).key_rule == KeyArguments.keep(["path", "cell"])
    assert key_arguments_of(block) == KeyArguments.keep(["cell", "path"])
    assert key_arguments_of({"ttlMs": 5}) is None
    assert key_arguments_of("not a block") is None
    with pytest.raises(ValueError, match="not both"):
        CachePolicy(key_arguments=("a",), ignore_arguments=("b",))
    with pytest.raises(TypeError):
        CachePolicy(ignore_arguments="request_id")  # type: ignore[arg-type]


def test_keys_of_a_projection_never_meet_keys_on_every_argument() -> None:
    rule = KeyArguments.keep(["path"])
    full = CallIdentity("s", "p", "e", "t", {"path": "a"})
    projected = CallIdentity("s", "p", "e", "t", rule.project({"path": "a", "r": 1}), "", rule.label())
    assert full.key("private") != projected.key("private")
    # One call mark for both: an invalidation of the call reaches every copy.
    assert full.call_mark_key() == projected.call_mark_key()


def test_the_override_is_checked_when_the_cache_is_made() -> None:
    store = MemoryStore()
    with pytest.raises(ValueError, match="not both"):
        ToolCache(store, CacheSettings(key_arguments={"t": ["a"]}, ignore_arguments={"t": ["b"]}))
    with pytest.raises(TypeError):
        ToolCache(store, CacheSettings(key_arguments={"t": "path"}))  # type: ignore[dict-item]


# Through real clients -------------------------------------------------------------------------------


async def runs(conn: Conn, tool: str, path: str) -> int:
    result = await conn.direct("body_runs", {"tool": tool, "path": path})
    return int(result.structured_content["result"]) if result.structured_content else -1  # type: ignore[index]


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_trusted_cache_shares_an_answer_across_a_volatile_argument(
    view_kind: ViewKind, backend: Backend, opened: Store
) -> None:
    cache = ToolCache(opened, CacheSettings(trusted=True), clock=clock_of(backend))
    async with connect(view_kind, ServerTarget.memory(build_keyed()), MODERN, cache) as conn:
        first = await conn.call("read_doc", {"path": "a.txt", "request_id": "r1"})
        assert (first.outcome.status, first.outcome.stored) == ("miss", True)
        mark = conn.mark()
        again = await conn.call("read_doc", {"path": "a.txt", "request_id": "r2"})
        assert again.outcome.status == "fresh_hit"
        assert plain(again.result) == plain(first.result)
        absent = await conn.call("read_doc", {"path": "a.txt"})  # an ignored argument left out: the same answer
        assert absent.outcome.status == "fresh_hit"
        assert conn.tool_calls(mark) == 0
        other = await conn.call("read_doc", {"path": "b.txt", "request_id": "r1"})  # a key argument differs
        assert other.outcome.status == "miss"
        assert await runs(conn, "read_doc", "a.txt") == 1

        # keyArguments: only `path` names the answer, whatever else the call carries.
        await conn.call("read_kept", {"path": "a.txt", "request_id": "r1"})
        kept = await conn.call("read_kept", {"path": "a.txt", "request_id": "r2", "trace": True})
        assert kept.outcome.status == "revalidated"  # ttl 0: the stored copy, confirmed by the server

        # Every argument names the answer of a tool that declares none.
        await conn.call("read_plain", {"path": "a.txt", "request_id": "r1"})
        assert (await conn.call("read_plain", {"path": "a.txt", "request_id": "r2"})).outcome.status == "miss"


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_an_untrusted_cache_keys_on_every_argument_unless_told_per_tool(
    view_kind: ViewKind, backend: Backend, opened: Store
) -> None:
    clock = clock_of(backend)
    untrusted = ToolCache(opened, clock=clock)
    async with connect(view_kind, ServerTarget.memory(build_keyed()), MODERN, untrusted) as conn:
        await conn.call("read_doc", {"path": "a.txt", "request_id": "r1"})
        mark = conn.mark()
        assert (await conn.call("read_doc", {"path": "a.txt", "request_id": "r2"})).outcome.status == "miss"
        assert conn.tool_calls(mark) == 1

    # The client's own override, for a server it does not control: it wins over the server's declaration
    # (here it keys `read_plain`, which declares nothing, and `read_doc` on nothing but `path` too).
    overridden = ToolCache(opened, CacheSettings(key_arguments={"read_plain": ["path"]}), partition="mine", clock=clock)
    async with connect(view_kind, ServerTarget.memory(build_keyed()), MODERN, overridden) as conn:
        await conn.call("read_plain", {"path": "a.txt", "request_id": "r1"})
        mark = conn.mark()
        assert (await conn.call("read_plain", {"path": "a.txt", "request_id": "r2"})).outcome.status == "fresh_hit"
        assert conn.tool_calls(mark) == 0
        assert (await conn.call("read_plain", {"path": "b.txt", "request_id": "r2"})).outcome.status == "miss"

    ignoring = ToolCache(
        opened, CacheSettings(ignore_arguments={"read_plain": ["request_id"]}), partition="other", clock=clock
    )
    async with connect(view_kind, ServerTarget.memory(build_keyed()), MODERN, ignoring) as conn:
        await conn.call("read_plain", {"path": "a.txt", "request_id": "r1"})
        assert (await conn.call("read_plain", {"path": "a.txt", "request_id": "r9"})).outcome.status == "fresh_hit"


async def test_the_override_wins_over_the_trusted_declaration() -> None:
    cache = ToolCache(MemoryStore(), CacheSettings(trusted=True, key_arguments={"read_doc": ["path", "request_id"]}))
    async with connect("mcp", ServerTarget.memory(build_keyed()), MODERN, cache) as conn:
        await conn.call("read_doc", {"path": "a.txt", "request_id": "r1"})
        assert (await conn.call("read_doc", {"path": "a.txt", "request_id": "r2"})).outcome.status == "miss"


async def test_a_malformed_declaration_keys_on_every_argument_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    cache = ToolCache(MemoryStore(), CacheSettings(trusted=True))
    with caplog.at_level(logging.WARNING, logger="mcpcache.client"):
        async with connect("fastmcp", ServerTarget.memory(build_keyed()), MODERN, cache) as conn:
            first = await conn.call("read_bad", {"path": "a.txt", "request_id": "r1"})
            second = await conn.call("read_bad", {"path": "a.txt", "request_id": "r2"})
            assert (first.outcome.status, second.outcome.status) == ("miss", "miss")
            assert plain(second.result) == plain(first.result)
            # The other tools' declarations are read all the same.
            await conn.call("read_doc", {"path": "a.txt", "request_id": "r1"})
            assert (await conn.call("read_doc", {"path": "a.txt", "request_id": "r2"})).outcome.status == "fresh_hit"
    warned = [r.getMessage() for r in caplog.records if "read_bad" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "keyed on every argument" in warned[0]


async def test_an_invalidation_by_the_full_arguments_reaches_the_projected_entry() -> None:
    cache = ToolCache(MemoryStore(), CacheSettings(trusted=True))
    async with connect("session", ServerTarget.memory(build_keyed()), MODERN, cache) as conn:
        await conn.call("read_doc", {"path": "a.txt", "request_id": "r1"})
        await conn.view.invalidate("read_doc", {"path": "a.txt", "request_id": "r7"})
        assert (await conn.call("read_doc", {"path": "a.txt", "request_id": "r2"})).outcome.status == "miss"


# Single flight --------------------------------------------------------------------------------------


async def all_at_once(conn: Conn, state: KeyedState, arguments: list[dict[str, Any]]) -> list[Any]:
    results: list[Any] = [None] * len(arguments)
    state.gate = anyio.Event()

    async def one(index: int) -> None:
        results[index] = await conn.call("gated", arguments[index])

    with anyio.fail_after(30):  # a guard against a hang, not a timing assertion
        async with anyio.create_task_group() as group:
            for index in range(len(arguments)):
                group.start_soon(one, index)
            await anyio.wait_all_tasks_blocked()
            state.gate.set()
    return results


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_calls_differing_only_in_an_ignored_argument_share_one_request(view_kind: ViewKind) -> None:
    state = KeyedState()
    cache = ToolCache(MemoryStore(), CacheSettings(trusted=True))
    async with connect(view_kind, ServerTarget.memory(build_keyed(state)), MODERN, cache) as conn:
        mark = conn.mark()
        calls = await all_at_once(conn, state, [{"path": "a.txt", "request_id": f"r{n}"} for n in range(10)])
        assert conn.tool_calls(mark) == 1
        assert state.runs[("gated", "a.txt")] == 1
        assert sum(not call.outcome.coalesced for call in calls) == 1
        assert all(plain(call.result) == plain(calls[0].result) for call in calls)


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_calls_differing_in_a_key_argument_never_share(view_kind: ViewKind) -> None:
    state = KeyedState()
    cache = ToolCache(MemoryStore(), CacheSettings(trusted=True))
    async with connect(view_kind, ServerTarget.memory(build_keyed(state)), MODERN, cache) as conn:
        mark = conn.mark()
        arguments = [{"path": f"{n % 2}.txt", "request_id": "same"} for n in range(6)]
        calls = await all_at_once(conn, state, arguments)
        assert conn.tool_calls(mark) == 2
        assert (state.runs[("gated", "0.txt")], state.runs[("gated", "1.txt")]) == (1, 1)
        for call, sent in zip(calls, arguments, strict=True):
            assert call.result.structured_content["path"] == sent["path"]


# Over streamable HTTP, the server's keys included ----------------------------------------------------


@pytest.fixture(scope="module")
def keyed_url() -> Iterator[str]:
    with http_servers([[sys.executable, str(KEYED_SCRIPT), "http"]]) as urls:
        yield urls[0]


@pytest.mark.parametrize("view_kind", ["mcp", "fastmcp"])
@pytest.mark.parametrize("era", [MODERN, LEGACY])
async def test_over_http_the_server_finds_the_delta_base_across_a_volatile_argument(
    view_kind: ViewKind, era: str, keyed_url: str, backend: Backend, opened: Store
) -> None:
    path = f"{view_kind}-{era}-{backend.name}.txt"  # one server for the module: each test its own document
    cache = ToolCache(opened, CacheSettings(trusted=True), clock=clock_of(backend))
    async with connect(view_kind, ServerTarget.http("fastmcp", keyed_url), era, cache) as conn:  # type: ignore[arg-type]
        await conn.call("read_kept", {"path": path, "request_id": "r1"})
        confirmed = await conn.call("read_kept", {"path": path, "request_id": "r2"})
        assert confirmed.outcome.status == "revalidated"
        await conn.direct("edit", {"path": path, "line": 3, "text": "changed"})
        patched = await conn.call("read_kept", {"path": path, "request_id": "r3", "trace": True})
        # The server's history is keyed on `path` alone: it holds the base the client's tag names.
        assert patched.outcome.status == "patched", patched.outcome
        assert "changed" in patched.result.structured_content["text"]
        fresh = await conn.call("read_doc", {"path": path, "request_id": "r1"})
        again = await conn.call("read_doc", {"path": path, "request_id": "r2"})
        assert (fresh.outcome.status, again.outcome.status) == ("miss", "fresh_hit")
        assert await runs(conn, "read_doc", path) == 1


# The MCP SDK's server: declared by name, its own keys (validator tags, delta history) on the projection --


def sdk_server(runs: Counter[str], validated: list[dict[str, Any]]) -> MCPServer:
    def version(arguments: Mapping[str, Any]) -> str:
        validated.append(dict(arguments))  # the validator still sees every argument
        return "v1"

    policies = ToolPolicies(
        {"read": CachePolicy(ttl_ms=0, ignore_arguments=("request_id",), validator=version, kind="doc")}
    )
    server = MCPServer("keyed-sdk", extensions=[RevalidationExtension(policies)])

    def read(path: str, request_id: str = "") -> dict[str, Any]:
        runs[path] += 1
        return {"kind": "doc", "path": path, "text": "the text of " + path}

    server.add_tool(read)
    return server


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_an_sdk_server_tags_by_the_projection(view_kind: ViewKind) -> None:
    runs: Counter[str] = Counter()
    validated: list[dict[str, Any]] = []
    # The SDK lists no declarations: the client is told per tool (the override) what the server keys by.
    cache = ToolCache(MemoryStore(), CacheSettings(ignore_arguments={"read": ["request_id"]}))
    async with connect(view_kind, ServerTarget.memory(sdk_server(runs, validated)), MODERN, cache) as conn:
        first = await conn.call("read", {"path": "a", "request_id": "r1"})
        again = await conn.call("read", {"path": "a", "request_id": "r2"})
        assert (first.outcome.status, again.outcome.status) == ("miss", "revalidated")
        # The validator's tag is the same for both calls, so the second skipped the body.
        assert runs["a"] == 1
        assert validated[-1] == {"path": "a", "request_id": "r2"}
