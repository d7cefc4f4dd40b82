"""A real `redis-server` for the tests: started on a free loopback port, killed and restarted on demand.

The Redis store's guarantees (atomic scripts, expiry by the server's clock, reconnection after a crash) only
mean something against the real server, so no fake stands in. Without the binary the tests skip locally and
fail in CI, where a silent skip would hide that a whole backend went untested.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
import redis

from mcpcache.processes import RedisServer, free_port

__all__ = ["REDIS_SERVER", "Frozen", "RedisServer", "free_port", "redis_server_binary", "used_memory"]

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
