"""The issue's "done when": a 240-row time series goes from one MCP server to another by reference.

- The query server (FastMCP, in process over memory streams) answers `query` with the series.
- The chart server (the SDK's MCPServer) has `plot(data: list[dict], title: str)`; it runs in process,
  as a stdio subprocess, or as a streamable-HTTP subprocess.
- A scripted model stands in for the LLM. It only ever sees what a model would see (the text of the tool
  messages and the augmented tool schemas), finds the reference there, and writes the next call.
- One `ToolCache` wraps both clients, and `call_for_model` on each wrapper both caches and references.

Checked: the chart server got exactly the 240 rows; the model wrote only a URI (its arguments cost a few
dozen o200k tokens against thousands inline); an evicted reference gets the model the error envelope and
the tool is not called; following the envelope's hint (calling the source again) recovers.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import fastmcp
import jsonschema  # type: ignore[import-untyped]
import mcp
import pytest
from mcp.client._memory import InMemoryTransport
from support.transports import http_servers

from mcpcache.client import ToolCache
from mcpcache.refs import References, call_for_model, with_uri_arguments
from mcpcache.stores import SQLiteStore
from mcpcache.tokens import count_tokens

from .servers import SERVE_SCRIPT, build_chart_server, build_query_server, digest, time_series

pytestmark = pytest.mark.anyio

REFERENCE_IN_MARKER = re.compile(
    r"""\((?P<name>"(?:[^"\\]|\\.)*")\): .*? give "(?P<uri>mcp\+cache://[^"]+)" as X_uri"""
)


class ScriptedModel:
    """What an LLM does with a large result, scripted: read the tool message, pass the rows on by reference.

    It reads only text and schemas. A marker naming the member `rows` gives the reference to use; with no
    marker (the view was not shortened) it addresses `rows` inside `_cache_uri` with a JSON pointer, as
    the `data_uri` description in the augmented schema tells it to.
    """

    def __init__(self, tools: dict[str, dict[str, Any]]) -> None:
        self.tools = {name: with_uri_arguments(schema) for name, schema in tools.items()}
        self.written: list[str] = []
        """The JSON of every tool-call argument object the model wrote: what it paid output tokens for."""

    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        jsonschema.validate(arguments, self.tools[tool])  # the model writes only calls the schema allows
        self.written.append(json.dumps(arguments))
        return tool, arguments

    def plot_from(self, tool_message: str) -> tuple[str, dict[str, Any]]:
        assert "data_uri" in self.tools["plot"]["properties"]
        message = json.loads(tool_message)
        for value in message.values():  # a model reads the message, markers included, as text
            for found in REFERENCE_IN_MARKER.finditer(value if isinstance(value, str) else ""):
                if json.loads(found["name"]) == "rows":
                    return self.call("plot", {"data_uri": found["uri"], "title": "KSLC, 10 days"})
        return self.call("plot", {"data_uri": message["_cache_uri"] + "#/rows", "title": "KSLC, 10 days"})


@contextlib.asynccontextmanager
async def chart_client(transport: str) -> AsyncIterator[mcp.Client]:
    if transport == "memory":
        async with mcp.Client(InMemoryTransport(build_chart_server())) as client:
            yield client
    elif transport == "stdio":
        params = mcp.StdioServerParameters(command=sys.executable, args=[str(SERVE_SCRIPT), "chart", "stdio"])
        async with mcp.Client(params) as client:
            yield client
    else:
        with http_servers([[sys.executable, str(SERVE_SCRIPT), "chart", "http"]]) as [url]:
            async with mcp.Client(url) as client:
                yield client


async def tool_schemas(*clients: Any) -> dict[str, dict[str, Any]]:
    schemas: dict[str, dict[str, Any]] = {}
    for client in clients:
        listed = await client.list_tools()
        for tool in listed if isinstance(listed, list) else listed.tools:
            schemas[tool.name] = tool.input_schema
    return schemas


async def plot_calls(chart: Any) -> int:
    result = await chart.call_tool("plot_calls", {}, cache_mode="bypass")
    return int(result.structured_content["result"])


