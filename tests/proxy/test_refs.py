"""`mcpcache proxy --refs`: the host's model sees large results as views with a reference, every tool it
is shown takes `X_uri` beside `X`, and the references it passes are resolved before the call goes upstream.

Within one server: `rows` answers 240 rows, `summarize` takes them back by reference, and the digest it
answers shows that exactly those rows arrived. Across servers: a second proxy that shares the first one's
store and conversation id, in front of another server, resolves the first one's references.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types as mt
import pytest
from refs.servers import digest

from mcpcache.bench.byref import ROWS, time_series
from mcpcache.bench.relay import counting_relay

from .conftest import Upstreams
from .hosts import mcp_host, proxy_args
from .test_revalidation import _port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _envelope(result: mt.CallToolResult) -> dict[str, Any]:
    """The tool message the model reads: the text block, which is the structured content as JSON."""
    assert len(result.content) == 1
    assert isinstance(result.content[0], mt.TextContent)
    envelope: dict[str, Any] = json.loads(result.content[0].text)
    assert result.structured_content == envelope
    return envelope


async def test_a_model_passes_240_rows_to_another_tool_of_the_server_and_to_another_server_by_reference(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    async with counting_relay(_port(upstreams.tests)) as (port, traffic):
        shared = ("--refs", "--conversation", "conv-42", "--store", str(tmp_path / "shared.db"))
        rows_proxy = proxy_args(*shared, "--url", f"http://127.0.0.1:{port}/mcp")
        chart_proxy = proxy_args(*shared, "--url", upstreams.chart)
        async with mcp_host(rows_proxy) as host, mcp_host(chart_proxy) as chart:
            tools = {tool.name: tool for tool in (await host.list_tools()).tools}
            summarize = tools["summarize"].input_schema
            assert set(summarize["properties"]) == {"data", "data_uri", "title"}
            assert summarize["required"] == ["title"]
            assert all(tool.output_schema is None for tool in tools.values())
            assert "hours_uri" not in tools["rows"].input_schema["properties"]  # nothing bulky to pass there

            # The model's view of 240 rows: the rows replaced by a marker that says how to pass them on.
            viewed = await host.call_tool("rows", {"station": "KSLC"})
            view = _envelope(viewed)
            uri = view["_cache_uri"]
            assert uri.startswith("mcp+cache://conv-42/")
            assert view["station"] == "KSLC"
            assert view["rows"].startswith(f"<elided list of {ROWS} items")
            assert f'"{uri}#/rows" as X_uri' in view["rows"]
            assert len(viewed.content[0].text) < 4096  # type: ignore[union-attr]

            # Asked again within its freshness: a new view of the stored answer, nothing upstream.
            before = traffic.snapshot()
            again = _envelope(await host.call_tool("rows", {"station": "KSLC"}))
            assert traffic.since(before).total() == 0
            assert again["rows"].startswith(f"<elided list of {ROWS} items")

            # The model passes the rows by reference; the upstream gets the rows themselves.
            summary = await host.call_tool("summarize", {"data_uri": f"{uri}#/rows", "title": "KSLC"})
            assert not summary.is_error
            assert summary.structured_content == {"title": "KSLC", "count": ROWS, "digest": digest(time_series())}

            # A reference that resolves to nothing: the call is not sent, the model is told why.
            missing = "mcp+cache://conv-42/AAAAAAAAAAA"
            refused = await host.call_tool("summarize", {"data_uri": missing, "title": "KSLC"})
            assert refused.is_error
            envelope = _envelope(refused)
            assert envelope["error"].startswith("invalid_args: summarize was not called")
            assert [(m["argument"], m["uri"], m["reason"]) for m in envelope["_missing_uris"]] == [
                ("data_uri", missing, "unknown")
            ]
            assert "fix_hint" in envelope
            runs = await host.call_tool("runs_of", {"key": "summarize"})
            assert runs.structured_content == {"result": 1}

            # Another server, behind a proxy that shares this one's store and conversation id, is passed the
            # same rows by the same reference.
            plot = (await chart.list_tools()).tools[0]
            assert plot.name == "plot"
            assert "data_uri" in plot.input_schema["properties"]
            plotted = await chart.call_tool("plot", {"data_uri": f"{uri}#/rows", "title": "KSLC"})
            assert not plotted.is_error
            answer = plotted.structured_content
            assert answer is not None
            assert (answer["rows"], answer["digest"]) == (ROWS, digest(time_series()))
