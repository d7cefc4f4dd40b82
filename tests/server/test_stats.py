"""What the server half reports about itself: `ServerStats` on both adapters, OpenTelemetry span
attributes, and where validators run (a synchronous one in a worker thread, an async one on the loop).

Real FastMCP and MCP SDK servers, a stock `mcp.Client` over memory streams. The span test runs in a
subprocess, because OpenTelemetry's tracer provider can be set only once per process and the rest of
the suite must not record spans.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import mcp_types as mt
import pytest
from fastmcp import FastMCP
from mcp.server.mcpserver import MCPServer
from support.calls import block_of, call_conditional, call_raw
from support.transports import MODERN, ServerKind, ServerTarget, StockClient, stock_client

from mcpcache.server import CachePolicy, ServerStats, cache_meta, telemetry
from mcpcache.server.fastmcp import install
from mcpcache.server.sdk import RevalidationExtension

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
ANSWER = {"kind": "doc", "text": "first edition", "n": 1}


def connect(server: FastMCP | MCPServer) -> AbstractAsyncContextManager[StockClient]:
    return stock_client("mcp", ServerTarget.memory(server), MODERN)


class Sources:
    """What the tools read, and on which thread each validator ran."""

    def __init__(self) -> None:
        self.validator_threads: dict[str, int] = {}

    def sync_version(self, arguments: Any) -> int:
        self.validator_threads["sync"] = threading.get_ident()
        return 1

    async def async_version(self, arguments: Any) -> int:
        self.validator_threads["async"] = threading.get_ident()
        return 1


def doc() -> dict[str, Any]:
    return dict(ANSWER)


def fails() -> dict[str, Any]:
    raise RuntimeError("the source is gone")


POLICIES = {"doc": CachePolicy(ttl_ms=1000), "fails": CachePolicy()}


def build(kind: ServerKind, sources: Sources, *, raw_tags: bool = True) -> tuple[FastMCP | MCPServer, ServerStats]:
    """`doc` (hashed), `doc_sync` and `doc_async` (validators), `fails`; all declared."""
    validators = {"doc_sync": sources.sync_version, "doc_async": sources.async_version}

    def doc_sync() -> dict[str, Any]:
        return doc()

    def doc_async() -> dict[str, Any]:
        return doc()

    if kind == "fastmcp":
        server = FastMCP("stats")
        for fn in (doc, doc_sync, doc_async, fails):
            server.tool(fn, meta=cache_meta(ttl_ms=1000))
        return server, install(server, validators=validators, raw_tags=raw_tags).stats
    policies = dict(POLICIES) | {name: CachePolicy(validator=v) for name, v in validators.items()}
    extension = RevalidationExtension(policies)
    sdk = MCPServer("stats", extensions=[extension])
    for fn in (doc, doc_sync, doc_async, fails):
        sdk.add_tool(fn)
    return sdk, extension.stats


async def full_then_conditional(client: StockClient, tool: str) -> tuple[mt.CallToolResult, mt.CallToolResult]:
    first = await call_raw(client, tool, {})
    etag = block_of(first).etag  # type: ignore[union-attr]
    return first, await call_conditional(client, tool, {}, etag)


def wire_size(result: mt.CallToolResult) -> int:
    return len(result.model_dump_json(by_alias=True, exclude_none=True))


def saved(answer: mt.CallToolResult, reply: mt.CallToolResult) -> int:
    """What a not-modified reply saved, as the client that received both measures it: the answer as it
    arrived less the reply as it arrived (docs/protocol.md, "Bytes saved")."""
    return wire_size(answer) - wire_size(reply)


@pytest.mark.parametrize("kind", ["fastmcp", "sdk"])
async def test_the_counters_count_each_outcome(kind: ServerKind) -> None:
    sources = Sources()
    server, stats = build(kind, sources, raw_tags=False)
    async with connect(server) as client:
        first, reply = await full_then_conditional(client, "doc")
        await full_then_conditional(client, "doc_sync")
        await full_then_conditional(client, "doc_async")
        failed = await call_raw(client, "fails", {})
    assert block_of(reply).not_modified  # type: ignore[union-attr]
    assert failed.is_error
    # Three full answers stamped; three not-modified replies, two of them before the body ran.
    assert stats == ServerStats(
        stamped=3,
        not_modified=3,
        body_skipped=2,
        conversion_skipped=0,
        errors_passed=1,
        passed_through=0,
        bytes_saved=saved(first, reply),
    )
    assert stats.snapshot() == stats
    assert stats.snapshot() is not stats


async def test_fastmcp_counts_the_conversions_the_raw_tag_skipped() -> None:
    server, stats = build("fastmcp", Sources())
    async with connect(server) as client:
        first, reply = await full_then_conditional(client, "doc")
    assert stats.not_modified == stats.conversion_skipped == 1
    assert stats.body_skipped == 0
    # Measured without building the answer, and still what the answer would have been.
    assert stats.bytes_saved == saved(first, reply)


@pytest.mark.parametrize("kind", ["fastmcp", "sdk"])
async def test_a_synchronous_validator_runs_in_a_worker_thread_and_an_async_one_on_the_loop(kind: ServerKind) -> None:
    sources = Sources()
    server, _ = build(kind, sources)
    loop_thread = threading.get_ident()  # memory streams: the server runs on the test's event loop
    async with connect(server) as client:
        await call_raw(client, "doc_sync", {})
        await call_raw(client, "doc_async", {})
    assert sources.validator_threads["async"] == loop_thread
    assert sources.validator_threads["sync"] != loop_thread


def test_without_a_tracer_the_span_attributes_are_a_no_op() -> None:
    """No tracer provider is configured in the test process: the current span does not record, and
    annotating it neither fails nor records anything."""
    from opentelemetry import trace

    assert not trace.get_current_span().is_recording()
    telemetry.annotate("doc", "not_modified", 10)


SPANS_SCRIPT = """
import json
import anyio
from fastmcp import FastMCP
from mcp.server.mcpserver import MCPServer
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.calls import block_of, call_conditional, call_raw
from support.transports import MODERN, ServerTarget, stock_client
from mcpcache.server import CachePolicy, cache_meta
from mcpcache.server.fastmcp import install
from mcpcache.server.sdk import RevalidationExtension

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

