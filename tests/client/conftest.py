"""Fixtures for the client-cache tests: an injected clock and a cache on an in-memory store that share it."""

from __future__ import annotations

import pytest

from mcpcache.client import ToolCache
from mcpcache.stores import MemoryStore

from .harness import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock)


@pytest.fixture
def cache(store: MemoryStore, clock: FakeClock) -> ToolCache:
    return ToolCache(store, clock=clock)
