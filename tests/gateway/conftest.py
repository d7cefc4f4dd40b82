"""Fixtures for the gateway tests: a gateway in this process over a real upstream FastMCP server."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastmcp import FastMCP
from fastmcp.server.providers.proxy import ProxyClient

from mcpcache.demo.notebooks import generate_notebook, generate_notebook_of_size
from mcpcache.demo.server import build_demo_server
from mcpcache.gateway.app import KEEP_ALIVE_S, Upstream, assemble_gateway
from mcpcache.gateway.config import GatewayConfig, ToolSettings, UpstreamSettings
from mcpcache.processes import free_port, stop_process, wait_until_listening
from mcpcache.stores.base import Store

from .counting_server import build_counting_server

NOTEBOOK = "nb.ipynb"
BIG_NOTEBOOK = "big.ipynb"
"""About 600 KB on disk: its answer (text and structuredContent) is over 1 MiB, more than one SSE event may
carry by the MCP SDK's default bound."""


@pytest.fixture(scope="session")
def notebook_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with an 8-cell notebook and a big one, for the demo server."""
    folder = tmp_path_factory.mktemp("notebooks")
    generate_notebook(folder / NOTEBOOK, 8, seed=11)
    generate_notebook_of_size(folder / BIG_NOTEBOOK, 600_000, seed=12)
    return folder


def gateway_over(
    upstream: FastMCP[Any],
    tools: Mapping[str, ToolSettings],
    *,
    store: Store | None = None,
    server_id: str = "test:upstream",
    **telemetry: Any,
) -> FastMCP[Any]:
    """The gateway (the real FastMCP proxy and middleware) over an upstream served in this process.
    `telemetry`: its `tracer_provider` and `meter_provider`, if any."""
    settings = UpstreamSettings(url="http://upstream.invalid/mcp", tools=dict(tools))
    config = GatewayConfig(upstreams={"up": settings})
    base: ProxyClient[Any] = ProxyClient(upstream)
    upstreams = [Upstream("up", settings, server_id, base.new, None)]
    return assemble_gateway(config, upstreams, store=store, auth=None, **telemetry)


def demo_command(notebook_dir: Path) -> list[str]:
    """The demo server as a server that never heard of mcpcache (stdio; add --http PORT for HTTP)."""
    return [sys.executable, "-m", "mcpcache", "demo-server", "--dir", str(notebook_dir), "--no-revalidation"]


TOKENS = {who: f"{who}-" + who[0] * 24 for who in ("alice", "bob", "carol", "dave")}
"""The bearer tokens the replicas' static verifier accepts, by the client id they stand for."""


def replica_config(path: Path, counting_url: str, redis_url: str) -> Path:
    """Two callers' tokens, the shared Redis store, and the counting server with one private and one
    public numbered tool (namespaced, as a second upstream would need)."""
    namespace = "gw-test-" + secrets.token_hex(4)  # apart from other tests on the shared redis-server
    tokens = "".join(f'[[auth.tokens]]\ntoken = "{token}"\nclient_id = "{who}"\n\n' for who, token in TOKENS.items())
    path.write_text(
        f"""[store]
redis = "{redis_url}"
namespace = "{namespace}"

[auth]
kind = "static"

{tokens}[upstreams.counting]
url = "{counting_url}"
namespace = "count"

[upstreams.counting.tools.numbered_private]
ttl_ms = 600_000

[upstreams.counting.tools.numbered_public]
ttl_ms = 600_000
scope = "public"
""",
        encoding="utf-8",
    )
    return path


@contextlib.contextmanager
def served_in_thread(server: FastMCP[Any], *, keep_alive_s: float = KEEP_ALIVE_S) -> Iterator[str]:
    """`server` over streamable HTTP on a free loopback port, run by uvicorn in a thread of this process
    (a real HTTP server, without the seconds a process of its own spends importing FastMCP).

    Idle connections are kept open `keep_alive_s`, by default as long as `mcpcache gateway` keeps them:
    longer than a client's pool, so the stock clients of the tests never meet the keep-alive race that ends
    a stock MCP SDK session (python-sdk#3522; mcpcache guards only the sessions it wraps). A test of that
    race passes uvicorn's own default, 5 s."""
    port = free_port()
    config = uvicorn.Config(
        server.http_app(path="/mcp"), host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=keep_alive_s
    )
    runner = uvicorn.Server(config)
    thread = threading.Thread(target=runner.run, name=f"upstream-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not runner.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the upstream on port {port} did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        runner.should_exit = True
        thread.join(timeout=30)


@dataclass(frozen=True)
class Cluster:
    demo: str
    """The demo server without mcpcache (`build_demo_server(..., revalidation=False)`, what
    `mcpcache demo-server --no-revalidation` serves), over streamable HTTP."""
    counting: str
    """The counting server, over streamable HTTP."""
    gateways: tuple[str, str]
    """Two `mcpcache gateway` processes in front of the counting server, sharing the session's redis-server."""


@pytest.fixture(scope="session")
def cluster(notebook_dir: Path, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The HTTP upstreams (in threads of this process) and two gateway processes in front of them, which
    start side by side and are stopped by PID."""
    with replicas(notebook_dir, redis_url, tmp_path_factory.mktemp("cluster")) as started:
        yield started


@pytest.fixture(scope="session")
def cluster_on_redis_cluster(
    notebook_dir: Path, redis_cluster_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """As `cluster`, with the replicas sharing the session's Redis Cluster (3 primaries) instead."""
    with replicas(notebook_dir, redis_cluster_url, tmp_path_factory.mktemp("cluster")) as started:
        yield started


@contextlib.contextmanager
def replicas(notebook_dir: Path, redis_url: str, folder: Path) -> Iterator[Cluster]:
    with (
        served_in_thread(build_demo_server(notebook_dir, revalidation=False)) as demo,
        served_in_thread(build_counting_server()) as counting,
        (folder / "gateways.log").open("wb") as log,
    ):
        config = replica_config(folder / "gateway.toml", counting, redis_url)
        command = [sys.executable, "-m", "mcpcache", "gateway", "--config", str(config), "--port"]
        ports = [free_port(), free_port()]
        started: list[subprocess.Popen[bytes]] = []
        try:
            for port in ports:
                started.append(
                    subprocess.Popen([*command, str(port)], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
                )
            for process, port in zip(started, ports, strict=True):
                wait_until_listening(process, port, 120.0, "mcpcache gateway")
            one, two = (f"http://127.0.0.1:{port}/mcp" for port in ports)
            yield Cluster(demo, counting, (one, two))
        finally:
            for process in started:
                stop_process(process)
