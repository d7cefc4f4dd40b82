"""Two servers that report the same name and version are never one server (docs/protocol.md section 5).

A server is named by its endpoint: a URL without the credentials in it, or a stdio command with its
arguments, working directory and environment; an in-process server by the object; a bare
`ClientSession` by the connection, unless the caller names it with `wrap(..., server_id=...)`. The
twins (tests/fixture_servers/twins.py) all report the name "twin", version 1.0.0, and answer `whoami` with the
data they were started with: one cache on one shared SQLite store, in one partition, must never serve
one twin's answer to a caller talking to the other, and must share what one server answered between
two connections to it.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import fastmcp
import mcp
import pytest
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from fixture_servers.twins import DATA_ENV, DATA_FILE, build_twins
from fixture_servers.twins import SCRIPT as TWINS_SCRIPT
from mcp.client._memory import InMemoryTransport

from mcpcache.client import ToolCache
from mcpcache.client import identity as client_identity
from mcpcache.client.identity import shown_url, url_server_id, url_server_id_as
from mcpcache.stores import SQLiteStore

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ClientFactory = Callable[[], Any]


@pytest.fixture
async def cache(tmp_path: Path) -> AsyncIterator[ToolCache]:
    async with SQLiteStore(tmp_path / "shared.db") as store:
        yield ToolCache(store, partition="one")


@contextlib.asynccontextmanager
async def connected(*factories: ClientFactory) -> AsyncIterator[list[Any]]:
    """Connect every client side by side (a stdio server costs one start-up for all of them); each is
    entered and left in a task of its own, and all stay connected until the block ends."""
    clients: list[Any] = [None] * len(factories)
    ready = 0
    done = anyio.Event()
    all_ready = anyio.Event()

    async def hold(index: int) -> None:
        nonlocal ready
        async with factories[index]() as client:
            clients[index] = client
            ready += 1
            if ready == len(factories):
                all_ready.set()
            await done.wait()

    async with anyio.create_task_group() as group:
        for index in range(len(factories)):
            group.start_soon(hold, index)
        with anyio.fail_after(60):  # a guard against a server that never starts
            await all_ready.wait()
        try:
            yield clients
        finally:
            done.set()


async def whoami(view: Any) -> tuple[str, str]:
    """(the data the answer came from, what the cache did)."""
    call = await view.call_mcp("whoami", {}) if hasattr(view, "call_mcp") else await view.call("whoami", {})
    assert not call.result.is_error, call.result
    return call.result.structured_content["data"], call.outcome.status


def with_credentials(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, f"{user}:{password}@{parts.netloc}", parts.path, parts.query, ""))


def http_client(kind: str, url: str) -> ClientFactory:
    if kind == "fastmcp":
        return lambda: fastmcp.Client(StreamableHttpTransport(url))
    return lambda: mcp.Client(url)


@pytest.mark.parametrize("kind", ["mcp", "fastmcp"])
async def test_two_http_servers_with_one_name_are_two_servers(
    kind: str, cache: ToolCache, twin_urls: dict[str, str]
) -> None:
    async with connected(
        http_client(kind, twin_urls["A"]), http_client(kind, twin_urls["A"]), http_client(kind, twin_urls["B"])
    ) as (a, a_again, b):
        assert await whoami(cache.wrap(a)) == ("A", "miss")
        # The same server through another connection: shared (the identity is the endpoint).
        assert await whoami(cache.wrap(a_again)) == ("A", "fresh_hit")
        # Another server with the same name and version, on another port: never A's answer.
        assert await whoami(cache.wrap(b)) == ("B", "miss")
        assert await whoami(cache.wrap(b)) == ("B", "fresh_hit")
        assert await whoami(cache.wrap(a)) == ("A", "fresh_hit")


@pytest.mark.parametrize("kind", ["mcp", "fastmcp"])
async def test_credentials_in_the_url_are_not_identity(kind: str, cache: ToolCache, twin_urls: dict[str, str]) -> None:
    url = twin_urls["A"]
    alice, bob = with_credentials(url, "alice", "secret-1"), with_credentials(url, "bob", "secret-2")
    async with connected(http_client(kind, alice), http_client(kind, bob)) as (as_alice, as_bob):
        assert await whoami(cache.wrap(as_alice)) == ("A", "miss")
        # One server: who is asking is the partition's business, which is the caller's to set.
        assert await whoami(cache.wrap(as_bob)) == ("A", "fresh_hit")
    rows = [row async for row in _keys(cache)]
    assert not any("secret" in key or "alice" in key or "bob" in key for key in rows), rows


async def _keys(cache: ToolCache) -> AsyncIterator[str]:
    # What is kept, as the SQLite file holds it: the stored keys never carry the credentials.
    import sqlite3

    store = cache.store
    assert isinstance(store, SQLiteStore)
    with sqlite3.connect(store.path) as db:
        tables = [name for (name,) in db.execute("select name from sqlite_master where type = 'table'")]
        for table in tables:
            for row in db.execute(f"select * from {table}"):  # table names from the file itself
                yield repr(row)


def stdio_mcp(env: dict[str, str] | None = None, cwd: Path | None = None) -> ClientFactory:
    params = mcp.StdioServerParameters(command=sys.executable, args=[str(TWINS_SCRIPT), "stdio"], env=env, cwd=cwd)
    return lambda: mcp.Client(params)


def stdio_fastmcp(env: dict[str, str] | None = None, cwd: Path | None = None) -> ClientFactory:
    return lambda: fastmcp.Client(
        StdioTransport(sys.executable, [str(TWINS_SCRIPT), "stdio"], env=env, cwd=str(cwd) if cwd else None)
    )


async def test_stdio_servers_differing_only_in_their_environment_are_two_servers(cache: ToolCache) -> None:
    # mcp.Client, and fastmcp.Client for the same command with the same environment (shared).
    async with connected(
        stdio_mcp(env={DATA_ENV: "A"}), stdio_mcp(env={DATA_ENV: "B"}), stdio_mcp(env={DATA_ENV: "A"})
    ) as (a, b, a_again):
        assert await whoami(cache.wrap(a)) == ("A", "miss")
        assert await whoami(cache.wrap(b)) == ("B", "miss")
        assert await whoami(cache.wrap(a_again)) == ("A", "fresh_hit")
        assert await whoami(cache.wrap(b)) == ("B", "fresh_hit")


async def test_stdio_servers_differing_only_in_their_working_directory_are_two_servers(
    cache: ToolCache, tmp_path: Path
) -> None:
    folders = {}
    for data in ("C", "D"):
        folders[data] = tmp_path / data
        folders[data].mkdir()
        (folders[data] / DATA_FILE).write_text(data)
    async with connected(stdio_fastmcp(cwd=folders["C"]), stdio_fastmcp(cwd=folders["D"])) as (c, d):
        assert await whoami(cache.wrap(c)) == ("C", "miss")
        assert await whoami(cache.wrap(d)) == ("D", "miss")
        assert await whoami(cache.wrap(c)) == ("C", "fresh_hit")
        assert await whoami(cache.wrap(d)) == ("D", "fresh_hit")


async def test_a_bare_session_is_its_own_server_unless_named(
    cache: ToolCache, twin_urls: dict[str, str], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The advice is given once per process; start this test as a fresh process would.
    monkeypatch.setattr(client_identity, "_warned_unnamed", False)
    caplog.set_level(logging.INFO, logger="mcpcache.client")
    url = twin_urls["A"]
    async with connected(http_client("mcp", url), http_client("mcp", url)) as (one, two):
        # Unnamed: a session has no endpoint to name, so its entries stay with its connection.
        assert await whoami(cache.wrap(one.session)) == ("A", "miss")
        assert await whoami(cache.wrap(two.session)) == ("A", "miss")
        assert await whoami(cache.wrap(one.session)) == ("A", "fresh_hit")
        # Named alike by the caller: shared.
        assert await whoami(cache.wrap(one.session, server_id="x")) == ("A", "miss")
        assert await whoami(cache.wrap(two.session, server_id="x")) == ("A", "fresh_hit")
    advice = [r for r in caplog.records if r.name == "mcpcache.client" and "server_id=" in r.getMessage()]
    assert len(advice) == 1, [r.getMessage() for r in advice]


async def test_two_in_process_servers_with_one_name_are_two_servers(cache: ToolCache) -> None:
    a, b = build_twins("A"), build_twins("B")
    assert (a.name, a.version) == (b.name, b.version)
    async with connected(
        lambda: fastmcp.Client(a),
        lambda: fastmcp.Client(b),
        lambda: fastmcp.Client(a),
        lambda: mcp.Client(InMemoryTransport(b._mcp_server)),
    ) as (fast_a, fast_b, fast_a_again, sdk_b):
        assert await whoami(cache.wrap(fast_a)) == ("A", "miss")
        assert await whoami(cache.wrap(fast_b)) == ("B", "miss")
        # The same server object through another client: shared.
        assert await whoami(cache.wrap(fast_a_again)) == ("A", "fresh_hit")
        # The SDK client's in-memory transport to B is never taken for A.
        assert (await whoami(cache.wrap(sdk_b)))[0] == "B"


def test_credentials_are_kept_as_a_digest_and_never_shown() -> None:
    url = "http://alice:pw-1@[::1]:8000/mcp?token=t-1"
    assert url_server_id(url) == "url:http://[::1]:8000/mcp?token=t-1"
    assert url_server_id(url) == url_server_id("http://bob:pw-2@[::1]:8000/mcp?token=t-1")
    as_alice = url_server_id_as(url)
    assert as_alice != url_server_id_as("http://bob:pw-2@[::1]:8000/mcp?token=t-1")
    assert as_alice.startswith(url_server_id(url) + "|credentials:")
    assert "pw-1" not in as_alice
    with_header = url_server_id_as("http://h/mcp", {"Authorization": "Bearer a"})
    assert with_header == url_server_id_as("http://h/mcp", {"authorization": "Bearer a"})
    assert with_header != url_server_id_as("http://h/mcp", {"Authorization": "Bearer b"})
    assert url_server_id_as("http://h/mcp") == url_server_id("http://h/mcp")
    # What a log line shows: no userinfo, no query.
    assert shown_url(url) == "http://[::1]:8000/mcp?…"
    assert shown_url("https://h/mcp") == "https://h/mcp"
