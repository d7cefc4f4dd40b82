"""The gateway's counters, with the real OpenTelemetry SDK: what its callers got, what that saved them, what
came from the upstream, and its partitions' own client counters; on every store.

The gateway (the real FastMCP proxy and middleware) over an upstream in this process that has never heard
of mcpcache, a `ToolCache` caller over memory streams. Providers are passed in, never set globally.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import fastmcp
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from stores.backends import FakeClock
from support.metrics import sums

from mcpcache.client import ToolCache
from mcpcache.gateway.config import ToolSettings
from mcpcache.sizes import result_bytes
from mcpcache.stores import MemoryStore, RedisStore, SQLiteStore
from mcpcache.stores.base import Store

from .conftest import gateway_over

pytestmark = pytest.mark.anyio

TTL_MS = 60_000
LINES = [f'line {n}: "quoted", back\\slashed' for n in range(50)]


def upstream() -> fastmcp.FastMCP[Any]:
    server: fastmcp.FastMCP[Any] = fastmcp.FastMCP("plain")

    @server.tool
    def notes() -> dict[str, Any]:
        return {"kind": "notes", "lines": LINES}

    return server


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    opened: Store
    if request.param == "memory":
        opened = MemoryStore()
    elif request.param == "sqlite":
        opened = SQLiteStore(tmp_path / "gateway.db")
    else:
        opened = RedisStore(request.getfixturevalue("redis_url"), namespace="gw-" + secrets.token_hex(4))
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def providers() -> Iterator[tuple[InMemoryMetricReader, MeterProvider, InMemorySpanExporter, TracerProvider]]:
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    yield reader, meter_provider, spans, tracer_provider
    meter_provider.shutdown()
    tracer_provider.shutdown()


async def test_the_gateway_counts_what_its_callers_got_and_what_it_saved_them(
    store: Store, providers: tuple[InMemoryMetricReader, MeterProvider, InMemorySpanExporter, TracerProvider]
) -> None:
    reader, meter_provider, spans, tracer_provider = providers
    gateway = gateway_over(
        upstream(),
        {"notes": ToolSettings(ttl_ms=TTL_MS, scope="public")},
        store=store,
        meter_provider=meter_provider,
        tracer_provider=tracer_provider,
    )
    clock = FakeClock()
    caller_reader = InMemoryMetricReader()
    caller_provider = MeterProvider(metric_readers=[caller_reader])
    try:
        async with fastmcp.Client(gateway) as client:
            cache = ToolCache(MemoryStore(clock=clock), clock=clock, meter_provider=caller_provider)
            view = cache.wrap(client, server_id="gateway")
            first = await view.call_mcp("notes", {})
            clock.advance(TTL_MS / 1000 + 1)  # stale for the caller; still fresh in the gateway's store
            again = await view.call_mcp("notes", {})
    finally:
        caller_provider.shutdown()
    assert (first.outcome.status, again.outcome.status) == ("miss", "revalidated")
    where = {"mcpcache.upstream": "up", "mcpcache.tool": "notes"}

    def key(**more: Any) -> tuple[tuple[str, Any], ...]:
        return tuple(sorted({**where, **more}.items()))

    assert sums(reader, "mcpcache.gateway.calls") == {
        key(**{"mcpcache.outcome": o}): 1 for o in ("full", "not_modified")
    }
    # What the not-modified reply saved the caller, as the caller itself counts it.
    assert sums(reader, "mcpcache.gateway.saved") == {
        key(**{"mcpcache.outcome": "not_modified"}): again.outcome.bytes_saved
    }
    assert again.outcome.bytes_saved > 2 * sum(len(line) for line in LINES)
    assert sums(caller_reader, "mcpcache.client.saved") == {
        (("mcpcache.outcome", "revalidated"), ("mcpcache.server", "gateway"), ("mcpcache.tool", "notes")): (
            again.outcome.bytes_saved
        )
    }
    # One answer came from the upstream, whole; the second call was the gateway's fresh hit.
    async with fastmcp.Client(upstream()) as direct:
        # As the upstream's SDK writes it, less the serverInfo it adds to every result's _meta on the way out.
        sent = (await direct.call_tool_mcp("notes", {})).model_copy(update={"meta": None})
    assert sums(reader, "mcpcache.gateway.upstream.received") == {key(): result_bytes(sent)}
    # The gateway's partition cache counts as any client does, naming the upstream by its identity.
    client_calls = sums(reader, "mcpcache.client.calls")
    assert {dict(k)["mcpcache.outcome"]: v for k, v in client_calls.items()} == {"miss": 1, "fresh_hit": 1}
    assert {dict(k)["mcpcache.server"] for k in client_calls} == {"test:upstream"}
    # No tracer provider is set globally, so FastMCP's own server span does not record: each partition
    # cache call has a span of its own.
    assert [span.name for span in spans.get_finished_spans()] == ["mcpcache tools/call notes"] * 2


async def test_without_a_meter_provider_the_gateway_counts_nothing_and_serves_alike(store: Store) -> None:
    gateway = gateway_over(upstream(), {"notes": ToolSettings(ttl_ms=TTL_MS, scope="public")}, store=store)
    async with fastmcp.Client(gateway) as client:
        assert (await client.call_tool_mcp("notes", {})).structured_content == {"kind": "notes", "lines": LINES}
