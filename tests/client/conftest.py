"""Fixtures for the client-cache tests: an injected clock and a cache on an in-memory store that share it."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from servers.twins import DATA_ENV
from servers.twins import SCRIPT as TWINS_SCRIPT
from support.transports import http_servers

from mcpcache.client import ToolCache
from mcpcache.stores import MemoryStore

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


@pytest.fixture(scope="session")
def twin_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Two twin servers over streamable HTTP (tests/servers/twins.py): the same name and version, data "A"
    and data "B", started side by side once for the session and stopped by PID."""
    commands = [["env", f"{DATA_ENV}={data}", sys.executable, str(TWINS_SCRIPT), "http"] for data in TWINS]
    log_path = tmp_path_factory.mktemp("twins") / "servers.log"
    with log_path.open("wb") as log, http_servers(commands, log=log) as urls:
        yield dict(zip(TWINS, urls, strict=True))