def doc() -> dict:
    return {"kind": "doc", "n": 1}

def versioned() -> dict:
    return {"kind": "doc", "n": 2}

async def main() -> None:
    fast = FastMCP("spans")
    fast.tool(doc, meta=cache_meta(ttl_ms=5))
    fast.tool(versioned, meta=cache_meta(ttl_ms=5))
    install(fast, validators={"versioned": lambda args: 1})
    sdk = MCPServer("spans", extensions=[RevalidationExtension(
        {"doc": CachePolicy(ttl_ms=5), "versioned": CachePolicy(ttl_ms=5, validator=lambda args: 1)})])
    sdk.add_tool(doc)
    sdk.add_tool(versioned)
    for server in (fast, sdk):
        async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
            for tool in ("doc", "versioned"):
                first = await call_raw(client, tool, {})
                reply = await call_conditional(client, tool, {}, block_of(first).etag)
                size = lambda r: len(r.model_dump_json(by_alias=True, exclude_none=True))
                saved.append(size(first) - size(reply))

saved = []
anyio.run(main)
print(json.dumps(saved))
found = [
    {k: v for k, v in span.attributes.items() if k.startswith("mcpcache.")}
    for span in exporter.get_finished_spans()
    if any(k.startswith("mcpcache.") for k in span.attributes)
]
print(json.dumps(found))
"""


def test_outcomes_are_set_on_the_tools_call_span_when_a_tracer_is_configured() -> None:
    pytest.importorskip("opentelemetry.sdk.trace")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run(
        [sys.executable, "-c", SPANS_SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    fast_saved, _, sdk_saved, _ = json.loads(done.stdout.strip().splitlines()[-2])
    doc = {"mcpcache.tool": "doc"}
    versioned = {"mcpcache.tool": "versioned"}
    assert found == [
        # FastMCP: the raw value's tag matched, so the answer was never built.
        doc | {"mcpcache.outcome": "stamped"},
        doc | {"mcpcache.outcome": "conversion_skipped", "mcpcache.bytes_saved": fast_saved},
        versioned | {"mcpcache.outcome": "stamped"},
        versioned | {"mcpcache.outcome": "body_skipped"},  # no size: the body never ran
        # The SDK: the converted answer's tag matched.
        doc | {"mcpcache.outcome": "stamped"},
        doc | {"mcpcache.outcome": "not_modified", "mcpcache.bytes_saved": sdk_saved},
        versioned | {"mcpcache.outcome": "stamped"},
        versioned | {"mcpcache.outcome": "body_skipped"},
    ]
