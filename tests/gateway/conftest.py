"""Fixtures for the gateway tests: a gateway in this process over a real upstream FastMCP server."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from fastmcp import FastMCP
from fastmcp.server.providers.proxy import ProxyClient

from mcpcache.demo.notebooks import generate_notebook
from mcpcache.gateway.app import Upstream, assemble_gateway
from mcpcache.gateway.config import GatewayConfig, ToolSettings, UpstreamSettings
from mcpcache.stores.base import Store

NOTEBOOK = "nb.ipynb"


@pytest.fixture(scope="session")
def notebook_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with one 8-cell notebook, for the demo server."""
    folder = tmp_path_factory.mktemp("notebooks")
    generate_notebook(folder / NOTEBOOK, 8, seed=11)
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
