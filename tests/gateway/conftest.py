"""Fixtures for the gateway tests: a gateway in this process over a real upstream FastMCP server."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastmcp import FastMCP
from fastmcp.server.providers.proxy import ProxyClient

from mcpcache.bench.common import free_port, stop_process, wait_until_listening
from mcpcache.demo.notebooks import generate_notebook, generate_notebook_of_size
from mcpcache.gateway.app import Upstream, assemble_gateway
from mcpcache.gateway.config import GatewayConfig, ToolSettings, UpstreamSettings
from mcpcache.stores.base import Store

NOTEBOOK = "nb.ipynb"
BIG_NOTEBOOK = "big.ipynb"
"""About 600 KB on disk: its answer (text and structuredContent) is over 1 MiB, more than one SSE event may
carry by the MCP SDK's default bound."""
COUNTING_SERVER = Path(__file__).with_name("counting_server.py")


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
) -> FastMCP[Any]:
    """The gateway (the real FastMCP proxy and middleware) over an upstream served in this process."""
    settings = UpstreamSettings(url="http://upstream.invalid/mcp", tools=dict(tools))
    config = GatewayConfig(upstreams={"up": settings})
    base: ProxyClient[Any] = ProxyClient(upstream)
    return assemble_gateway(config, [Upstream("up", settings, server_id, base.new, None)], store=store, auth=None)


def demo_command(notebook_dir: Path) -> list[str]:
    """The demo server as a server that never heard of mcpcache (stdio; add --http PORT for HTTP)."""
    return [sys.executable, "-m", "mcpcache", "demo-server", "--dir", str(notebook_dir), "--no-revalidation"]


TOKENS = {"alice": "alice-" + "a" * 24, "bob": "bob-" + "b" * 24}
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


@dataclass(frozen=True)
class Cluster:
    demo: str
    """The demo server without mcpcache, over streamable HTTP."""
    counting: str
    """The counting server, over streamable HTTP."""
    gateways: tuple[str, str]
    """Two `mcpcache gateway` processes in front of the counting server, sharing the session's redis-server."""


@pytest.fixture(scope="session")
def cluster(notebook_dir: Path, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Every process the HTTP tests need, started side by side in one go (the ports are chosen first, so
    the gateways' configuration can name the upstream before it listens), and stopped by PID."""
    folder = tmp_path_factory.mktemp("cluster")
    demo, counting, one, two = (free_port() for _ in range(4))
    config = replica_config(folder / "gateway.toml", f"http://127.0.0.1:{counting}/mcp", redis_url)
    gateway = [sys.executable, "-m", "mcpcache", "gateway", "--config", str(config), "--port"]
    commands = {
        demo: [*demo_command(notebook_dir), "--http", str(demo)],
        counting: [sys.executable, str(COUNTING_SERVER), "http", str(counting)],
        one: [*gateway, str(one)],
        two: [*gateway, str(two)],
    }
    started: list[subprocess.Popen[bytes]] = []
    with (folder / "servers.log").open("wb") as log:
        try:
            for command in commands.values():
                started.append(subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log))
            for process, (port, command) in zip(started, commands.items(), strict=True):
                wait_until_listening(process, port, 120.0, " ".join(command[1:4]))
            url = "http://127.0.0.1:{}/mcp".format
            yield Cluster(url(demo), url(counting), (url(one), url(two)))
        finally:
            for process in started:
                stop_process(process)
