"""A real `redis-server` for the tests: started on a free loopback port, killed and restarted on demand.

The Redis store's guarantees (atomic scripts, expiry by the server's clock, reconnection after a crash) only
mean something against the real server, so no fake stands in. Without the binary the tests skip locally and
fail in CI, where a silent skip would hide that a whole backend went untested.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mcpcache.bench.common import RedisServer, free_port

__all__ = ["REDIS_SERVER", "RedisServer", "free_port", "redis_server_binary"]

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
