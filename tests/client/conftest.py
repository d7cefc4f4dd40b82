"""Fixtures for the client-cache tests: an injected clock and a cache on an in-memory store that share it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from fixture_servers.twins import DATA_ENV
from fixture_servers.twins import SCRIPT as TWINS_SCRIPT
from stores.backends import Backend, memory_backend, redis_backend, sqlite_backend
from support.transports import http_servers

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.stores import MemoryStore, Store

from .harness import FakeClock

TWINS = ("A", "B")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock)


@pytest.fixture
def cache(store: MemoryStore, clock: FakeClock) -> ToolCache:
    return ToolCache(store, clock=clock)


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each of the three real stores in turn: memory, a SQLite file, the session's redis-server."""
    if request.param == "memory":
        return memory_backend()
    if request.param == "sqlite":
        return sqlite_backend(tmp_path / "cache.db")
    return redis_backend(request.getfixturevalue("redis_url"))


GENEROUS_STORE_DEADLINE_S = 60.0
"""The store deadline of the caches of a test on a real store (`opened`). Such a test checks what the cache
does, and a loaded machine can take more than the default second for one SQLite or Redis operation, which
the fence rightly turns into a miss (a status the test did not expect). The deadline's own tests set theirs."""


@pytest.fixture
async def opened(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Store]:
    defaults = CacheSettings.__init__.__kwdefaults__
    assert defaults is not None
    assert "store_deadline_s" in defaults
    monkeypatch.setitem(defaults, "store_deadline_s", GENEROUS_STORE_DEADLINE_S)
    async with backend.open() as store:
        yield store


@pytest.fixture(scope="session")
def twin_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Two twin servers over streamable HTTP (tests/fixture_servers/twins.py): the same name and version, data "A"
    and data "B", started side by side once for the session and stopped by PID."""
    commands = [["env", f"{DATA_ENV}={data}", sys.executable, str(TWINS_SCRIPT), "http"] for data in TWINS]
    log_path = tmp_path_factory.mktemp("twins") / "servers.log"
    with log_path.open("wb") as log, http_servers(commands, log=log) as urls:
        yield dict(zip(TWINS, urls, strict=True))
