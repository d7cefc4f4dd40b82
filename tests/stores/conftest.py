"""Fixtures handing each store test a `Backend` (see backends.py): every kind, or the persistent ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from .backends import Backend, memory_backend, redis_backend, sqlite_backend


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    kind = request.param
    if kind == "memory":
        return memory_backend()
    if kind == "sqlite":
        return sqlite_backend(tmp_path / "cache.db")
    return redis_backend(request.getfixturevalue("redis_url"))


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def persistent_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return sqlite_backend(tmp_path / "cache.db")
    return redis_backend(request.getfixturevalue("redis_url"))


@pytest.fixture(params=["memory", "sqlite"])
def clocked_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """The stores that judge expiry by an injected clock (Redis keeps its own time)."""
    return memory_backend() if request.param == "memory" else sqlite_backend(tmp_path / "cache.db")
