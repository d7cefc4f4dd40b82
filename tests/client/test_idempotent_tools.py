"""Idempotent tools (docs/client.md, "Idempotent tools"): a call whose exchange is lost after it was sent is
sent once more when a trusted server annotated its tool read-only or idempotent, and never otherwise.

A real FastMCP server over streamable HTTP, whose tools count their runs, behind a TCP relay on 127.0.0.1
(tests/support/relay.py) that loses one exchange after the server read the request: the connection closes
before any answer (`drop_after_read`), or once the answer's head is through (`cut_mid_answer`). Through a
`ToolCache` wrapping the MCP SDK's `Client` and FastMCP's `Client`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import fastmcp
import mcp
import mcp_types as mt
import pytest
from fastmcp import FastMCP
from fastmcp.client.transports import StreamableHttpTransport
from gateway.conftest import served_in_thread
from mcp.shared.exceptions import MCPError
from support.relay import Loss, Relay

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.client.resend import KeepFailure, SendAgain, decide_resend
from mcpcache.stores import MemoryStore

pytestmark = pytest.mark.anyio

KINDS = ["mcp", "fastmcp"]
LOSSES: list[Loss] = ["drop_after_read", "cut_mid_answer", "reset_after_read", "reset_unread"]
LOST_HOW: dict[Loss, str] = {
    # Before any answer, or with the answer's head in and its body cut off (a JSON answer, with its length).
    "drop_after_read": "without sending a response",
    "cut_mid_answer": "without sending complete message body",
    "reset_after_read": "Connection reset by peer",
    "reset_unread": "Connection reset by peer",
}


def ran_when_lost(loss: Loss) -> int:
    """Runs of the lost call: the relay passed it on to the server, except when it reset it unread."""
    return 0 if loss == "reset_unread" else 1


def build_runs_server() -> FastMCP[Any]:
    """Tools that count their runs: `put` (idempotent write), `append` (a write that is not), `look` (read-only),
    and `runs`, which reports the counts. `put` with `together=2` waits (bounded) until two calls of it with
    those arguments are running at once."""
    server: FastMCP[Any] = FastMCP("runs")
    counts: dict[str, int] = {}
    arrived: dict[str, int] = {}
    both_in: dict[str, anyio.Event] = {}

    def run(tool: str) -> int:
        counts[tool] = counts.get(tool, 0) + 1
        return counts[tool]

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=False, idempotent_hint=True))
    async def put(key: str, value: str, together: int = 1) -> dict[str, Any]:
        """Set key to value (again: no further effect)."""
        if together > 1:
            arrived[key] = arrived.get(key, 0) + 1
            event = both_in.setdefault(key, anyio.Event())
            if arrived[key] >= together:
                event.set()
            with anyio.move_on_after(10):  # generous: shared calls never arrive together, and must not hang
                await event.wait()
        return {"key": key, "value": value, "run": run("put")}

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=False, idempotent_hint=False))
    def append(key: str, value: str) -> dict[str, Any]:
        """Append value to key (again: appended twice)."""
        return {"key": key, "value": value, "run": run("append")}

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=True))
    def look(key: str) -> dict[str, Any]:
        """Read key."""
        return {"key": key, "run": run("look")}

    @server.tool
    def runs() -> dict[str, int]:
        """How many times each tool ran."""
        return dict(counts)

    return server


@pytest.fixture
def runs_server() -> Iterator[str]:
    with served_in_thread(build_runs_server()) as url:
        yield url


@pytest.fixture
async def relay(runs_server: str) -> AsyncIterator[tuple[Relay, str]]:
    port = int(runs_server.rsplit(":", 1)[1].split("/", 1)[0])
    relay = Relay("127.0.0.1", port)
    async with relay.running() as base:
        yield relay, f"{base}/mcp"


def client_of(kind: str, url: str) -> Any:
    return mcp.Client(url) if kind == "mcp" else fastmcp.Client(StreamableHttpTransport(url))


async def call(view: Any, kind: str, tool: str, arguments: dict[str, Any]) -> Any:
    return await (view.call(tool, arguments) if kind == "mcp" else view.call_mcp(tool, arguments))


async def runs_of(url: str) -> dict[str, int]:
    """The server's counts, asked on a connection of its own (not through the relay)."""
    async with mcp.Client(url) as client:
        result = await client.call_tool("runs", {})
    counts: dict[str, int] = result.structured_content or {}
    return counts


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_lost_call_of_an_idempotent_tool_is_sent_once_more_and_answered(
    kind: str, loss: Loss, relay: tuple[Relay, str], runs_server: str
) -> None:
    lossy, url = relay
    cache = ToolCache(MemoryStore(), CacheSettings(trusted=True))
    async with client_of(kind, url) as client:
        view = cache.wrap(client, server_id=f"idempotent-{kind}")
        await call(view, kind, "look", {"key": "k"})  # the connection is in use, the annotations read
        lossy.lose_next(loss)
        answered = await call(view, kind, "put", {"key": "k", "value": "v"})
        after = await call(view, kind, "look", {"key": "k"})  # the session goes on
    assert lossy.lost == [loss]
    assert not answered.result.is_error
    assert answered.result.structured_content == {"key": "k", "value": "v", "run": 1 + ran_when_lost(loss)}
    assert "lost after it was sent; sent once more (the tool is annotated idempotent)" in answered.outcome.reason
    assert not after.result.is_error
    assert cache.stats.resent == 1
    # Run twice at most, as the annotation allows: the lost run (if the server read it), and the one that answered.
    assert await runs_of(runs_server) == {"look": 2, "put": 1 + ran_when_lost(loss)}


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_lost_call_of_a_tool_that_is_not_idempotent_fails_and_ran_once(
    kind: str, loss: Loss, relay: tuple[Relay, str], runs_server: str
) -> None:
    lossy, url = relay
    cache = ToolCache(MemoryStore(), CacheSettings(trusted=True))
    async with client_of(kind, url) as client:
        view = cache.wrap(client, server_id=f"not-idempotent-{kind}")
        await call(view, kind, "look", {"key": "k"})
        lossy.lose_next(loss)
        with pytest.raises(MCPError) as failed:
            await call(view, kind, "append", {"key": "k", "value": "v"})
        after = await call(view, kind, "look", {"key": "k"})
    assert failed.value.code == mt.CONNECTION_CLOSED
    assert LOST_HOW[loss] in str(failed.value)
    assert lossy.lost == [loss]
    assert not after.result.is_error
    assert cache.stats.resent == 0
    # Its body ran once if the server read it, never twice.
    expected = {"look": 2, "append": 1} if ran_when_lost(loss) else {"look": 2}
    assert await runs_of(runs_server) == expected


