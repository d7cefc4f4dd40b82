"""Serving stale across OS processes sharing a store, against a server of its own over streamable HTTP that
the test kills (tests/fixture_servers/stale.py, with a ttl of 0: every reuse is stale at once, on real clocks).

This process (A) and a worker process (B, tests/client/stale_worker.py) each hold a `ToolCache` on one real
SQLite file or one namespace of the session's real redis-server, and a `fastmcp.Client` to the server:
- B is served, stale while revalidating, the answer A stored, and its background revalidation lands;
- A's write (a mutating call through its cache) ends freshness in the store: B's next read is never stale;
- the server killed (SIGKILL), B is served the stored answer of a tool granting stale-if-error, and a
  background revalidation that cannot reach the server fails in B without reaching B's caller.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import fastmcp
import pytest
from fastmcp.client.transports import StreamableHttpTransport
from fixture_servers.stale import SCRIPT as STALE_SERVER

from mcpcache.client import ToolCache
from mcpcache.processes import free_port, stop_process, wait_until_listening
from mcpcache.stores import RedisStore, SQLiteStore, Store

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).resolve().parent / "stale_worker.py"
SERVER_ID = "stale-over-http"
K = {"key": "k"}
GUARD_S = 60.0
"""A bound on a worker's answer, against a hang (it starts Python and FastMCP): never a timing assertion."""


class Worker:
    """The worker process, a JSON line in and one out per command."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    async def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None
        assert stdout is not None
        stdin.write((json.dumps(command) + "\n").encode())
        stdin.flush()
        return await self.answer(stdout)

    @staticmethod
    async def answer(stdout: IO[bytes]) -> dict[str, Any]:
        with anyio.fail_after(GUARD_S):
            line = await anyio.to_thread.run_sync(stdout.readline)
        assert line, "the worker exited"
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self.ask({"call": tool, "args": arguments})

    async def ask_and_leave(self, command: dict[str, Any]) -> None:
        """Send a last command, expecting no answer."""
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        self.process.stdin.flush()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    with (tmp_path / "server.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(STALE_SERVER), "http", "0", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        try:
            wait_until_listening(process, port, 120.0, "the stale-lab server")
            yield process, f"http://127.0.0.1:{port}/mcp"
        finally:
            stop_process(process)


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, str]:
    """(kind, location, namespace) of a store both processes open."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "shared.db"), "mcpcache"
    return "redis", request.getfixturevalue("redis_url"), f"stale-{uuid.uuid4().hex[:12]}"


def open_store(kind: str, location: str, namespace: str) -> Store:
    if kind == "sqlite":
        return SQLiteStore(location, namespace=namespace, busy_timeout_s=10.0)
    return RedisStore(location, namespace=namespace, socket_timeout_s=10.0, connect_timeout_s=10.0)


@pytest.fixture
def worker(
    server: tuple[subprocess.Popen[bytes], str], shared: tuple[str, str, str], tmp_path: Path
) -> Iterator[Worker]:
    """The worker process on the shared store and the server, stopped by its PID on the way out."""
    with (tmp_path / "worker.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(WORKER), *shared, server[1], SERVER_ID],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        try:
            yield Worker(process)
        finally:
            stop_process(process)


async def test_two_processes_serve_stale_from_one_store_and_read_each_others_writes(
    server: tuple[subprocess.Popen[bytes], str], shared: tuple[str, str, str], worker: Worker
) -> None:
    process, url = server
    store = open_store(*shared)
    cache = ToolCache(store)
    try:
        assert worker.process.stdout is not None
        assert await Worker.answer(worker.process.stdout) == {"ready": True}
        async with fastmcp.Client(StreamableHttpTransport(url)) as client:
            view = cache.wrap(client, server_id=SERVER_ID)
            stored = await view.call_mcp("read", K)
            assert stored.outcome.status == "miss"

            stale = await worker.call("read", K)
            assert stale["status"] == "stale_while_revalidate", stale
            assert stale["text"] == "k: first"
            stats = await worker.ask({"flush": True})
            assert stats["background_revalidations"] == 1
            assert stats["background_failures"] == 0

            assert not (await view.call_mcp("edit", {"key": "k", "text": "k: edited"})).result.is_error
            after = await worker.call("read", K)
            assert after["status"] in ("revalidated", "miss"), after
            assert after["text"] == "k: edited"

            kept = await view.call_mcp("fallback", K)
            assert kept.outcome.status == "miss"
            process.send_signal(signal.SIGKILL)  # the server this test started, by its handle
            process.wait(timeout=GUARD_S)

            served = await worker.call("fallback", K)
            assert served["status"] == "stale_if_error", served
            assert served["text"] == "k: edited"
            assert not served["is_error"]

            stale = await worker.call("read", K)
            assert stale["status"] == "stale_while_revalidate"
            assert stale["text"] == "k: edited"
            stats = await worker.ask({"flush": True})
            assert stats["background_failures"] == 1
            assert stats["stale_if_error"] == 1
        await worker.ask_and_leave({"quit": True})
    finally:
        await cache.close()
        await store.close()
