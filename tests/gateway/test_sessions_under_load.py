"""Sessions under load: thousands of concurrent calls through `ToolCache`, straight to a FastMCP server and
through two `mcpcache gateway` replicas sharing one redis-server; no session dies and no call fails.

Each session (alternately an MCP SDK `Client` and a FastMCP `Client` over streamable HTTP, wrapped by a
`ToolCache` on the shared Redis store) makes bursts of concurrent calls to read-only tools (ttl 0 with a
tag, a short ttl, and one undeclared), then pauses for just under the idle expiry of its httpx connection
pool. That is when uvicorn (the server under FastMCP, and under the gateway with its default) closes idle
keep-alive connections too: a request the pool sends then is reset before any answer, which with the MCP SDK
alone ends the whole session (python-sdk#3522; see mcpcache/client/transport_guard.py). Without the guard
and the gateway's longer keep-alive, about half the sessions die within the run.
"""

from __future__ import annotations

import random
import secrets
import subprocess
import sys
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import fastmcp
import httpx2
import mcp
import mcp_types as mt
import pytest
from fastmcp import FastMCP
from fastmcp.client.transports import StreamableHttpTransport

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.processes import free_port, stop_process, wait_until_listening
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.stores import RedisStore

from .conftest import served_in_thread

pytestmark = [pytest.mark.slow, pytest.mark.redis]

TOOLS = ("ttl0", "short", "plain")
"""ttl0: tagged, revalidated before every reuse; short: tagged, fresh for 50 ms; plain: never stamped."""
SESSIONS = 8
"""Per route (straight to the server, and through the gateways)."""
CYCLES = 4
"""Bursts per session, each paused to just before the pool retires idle connections: each pause meets the race."""
CALLERS = 8
"""Concurrent callers per session in a burst: each holds a pooled connection of its own."""
CALLS_PER_CALLER = 4
POOL_EXPIRY_S = httpx2.Limits().keepalive_expiry or 5.0


def build_server(stamped: bool) -> FastMCP[Any]:
    server: FastMCP[Any] = FastMCP("sessions-under-load")
    read_only = mt.ToolAnnotations(read_only_hint=True)
    for tool in TOOLS:

        def answer(name: str, _tool: str = tool) -> dict[str, Any]:
            return {"kind": _tool, "name": name, "body": "x" * 256}

        server.tool(answer, name=tool, annotations=read_only)
    if stamped:
        install(server, ToolPolicies({"ttl0": CachePolicy(ttl_ms=0), "short": CachePolicy(ttl_ms=50)}))
    return server


@dataclass
class Session:
    name: str
    calls: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    alive_at_end: bool = False


@dataclass
class Run:
    sessions: list[Session] = field(default_factory=list)
    tracebacks: dict[str, str] = field(default_factory=dict)

    def failed(self, session: Session, exc: BaseException) -> None:
        what = f"{type(exc).__name__}: {str(exc)[:100]}"
        session.failures[what] += 1
        self.tracebacks.setdefault(what, "".join(traceback.format_exception(exc)))


async def drive(run: Run, cache: ToolCache, url: str, index: int, route: str) -> None:
    kind = "mcp" if index % 2 == 0 else "fastmcp"
    session = Session(f"{route}/{index}/{kind}")
    run.sessions.append(session)
    rng = random.Random(f"{route}-{index}")
    client: Any = mcp.Client(url) if kind == "mcp" else fastmcp.Client(StreamableHttpTransport(url))

    try:
        async with client:
            view: Any = cache.wrap(client, server_id=f"load-{route}")

            async def call(tool: str, name: str) -> None:
                session.calls += 1
                try:
                    if kind == "mcp":
                        result = (await view.call(tool, {"name": name})).result
                    else:
                        result = (await view.call_mcp(tool, {"name": name})).result
                    if result.is_error:
                        raise RuntimeError(f"error result: {result.content}")
                except Exception as exc:
                    run.failed(session, exc)

            async def caller() -> None:
                for _ in range(CALLS_PER_CALLER):
                    await call(rng.choice(TOOLS), f"n{rng.randrange(24)}")

            for _ in range(CYCLES):
                async with anyio.create_task_group() as burst:
                    for _ in range(CALLERS):
                        burst.start_soon(caller)
                # Idle through the last quarter second before the pool retires the burst's connections, so
                # that their ages at the next burst cross the moment uvicorn's keep-alive timer (as long as
                # the pool's expiry, by default) closes them.
                await anyio.sleep(POOL_EXPIRY_S - rng.uniform(0.03, 0.25))
            failures = sum(session.failures.values())
            await call("plain", "last")
            session.alive_at_end = sum(session.failures.values()) == failures
    except Exception as exc:  # a dead transport's error leaves `async with client` with it
        run.failed(session, exc)


@pytest.fixture
def gateways(redis_url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two `mcpcache gateway` processes in front of an upstream that never heard of mcpcache, sharing the
    session's redis-server; started side by side and stopped by PID."""
    upstream_server = served_in_thread(build_server(stamped=False), keep_alive_s=5)  # uvicorn's default
    with upstream_server as upstream, (tmp_path / "gateways.log").open("wb") as log:
        config = tmp_path / "gateway.toml"
        config.write_text(
            f'[store]\nredis = "{redis_url}"\nnamespace = "load-gw-{secrets.token_hex(4)}"\n\n'
            f'[upstreams.up]\nurl = "{upstream}"\n\n'
            "[upstreams.up.tools.ttl0]\nttl_ms = 0\n\n[upstreams.up.tools.short]\nttl_ms = 50\n",
            encoding="utf-8",
        )
        ports = [free_port(), free_port()]
        command = [sys.executable, "-m", "mcpcache", "gateway", "--config", str(config), "--port"]
        started: list[subprocess.Popen[bytes]] = []
        try:
            for port in ports:
                started.append(
                    subprocess.Popen([*command, str(port)], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
                )
            for process, port in zip(started, ports, strict=True):
                wait_until_listening(process, port, 120.0, "mcpcache gateway")
            yield f"http://127.0.0.1:{ports[0]}/mcp", f"http://127.0.0.1:{ports[1]}/mcp"
        finally:
            for process in started:
                stop_process(process)


@pytest.mark.anyio
async def test_no_session_dies_and_no_call_fails_under_bursts_of_concurrent_calls(
    redis_url: str, gateways: tuple[str, str]
) -> None:
    run = Run()
    with served_in_thread(build_server(stamped=True), keep_alive_s=5) as direct:  # uvicorn's default: the race
        async with RedisStore(redis_url, namespace=f"load-client-{secrets.token_hex(4)}") as store:
            cache = ToolCache(store, CacheSettings(trusted=True), partition="load")
            async with anyio.create_task_group() as tg:
                for index in range(SESSIONS):
                    tg.start_soon(drive, run, cache, direct, index, "direct")
                    tg.start_soon(drive, run, cache, gateways[index % 2], index, "gateway")

    calls = sum(session.calls for session in run.sessions)
    failed = {session.name: dict(session.failures) for session in run.sessions if session.failures}
    dead = [session.name for session in run.sessions if not session.alive_at_end]
    print(f"\n[sessions under load] sessions={len(run.sessions)} calls={calls} dead={len(dead)} failed={failed}")
    for what, text in run.tracebacks.items():
        print(f"--- first {what}\n{text}")
    assert dead == []
    assert failed == {}
    assert calls >= 2 * SESSIONS * CYCLES * CALLERS * CALLS_PER_CALLER  # every burst ran in full