@pytest.mark.parametrize("kind", KINDS)
async def test_a_lost_call_of_a_read_only_tool_is_sent_once_more(
    kind: str, relay: tuple[Relay, str], runs_server: str
) -> None:
    lossy, url = relay
    cache = ToolCache(MemoryStore(), CacheSettings(trusted=True))
    async with client_of(kind, url) as client:
        view = cache.wrap(client, server_id=f"read-only-{kind}")
        await call(view, kind, "put", {"key": "k", "value": "v"})  # reads the annotations
        lossy.lose_next("drop_after_read")
        answered = await call(view, kind, "look", {"key": "k"})
    assert answered.result.structured_content == {"key": "k", "run": 2}
    assert "sent once more (the tool is annotated read-only)" in answered.outcome.reason
    assert await runs_of(runs_server) == {"put": 1, "look": 2}


@pytest.mark.parametrize("kind", KINDS)
async def test_annotations_of_a_server_not_trusted_never_send_a_call_twice(
    kind: str, relay: tuple[Relay, str], runs_server: str
) -> None:
    lossy, url = relay
    cache = ToolCache(MemoryStore())  # trusted=False, the default
    async with client_of(kind, url) as client:
        view = cache.wrap(client, server_id=f"untrusted-{kind}")
        await call(view, kind, "look", {"key": "k"})
        lossy.lose_next("drop_after_read")
        with pytest.raises(MCPError) as failed:
            await call(view, kind, "put", {"key": "k", "value": "v"})
    assert failed.value.code == mt.CONNECTION_CLOSED
    assert cache.stats.resent == 0
    assert await runs_of(runs_server) == {"look": 1, "put": 1}


@pytest.mark.parametrize("kind", KINDS)
async def test_concurrent_identical_calls_of_an_idempotent_tool_each_send_their_own(
    kind: str, runs_server: str
) -> None:
    """Idempotence is about the effect, not the answer: two identical writes at once are two requests, each
    answered by its own run (the server holds each until both are running)."""
    cache = ToolCache(MemoryStore(), CacheSettings(trusted=True))
    answers: list[Any] = []
    async with client_of(kind, runs_server) as client:
        view = cache.wrap(client, server_id=f"concurrent-{kind}")
        await call(view, kind, "look", {"key": "k"})

        async def put() -> None:
            answers.append(await call(view, kind, "put", {"key": "k", "value": "v", "together": 2}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(put)
            tg.start_soon(put)
    assert sorted(answer.result.structured_content["run"] for answer in answers) == [1, 2]
    assert not any(answer.outcome.coalesced for answer in answers)
    assert cache.stats.coalesced == 0
    assert await runs_of(runs_server) == {"look": 1, "put": 2}


def test_the_resend_decision() -> None:
    def decide(**overrides: Any) -> SendAgain | KeepFailure:
        facts: dict[str, Any] = {
            "lost": True,
            "trusted": True,
            "read_only": None,
            "idempotent": True,
            "remaining_s": 1.0,
        }
        return decide_resend(**{**facts, **overrides})

    assert isinstance(decide(), SendAgain)
    assert isinstance(decide(read_only=True, idempotent=None), SendAgain)
    assert isinstance(decide(remaining_s=None), SendAgain)
    assert decide(lost=False) == KeepFailure("not a lost exchange")
    assert "not trusted" in decide(trusted=False).reason
    for idempotent in (None, False):
        refused = decide(idempotent=idempotent)
        assert isinstance(refused, KeepFailure)
        assert "must not run twice" in refused.reason
    assert isinstance(decide(read_only=False, idempotent=False), KeepFailure)
    assert "timeout" in decide(remaining_s=0.0).reason
