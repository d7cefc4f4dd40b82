"""The two MCP servers of the issue's scenario, and the data they pass between them.

- The query server (FastMCP, with mcpcache's middleware so the client cache has something to keep)
  answers `query(station, hours)` with a structured time series of `hours` rows, 240 by default (the
  series is `mcpcache.bench.byref.time_series`, the one the benchmarks pass around).
  Its other tools return the other shapes a result takes: JSON in a text block, plain text, an image,
  and an error.
- The chart server (the MCP SDK's MCPServer) has `plot(data: list[dict], title: str)`. It answers with
  how many rows it got and a digest of them, so a test in another process can check that exactly the
  rows of the series arrived; `plot_calls()` says how often `plot` ran, so a test can check that a call
  was never sent.

Run as a script, it serves one of them: `python servers.py <query|chart> <stdio|http> [port]`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import mcp_types as mt
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.tools.base import ToolResult
from mcp.server.mcpserver import MCPServer

from mcpcache.bench.byref import ROWS, query_answer, time_series
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies

SERVE_SCRIPT = Path(__file__).resolve()
PNG = base64.b64encode(bytes(range(256)) * 40).decode()


def digest(rows: Any) -> str:
    """The same digest on either side of a process boundary: canonical JSON, sha256."""
    canonical = json.dumps(rows, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def build_query_server() -> FastMCP:
    server = FastMCP("query-server")

    @server.tool(annotations={"readOnlyHint": True})
    def query(station: str, hours: int = ROWS) -> dict[str, Any]:
        """Hourly temperature and humidity at a station."""
        return query_answer(station, hours)

    @server.tool(output_schema=None)
    def query_json_text(station: str) -> str:
        """The same series, as JSON in one text block."""
        return json.dumps({"station": station, "rows": time_series(station)})

    @server.tool(output_schema=None)
    def report(station: str) -> str:
        """A long plain-text report."""
        return "\n".join(f"{r['t']} {r['station']} {r['temp_c']} C {r['rh_pct']} %" for r in time_series(station))

    @server.tool(output_schema=None)
    def snapshot(station: str) -> ToolResult:
        """A picture of the series (not a real PNG: the bytes do not matter here)."""
        return ToolResult(
            content=[
                mt.TextContent(type="text", text=f"snapshot of {station}"),
                mt.ImageContent(type="image", data=PNG, mime_type="image/png"),
            ]
        )

    @server.tool
    def broken(station: str) -> dict[str, Any]:
        """Always fails, with a long message."""
        raise ToolError(f"station {station} is offline: " + "retrying did not help. " * 400)

    install(server, ToolPolicies({"query": CachePolicy(ttl_ms=60_000)}))
    return server


def build_chart_server() -> MCPServer:
    server = MCPServer("chart-server")
    calls = {"plot": 0}

    @server.tool()
    def plot(data: list[dict[str, Any]], title: str) -> dict[str, Any]:
        """Plot rows of data. Returns how many rows were plotted."""
        calls["plot"] += 1
        return {"title": title, "rows": len(data), "digest": digest(data), "first": data[0] if data else None}

    @server.tool()
    def plot_calls() -> int:
        """How many times plot ran in this server process."""
        return calls["plot"]

    return server


def main(argv: list[str]) -> None:
    which, transport, *rest = argv
    if which == "query":
        query = build_query_server()
        if transport == "stdio":
            query.run(transport="stdio", show_banner=False)
        else:
            query.run(transport="http", host="127.0.0.1", port=int(rest[0]), show_banner=False, log_level="warning")
        return
    chart = build_chart_server()
    if transport == "stdio":
        chart.run("stdio")
    else:
        chart.run("streamable-http", host="127.0.0.1", port=int(rest[0]))


if __name__ == "__main__":
    main(sys.argv[1:])
