"""A `Harness` per store kind, so every references test runs unchanged on memory, SQLite and Redis.

The stores come from the store suite's backends (tests/stores/backends.py): a fresh SQLite file, a fresh
namespace on the session's real redis-server. The references get an injected clock; where the store keeps
its own time (Redis) the two clocks differ, which is how a host with its own clock would run too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from stores.backends import Backend, FakeClock, memory_backend, redis_backend, sqlite_backend

from mcpcache.refs import References
from mcpcache.stores import Store, StoreLimits

CONVERSATION = "conv-42"


@dataclass
class Harness:
    backend: Backend
    clock: FakeClock
    opened: list[Store] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.backend.name

    def store(self, limits: StoreLimits | None = None) -> Store:
        """A store on this test's storage (SQLite: the same file; Redis: the same namespace)."""
        store = self.backend.open(limits)
        self.opened.append(store)
        return store

    def refs(self, conversation_id: str = CONVERSATION, store: Store | None = None, **options: Any) -> References:
        store = store if store is not None else (self.opened[0] if self.opened else self.store())
        return References(store, conversation_id=conversation_id, clock=self.clock, **options)


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    kind = request.param
    if kind == "memory":
        backend = memory_backend()
    elif kind == "sqlite":
        backend = sqlite_backend(tmp_path / "refs.db")
    else:
        backend = redis_backend(request.getfixturevalue("redis_url"))
    clock = backend.clock if backend.clock is not None else FakeClock()
    harness = Harness(backend, clock)
    try:
        yield harness
    finally:
        if harness.opened and kind == "redis":
            await harness.opened[0].remove_all()
        for store in harness.opened:
            await store.close()
