"""Every HTTP listener of mcpcache refuses a web page's forged Host or Origin on a loopback bind (DNS
rebinding), and answers its own host on any port.

A page on evil.example whose name has been made to resolve to 127.0.0.1 reaches a local server with
`Host: evil.example` (and its own Origin): the server must refuse it, or the page runs its tools. Each
listener is started as a user starts it and sent an `initialize` with forged headers; the gateway also
with `[gateway] allowed_hosts`, the setting for a gateway behind a reverse proxy.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mcpcache.processes import free_port, stop_process, wait_until_listening

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _start(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def listeners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """name -> port: the demo server, the example server, and the gateway (plain, and with a named host)."""
    folder = tmp_path_factory.mktemp("rebinding")
    demo = [sys.executable, "-m", "mcpcache", "demo-server", "--dir", str(folder), "--no-revalidation"]
    ports = {name: free_port() for name in ("demo-server", "examples/server.py", "gateway", "gateway+allowed")}
    config = folder / "allowed.toml"
    upstream = ", ".join(f'"{part}"' for part in demo)
    config.write_text(
        f'[gateway]\nport = {ports["gateway+allowed"]}\nallowed_hosts = ["mcp.example.com"]\n\n'
        f"[upstreams.demo]\ncommand = [{upstream}]\n",
        encoding="utf-8",
    )
    commands = {
        "demo-server": [*demo, "--http", str(ports["demo-server"])],
        "examples/server.py": [sys.executable, "examples/server.py", "--http", str(ports["examples/server.py"])],
        "gateway": [
            sys.executable,
            "-m",
            "mcpcache",
            "gateway",
            "--port",
            str(ports["gateway"]),
            "--upstream",
            "--",
            *demo,
        ],
        "gateway+allowed": [sys.executable, "-m", "mcpcache", "gateway", "--config", str(config)],
    }
    started: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, command in commands.items():  # all at once: each takes seconds to start
            started[name] = _start(command, folder / f"{name.replace('/', '_')}.log")
        for name, process in started.items():
            wait_until_listening(process, ports[name], 120, name)
        yield ports
    finally:
        for process in started.values():
            stop_process(process)


def _status(port: int, host: str, origin: str | None = None) -> int:
    headers = dict(ACCEPT, Host=host)
    if origin is not None:
        headers["Origin"] = origin
    with httpx.Client(timeout=30) as client:
        response = client.post(f"http://127.0.0.1:{port}/mcp", json=INITIALIZE, headers=headers)
        return response.status_code


FORGED = [("evil.example", None), ("evil.example:80", None), ("127.0.0.1", "http://evil.example")]


@pytest.mark.parametrize("name", ["demo-server", "examples/server.py", "gateway", "gateway+allowed"])
def test_forged_host_or_origin_is_refused_own_host_answered(listeners: dict[str, int], name: str) -> None:
    port = listeners[name]
    refused = [(host, origin, _status(port, host, origin)) for host, origin in FORGED]
    assert all(400 <= status < 500 for _, _, status in refused), refused
    for own in (f"127.0.0.1:{port}", "localhost:1234", "127.0.0.1"):
        assert _status(port, own) == 200, own
    assert _status(port, f"localhost:{port}", f"http://localhost:{port}") == 200


def test_a_named_host_is_answered_when_allowed(listeners: dict[str, int]) -> None:
    assert _status(listeners["gateway+allowed"], "mcp.example.com") == 200
    assert _status(listeners["gateway+allowed"], "mcp.example.com:443") == 200
    assert 400 <= _status(listeners["gateway"], "mcp.example.com") < 500
