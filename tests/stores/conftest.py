"""Fixtures handing each store test a `Backend` (see backends.py): every kind, or the persistent ones. The
Redis store runs on one redis-server, on a 3-primary Redis Cluster and on one valkey-server."""

from __future__ import annotations

from pathlib import Path

import pytest

from .backends import Backend, memory_backend, redis_backend, sqlite_backend

REDIS_KINDS = {"redis": "redis_url", "redis-cluster": "redis_cluster_url", "valkey": "valkey_url"}
"""Each engine the Redis store runs on, and the session fixture naming its URL."""

_REDIS = [pytest.param(kind, marks=pytest.mark.redis) for kind in REDIS_KINDS]


def _redis_backend(request: pytest.FixtureRequest, kind: str) -> Backend:
    return redis_backend(request.getfixturevalue(REDIS_KINDS[kind]), name=kind)


@pytest.fixture(params=["memory", "sqlite", *_REDIS])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    kind = request.param
    if kind == "memory":
        return memory_backend()
    if kind == "sqlite":
        return sqlite_backend(tmp_path / "cache.db")
    return _redis_backend(request, kind)


@pytest.fixture(params=["sqlite", *_REDIS])
def persistent_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return sqlite_backend(tmp_path / "cache.db")
    return _redis_backend(request, request.param)


@pytest.fixture(params=["memory", "sqlite"])
def clocked_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """The stores that judge expiry by an injected clock (Redis keeps its own time)."""
    return memory_backend() if request.param == "memory" else sqlite_backend(tmp_path / "cache.db")
