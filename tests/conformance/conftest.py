"""Servers for the conformance tests: the everything server, and the gateway in front of it in the two
configurations a user meets (nothing declared; every tool declared cacheable with a store), each in its own
process started the way a user starts it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixture_servers.everything import TOOLS

from mcpcache.processes import free_port, stop_process, wait_until_listening

from .suite import runner_problem

REPO = Path(__file__).resolve().parents[2]
EVERYTHING = REPO / "tests" / "fixture_servers" / "everything.py"
RELAY = Path(__file__).resolve().parent / "stdio_relay.py"


@pytest.fixture(scope="session")
def suite_ready() -> None:
    """Skips when node or the suite is missing, except under CI, where that is a failure."""
    problem = runner_problem()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the conformance suite cannot run under CI: {problem}")
    pytest.skip(problem)


def _started(command: list[str], port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_until_listening(process, port, 120, " ".join(command[1:3]))
    except BaseException:
        stop_process(process)
        raise
    return process


@pytest.fixture(scope="session")
def everything_url(suite_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    logs = tmp_path_factory.mktemp("everything")
    process = _started([sys.executable, str(EVERYTHING), str(port)], port, logs / "server.log")
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(process)


def all_cacheable_config(path: Path, upstream_url: str, port: int) -> Path:
    """Every tool of the everything server declared, fresh for a minute, with a store in memory."""
    tools = "".join(f"[upstreams.everything.tools.{tool.name}]\nttl_ms = 60000\n\n" for tool in TOOLS)
    path.write_text(
        f'[gateway]\nhost = "127.0.0.1"\nport = {port}\n\n[store]\nmemory = true\n\n'
        f'[upstreams.everything]\nurl = "{upstream_url}"\n\n{tools}',
        encoding="utf-8",
    )
    return path


def _gateway(args: list[str], port: int, log: Path) -> subprocess.Popen[bytes]:
    return _started([sys.executable, "-m", "mcpcache", "gateway", *args], port, log)


@pytest.fixture(scope="session")
def gateway_urls(everything_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """name -> URL: `default` (`mcpcache gateway --upstream URL`), `cacheable` (every tool declared, a store)."""
    folder = tmp_path_factory.mktemp("gateways")
    plain_port, cacheable_port = free_port(), free_port()
    plain = _gateway(["--upstream", everything_url, "--port", str(plain_port)], plain_port, folder / "plain.log")
    try:
        config = all_cacheable_config(folder / "cacheable.toml", everything_url, cacheable_port)
        cacheable = _gateway(["--config", str(config)], cacheable_port, folder / "cacheable.log")
        try:
            yield {
                "default": f"http://127.0.0.1:{plain_port}/mcp",
                "cacheable": f"http://127.0.0.1:{cacheable_port}/mcp",
            }
        finally:
            stop_process(cacheable)
    finally:
        stop_process(plain)


@pytest.fixture(scope="session")
def proxy_url(everything_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`mcpcache proxy --url EVERYTHING` as a host starts it (over stdio), behind an HTTP relay for the suite:
    a process per host session of the handshake era, one for all requests of 2026-07-28."""
    folder = tmp_path_factory.mktemp("proxy")
    port = free_port()
    proxy = [sys.executable, "-m", "mcpcache", "proxy", "--url", everything_url, "--store", str(folder / "tools.db")]
    relay = _started([sys.executable, str(RELAY), str(port), "--", *proxy], port, folder / "relay.log")
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(relay)
