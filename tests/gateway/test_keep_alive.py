"""`mcpcache gateway` keeps an idle connection open for longer than a caller's connection pool reuses it.

Uvicorn's own default (5 s) is exactly the idle expiry of httpx's pool, which the MCP SDK and FastMCP use:
the two retire a connection at the same moment, and a request sent on it then is reset before any answer
(which ends the caller's whole session with the MCP SDK 2.3.0: python-sdk#3522). The gateway must still hold
the connection when the caller's pool would last reuse it.
"""

from __future__ import annotations

import errno
import socket
import time
from urllib.parse import urlsplit

import httpx2
import pytest

from mcpcache.gateway.app import KEEP_ALIVE_S

from .conftest import Cluster

pytestmark = [pytest.mark.redis, pytest.mark.slow]

POOL_EXPIRY_S = httpx2.Limits().keepalive_expiry
"""How long httpx2's pool reuses an idle connection, by default (what the SDK's and FastMCP's clients use)."""


def exchange(sock: socket.socket, host: str) -> bytes:
    """One request on `sock` (refused without a token: any complete answer will do); the answer's head."""
    request = f"GET /mcp HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n\r\n".encode()
    sock.sendall(request)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(65536)
        assert chunk, f"the gateway closed the connection instead of answering: {head!r}"
        head += chunk
    return head


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError as exc:
        return exc.errno in (errno.ECONNRESET, errno.EPIPE)


def test_the_gateway_outlasts_the_idle_expiry_of_a_callers_pool(cluster: Cluster) -> None:
    assert POOL_EXPIRY_S is not None
    assert KEEP_ALIVE_S > POOL_EXPIRY_S
    url = urlsplit(cluster.gateways[0])
    assert url.hostname is not None
    assert url.port is not None
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        head = exchange(sock, url.netloc)
        assert head.startswith(b"HTTP/1.1 "), head
        # Idle for a little longer than the caller's pool would keep the connection.
        time.sleep(POOL_EXPIRY_S + 1.0)
        assert not closed_by_peer(sock), "the gateway closed an idle connection a caller's pool would still reuse"
        assert exchange(sock, url.netloc).startswith(b"HTTP/1.1 ")
