"""A tool the gateway's configuration declares that its upstream does not list: one warning at start, naming
it (issue 23: a misspelt name otherwise went unnoticed). Real FastMCP upstream, the gateway's own reach."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastmcp import FastMCP
from fastmcp.server.providers.proxy import ProxyClient

from mcpcache.gateway.app import Upstream
from mcpcache.gateway.config import ToolSettings, UpstreamSettings
from mcpcache.gateway.reach import reach_upstreams

pytestmark = pytest.mark.anyio


def upstream_with(tools: dict[str, ToolSettings]) -> Upstream:
    server: FastMCP[Any] = FastMCP("up")

    @server.tool
    def read_notebook(path: str) -> str:
        return path

    settings = UpstreamSettings(url="http://upstream.invalid/mcp", tools=tools)
    return Upstream("notebooks", settings, "test:up", ProxyClient(server).new, None)


async def test_a_declared_tool_the_upstream_does_not_list_is_named_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "mcpcache.gateway")
    tools = {"read_notebok": ToolSettings(), "read_notebook": ToolSettings(), "list_cells": ToolSettings()}
    failed = await reach_upstreams([upstream_with(tools)])
    assert failed == []
    said = [r.getMessage() for r in caplog.records if r.name == "mcpcache.gateway"]
    assert len(said) == 1, said
    assert "'notebooks'" in said[0]
    assert "read_notebok, list_cells" in said[0]
    assert "read_notebook," not in said[0]


async def test_declared_tools_the_upstream_lists_say_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "mcpcache.gateway")
    assert await reach_upstreams([upstream_with({"read_notebook": ToolSettings()})]) == []
    assert [r for r in caplog.records if r.name == "mcpcache.gateway"] == []
