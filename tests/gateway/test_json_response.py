"""`[gateway] json_response = true`: `mcpcache gateway` answers each request with one JSON body instead of an
event stream (the streamable HTTP transport lets a server choose either; every client must read both), and
callers of both protocol eras still get their answers, stamped and served from the store. With them, the
other serving keys: `http` (uvicorn's parser) and `access_log` (off unless asked for).

The real command in a process of its own, in front of the counting upstream over HTTP; the replies' types
are read from the HTTP responses.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import fastmcp
import mcp
import pytest
from mcp.client.streamable_http import streamable_http_client

from mcpcache.gateway.config import ConfigError, parse_config
from mcpcache.processes import free_port, stop_process, wait_until_listening

from .conftest import served_in_thread
from .counting_server import build_counting_server
from .test_gateway import block_of

pytestmark = pytest.mark.slow

LEGACY_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


def config_text(upstream: str, *, json_response: bool | None, extra: str = "") -> str:
    choice = "" if json_response is None else f"json_response = {str(json_response).lower()}"
    return f"""
[gateway]
{choice}
{extra}

[store]
memory = true

[upstreams.up]
url = "{upstream}"

[upstreams.up.tools.numbered_public]
ttl_ms = 600_000
scope = "public"
"""


@pytest.fixture
def upstream() -> Iterator[str]:
    with served_in_thread(build_counting_server()) as url:
        yield url


@contextlib.contextmanager
def gateway_process(tmp_path: Path, upstream: str, *, json_response: bool | None, extra: str = "") -> Iterator[str]:
    config = tmp_path / "gateway.toml"
    config.write_text(config_text(upstream, json_response=json_response, extra=extra), encoding="utf-8")
    parse_config(config.read_text(encoding="utf-8"))  # a bad file fails here, not as a process that exits
    port = free_port()
    command = [sys.executable, "-m", "mcpcache", "gateway", "--config", str(config), "--port", str(port)]
    with (tmp_path / "gateway.log").open("wb") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            wait_until_listening(process, port, 120.0, "mcpcache gateway")
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            stop_process(process)


def content_type_of_initialize(url: str) -> str:
    request = urllib.request.Request(
        url,
        data=json.dumps(LEGACY_INITIALIZE).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
        return str(response.headers["Content-Type"])


async def read_both_eras(url: str) -> None:
    """Two reads in each era: the second served from the store (the same fetch), both stamped. The era is
    part of the store key (an HTTP upstream speaks each caller's era), so each era fetches once."""
    fetched = []
    async with fastmcp.Client(url) as modern:
        reads = [await modern.call_tool_mcp("numbered_public", {"name": "a"}) for _ in range(2)]
        fetched.append([r.structured_content["fetch"] for r in reads])
        assert all(block_of(r)["etag"] for r in reads)
    async with mcp.Client(streamable_http_client(url), mode="legacy") as legacy:
        again = [await legacy.call_tool("numbered_public", {"name": "a"}) for _ in range(2)]
        assert all(r.structured_content is not None for r in again)
        fetched.append([r.structured_content["fetch"] for r in again])  # type: ignore[index]
        assert all(block_of(r)["etag"] for r in again)
    assert fetched == [[1, 1], [2, 2]]


@pytest.mark.anyio
async def test_json_responses_when_configured_and_answers_in_both_eras(tmp_path: Path, upstream: str) -> None:
    # With the pure-Python parser, which must serve as well as httptools (the default's, below).
    with gateway_process(tmp_path, upstream, json_response=True, extra='http = "h11"') as url:
        assert content_type_of_initialize(url).startswith("application/json")
        await read_both_eras(url)


@pytest.mark.anyio
async def test_event_streams_by_default(tmp_path: Path, upstream: str) -> None:
    with gateway_process(tmp_path, upstream, json_response=None) as url:
        assert content_type_of_initialize(url).startswith("text/event-stream")
        await read_both_eras(url)
    log = (tmp_path / "gateway.log").read_text(encoding="utf-8", errors="replace")
    assert '"POST /mcp HTTP/1.1" 200' not in log, log[-2000:]  # no line per request unless asked for


def test_the_key_takes_a_boolean_only() -> None:
    text = config_text("http://127.0.0.1:1/mcp", json_response=None).replace(
        "[gateway]", '[gateway]\njson_response = "yes"'
    )
    with pytest.raises(ConfigError, match="json_response"):
        parse_config(text)


@pytest.mark.anyio
async def test_a_line_per_request_when_asked(tmp_path: Path, upstream: str) -> None:
    with gateway_process(tmp_path, upstream, json_response=None, extra="access_log = true") as url:
        await read_both_eras(url)
    log = (tmp_path / "gateway.log").read_text(encoding="utf-8", errors="replace")
    assert '"POST /mcp HTTP/1.1" 200' in log, log[-2000:]


@pytest.mark.parametrize(("line", "key"), [('http = "fast"', "http"), ('access_log = "yes"', "access_log")])
def test_the_serving_keys_are_checked(line: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_config(config_text("http://127.0.0.1:1/mcp", json_response=None, extra=line))
