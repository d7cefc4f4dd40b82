"""What the server half reports about delta replies: the counters (`deltas_sent`, `deltas_declined`,
`bytes_saved`) on both adapters, and `mcpcache.outcome = "delta"` on the `tools/call` span. The span test
runs in a subprocess: OpenTelemetry's tracer provider can be set only once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.transports import MODERN, ServerKind, ServerTarget, stock_client

from mcpcache.delta import FORMAT
from mcpcache.protocol import conditional_request_meta, parse_cache_block
from server.notes import build

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["fastmcp", "sdk"])
async def test_the_counters_count_deltas_sent_and_declined(kind: ServerKind) -> None:
    server, layer = build(kind)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        held = await client.call_tool("notes", {"key": "s"})
        etag = parse_cache_block(held.meta).etag  # type: ignore[union-attr]
        await client.call_tool("edit_notes", {"key": "s", "index": 1, "text": "x"})
        meta = conditional_request_meta(etag, accept_delta=[FORMAT])  # type: ignore[arg-type]
        await client.call_tool("notes", {"key": "s"}, meta=meta)  # type: ignore[arg-type]
        await client.call_tool("notes", {"key": "s"}, meta=conditional_request_meta('W/"0"', accept_delta=[FORMAT]))  # type: ignore[arg-type]
    stats = layer.stats
    assert (stats.stamped, stats.deltas_declined, stats.deltas_sent, stats.not_modified) == (2, 1, 1, 0)
    assert stats.bytes_saved > 20_000  # the two ~12 kB copies of the notes (text and structured), less the delta


SPANS_SCRIPT = """
import json
import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.transports import MODERN, ServerTarget, stock_client
from mcpcache.delta import FORMAT
from mcpcache.protocol import conditional_request_meta, parse_cache_block
from server.notes import build

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

async def main() -> None:
    for kind in ("fastmcp", "sdk"):
        server, _ = build(kind)
        async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
            held = await client.call_tool("notes", {"key": "s"})
            await client.call_tool("edit_notes", {"key": "s", "index": 1, "text": "x"})
            meta = conditional_request_meta(parse_cache_block(held.meta).etag, accept_delta=[FORMAT])
            await client.call_tool("notes", {"key": "s"}, meta=meta)

anyio.run(main)
print(json.dumps([
    {k: v for k, v in span.attributes.items() if k.startswith("mcpcache.")}
    for span in exporter.get_finished_spans()
    if any(k.startswith("mcpcache.") for k in span.attributes)
]))
"""


@pytest.mark.slow
def test_a_delta_reply_is_on_the_tools_call_span() -> None:
    pytest.importorskip("opentelemetry.sdk.trace")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run(
        [sys.executable, "-c", SPANS_SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    outcomes = [(span["mcpcache.tool"], span["mcpcache.outcome"]) for span in found]
    assert outcomes == [("notes", "stamped"), ("notes", "delta")] * 2
    assert all(span["mcpcache.bytes_saved"] > 20_000 for span in found if span["mcpcache.outcome"] == "delta")