@pytest.mark.slow
@pytest.mark.parametrize("max_view_bytes", [None, 4096], ids=["full view", "shortened view"])
@pytest.mark.parametrize("transport", ["memory", "stdio", "http"])
async def test_the_series_moves_between_two_servers_by_reference(
    transport: str, max_view_bytes: int | None, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "mcpcache.db")  # one file for the tool cache and the references
    cache = ToolCache(store)
    refs = References(store, conversation_id="conv-42", threshold_bytes=4096, max_view_bytes=max_view_bytes)
    rows = time_series()
    async with fastmcp.Client(build_query_server()) as query_client, chart_client(transport) as chart_client_:
        query, chart = cache.wrap(query_client), cache.wrap(chart_client_)
        model = ScriptedModel(await tool_schemas(query_client, chart_client_))

        # 1. The model asks for the data; the host stores it and shows the model a view with a reference.
        asked = await call_for_model(query, "query", {"station": "KSLC"}, references=refs)
        assert asked.called
        assert asked.view is not None
        assert asked.view.uri is not None
        tool_message = json.dumps(asked.envelope)
        if max_view_bytes is not None:
            assert len(tool_message.encode()) <= max_view_bytes
            assert rows[0]["t"] not in tool_message  # the rows are behind a marker, not cut into a prefix
            assert asked.view.shortened == ["/rows"]

        # 2. The model passes the rows on by reference; the host resolves them before dispatch.
        tool, arguments = model.plot_from(tool_message)
        before = await plot_calls(chart)
        plotted = await call_for_model(chart, tool, arguments, references=refs)
        assert plotted.called
        assert plotted.resolution.resolved == {"data": [arguments["data_uri"]]}
        assert plotted.envelope["rows"] == 240
        assert plotted.envelope["digest"] == digest(rows)
        assert plotted.envelope["first"] == rows[0]
        assert await plot_calls(chart) == before + 1

        # 3. What the model wrote: the URI, not the rows.
        written = count_tokens(model.written[-1]).count
        inline = count_tokens(json.dumps({"data": rows, "title": arguments["title"]})).count
        assert written < 60
        assert written <= inline / 100

        # 4. The same object caches: asking again is a fresh hit, with a new reference to the same data.
        again = await call_for_model(query, "query", {"station": "KSLC"}, references=refs)
        assert again.outcome is not None
        assert again.outcome.status == "fresh_hit"
        assert again.view is not None
        assert again.view.uri != asked.view.uri
        assert await refs.load(again.view.uri.at("/rows")) == rows

        # 5. Evicted: the model gets the error envelope, and the chart server is not called.
        await refs.clear_conversation()
        calls_before = await plot_calls(chart)
        refused = await call_for_model(chart, tool, arguments, references=refs)
        assert not refused.called
        assert refused.outcome is None
        assert refused.view is None
        error = refused.envelope
        assert error["error"].startswith("invalid_args: plot was not called")
        [missing] = error["_missing_uris"]
        assert missing["argument"] == "data_uri"
        assert missing["uri"] == arguments["data_uri"]
        assert missing["reason"] == "evicted"
        assert missing["source"]["tool"] == "query"
        assert missing["source"]["arguments"] == {"station": "KSLC"}
        assert "Call query again" in error["fix_hint"]
        assert await plot_calls(chart) == calls_before

        # 6. The model follows the hint: call the source again, pass the fresh reference.
        source = missing["source"]
        fresh = await call_for_model(query, source["tool"], source["arguments"], references=refs)
        tool, arguments = model.plot_from(json.dumps(fresh.envelope))
        healed = await call_for_model(chart, tool, arguments, references=refs)
        assert healed.called
        assert healed.envelope["digest"] == digest(rows)
    await store.close()


async def test_an_inline_and_a_referenced_argument_together_report_the_override(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "mcpcache.db")
    cache = ToolCache(store)
    refs = References(store, conversation_id="conv-42")
    async with fastmcp.Client(build_query_server()) as q, mcp.Client(InMemoryTransport(build_chart_server())) as c:
        query, chart = cache.wrap(q), cache.wrap(c)
        asked = await call_for_model(query, "query", {"station": "KSLC"}, references=refs)
        uri = asked.envelope["_cache_uri"] + "#/rows"
        plotted = await call_for_model(
            chart, "plot", {"data": [{"t": "made up"}], "data_uri": uri, "title": "t"}, references=refs
        )
        assert plotted.envelope["rows"] == 240
        assert plotted.envelope["_overridden"] == ["data"]
    await store.close()
