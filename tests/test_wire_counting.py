"""The transport byte counter the benchmarks rely on (mcpcache.wire_count)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import anyio
import fastmcp
import mcp
import mcp_types as mt
import pytest
from fastmcp.client.transports import FastMCPTransport
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.message import SessionMessage

from mcpcache.bench.wire import CountingFastMCPTransport
from mcpcache.demo.notebooks import generate_notebook
from mcpcache.demo.server import build_demo_server
from mcpcache.protocol import META_KEY
from mcpcache.wire_count import CountingTransport, WireLog, message_bytes, summarize


@pytest.mark.parametrize(
    "payload",
    [
        {"text": "plain"},
        {"text": "non-ASCII: café, 東京, emoji \U0001f600", "n": 1.5e-7, "big": 12345678901234567890},
        {"text": 'escapes: "quote" \\ back \n newline \t tab \u2028 \x00', "nested": [[{}], [1, 2.0, True, None]]},
    ],
)
def test_a_received_message_counts_the_bytes_the_server_wrote(payload: dict[str, Any]) -> None:
    # The server frames a message as model_dump_json + "\n"; the client parses that line and we count
    # it by serialising the parsed message again. The two must agree to the byte.
    sent = mt.JSONRPCResponse(jsonrpc="2.0", id=7, result={"content": [payload], "_meta": {META_KEY: {"ttlMs": 1}}})
    line = sent.model_dump_json(by_alias=True, exclude_unset=True)
    parsed = mt.jsonrpc_message_adapter.validate_json(line, by_name=False)
    assert message_bytes(SessionMessage(parsed)) == len(line.encode("utf-8")) + 1


@pytest.mark.anyio
async def test_the_log_separates_a_full_answer_from_a_not_modified_reply(tmp_path: Path) -> None:
    generate_notebook(tmp_path / "a.ipynb", 20, seed=4)
    log = WireLog()
    transport = CountingFastMCPTransport(FastMCPTransport(build_demo_server(tmp_path)), log)
    async with fastmcp.Client(transport) as client:
        start = log.mark()
        full = await client.call_tool_mcp("read_notebook", {"path": "a.ipynb"})
        middle = log.mark()
        etag = (full.meta or {})[META_KEY]["etag"]
        again = await client.call_tool_mcp("read_notebook", {"path": "a.ipynb"}, meta={META_KEY: {"etag": etag}})
    assert again.structured_content == {"kind": "notebook.read"}

    request, reply = log.exchange("tools/call", since=start)
    assert (request.direction, reply.direction) == ("sent", "received")
    assert request.request_id == reply.request_id
    # The full answer carries the notebook twice (text content and structuredContent).
    assert isinstance(full.content[0], mt.TextContent)
    assert reply.nbytes > 2 * len(full.content[0].text)

    cond_request, cond_reply = log.exchange("tools/call", since=middle)
    assert cond_reply.nbytes < 400
    assert cond_request.nbytes > request.nbytes, "the conditional request carries the tag"
    assert summarize(log.since(middle)) == {"sent": cond_request.nbytes, "received": cond_reply.nbytes}
    assert log.total() == log.total("sent") + log.total("received")
    assert {r.method for r in log.records if r.kind == "request"} >= {"tools/call"}


@pytest.fixture
def quiet() -> Iterator[TextIO]:
    with open(os.devnull, "w") as sink:
        yield sink


@pytest.mark.anyio
@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tee") is None, reason="needs bash and tee")
async def test_counts_match_the_bytes_on_a_real_stdio_pipe(tmp_path: Path, quiet: TextIO) -> None:
    # tee copies both pipes of a real stdio server to files: the byte counts of record.
    generate_notebook(tmp_path / "a.ipynb", 10, seed=5)
    to_server, from_server = tmp_path / "to-server.bytes", tmp_path / "from-server.bytes"
    server = shlex.join([sys.executable, "-m", "mcpcache", "demo-server", "--dir", str(tmp_path)])
    pipeline = f"tee {shlex.quote(str(to_server))} | {server} | tee {shlex.quote(str(from_server))}"
    log = WireLog()
    params = StdioServerParameters(command="bash", args=["-c", pipeline])
    async with mcp.Client(CountingTransport(stdio_client(params, quiet), log)) as client:
        full = await client.call_tool("read_notebook", {"path": "a.ipynb"})
        etag = (full.meta or {})[META_KEY]["etag"]
        await client.call_tool("read_notebook", {"path": "a.ipynb"}, meta={META_KEY: {"etag": etag}})
    # The last tee may still be flushing when the client has closed the pipeline.
    for _ in range(200):
        if from_server.stat().st_size >= log.total("received"):
            break
        await anyio.sleep(0.05)
    assert log.total("sent") == to_server.stat().st_size
    assert log.total("received") == from_server.stat().st_size


def test_exchange_names_what_is_missing() -> None:
    with pytest.raises(LookupError, match="no tools/call request"):
        WireLog().exchange("tools/call")
