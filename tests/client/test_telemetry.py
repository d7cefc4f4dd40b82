"""The client's spans and metrics, with the real OpenTelemetry SDK (docs/observability.md).

Providers are passed to each `ToolCache`, never set globally, so nothing leaks into other tests run in the
same process. A caller's span is opened with a tracer of the test's own provider: which span is current is
OpenTelemetry's context, whatever provider made it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import FastMCP
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from stores.backends import Backend
from support.metrics import sums
from support.transports import MODERN, ServerTarget, stock_client

from mcpcache.client import ToolCache
from mcpcache.server import cache_meta
from mcpcache.server.fastmcp import install
from mcpcache.stores import MemoryStore, Store
from mcpcache.telemetry import OTHER, Labels, Meters, Tracing

from .harness import FakeClock, connect

pytestmark = pytest.mark.anyio

TTL_S = 0.3


@dataclass
class Otel:
    """An SDK tracer provider and meter provider that keep what they record in memory."""

    spans: InMemorySpanExporter
    tracer_provider: TracerProvider
    reader: InMemoryMetricReader
    meter_provider: MeterProvider

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> dict[tuple[tuple[str, Any], ...], int]:
        """The metric's sums by their attributes (sorted)."""
        return sums(self.reader, name)

    def total(self, name: str, **match: Any) -> int:
        return sum(
            value
            for attributes, value in self.points(name).items()
            if all(dict(attributes).get(key) == want for key, want in match.items())
        )


@pytest.fixture
def otel() -> Iterator[Otel]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(spans, tracer_provider, reader, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def notes_server() -> FastMCP:
    server = FastMCP("notes")

    @server.tool(meta=cache_meta(ttl_ms=int(TTL_S * 1000)))
    def notes(key: str) -> dict[str, Any]:
        return {"kind": "notes", "key": key, "lines": [f'line {n}: "quoted" \\ text' for n in range(40)]}

    install(server)
    return server


def cache_on(store: Store, otel: Otel, clock: Any) -> ToolCache:
    return ToolCache(store, clock=clock, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)


async def expire(backend: Backend) -> None:
    """Past the answer's freshness, on the store's clock."""
    if backend.clock is not None:
        backend.clock.advance(TTL_S + 1)
    else:
        await anyio.sleep(TTL_S + 0.2)


async def test_outside_any_span_each_call_gets_one_span_of_the_caches_own(
    backend: Backend, opened: Store, otel: Otel
) -> None:
    cache = cache_on(opened, otel, backend.now)
    async with connect("mcp", ServerTarget.memory(notes_server()), MODERN, cache, server_id="notes") as conn:
        miss = await conn.call("notes", {"key": "a"})
        hit = await conn.call("notes", {"key": "a"})
    assert (miss.outcome.status, hit.outcome.status) == ("miss", "fresh_hit")
    spans = otel.finished()
    assert [span.name for span in spans] == ["mcpcache tools/call notes"] * 2
    assert all(span.kind is SpanKind.INTERNAL for span in spans)
    assert [span.attributes["mcpcache.client.outcome"] for span in spans] == ["miss", "fresh_hit"]  # type: ignore[index]
    assert spans[1].attributes["mcpcache.client.bytes_saved"] == hit.outcome.bytes_saved > 0  # type: ignore[index]
    assert spans[1].attributes["mcpcache.client.server"] == "notes"  # type: ignore[index]
    assert all(span.parent is None for span in spans)  # the SDK's own spans do not record: no provider of theirs


async def test_under_a_callers_span_the_cache_opens_none_of_its_own(otel: Otel) -> None:
    clock = FakeClock()
    cache = cache_on(MemoryStore(clock=clock), otel, clock)
    tracer = otel.tracer_provider.get_tracer("the app")
    async with connect("mcp", ServerTarget.memory(notes_server()), MODERN, cache, server_id="notes") as conn:
        with tracer.start_as_current_span("the app's work"):
            await conn.call("notes", {"key": "a"})
            await conn.call("notes", {"key": "a"})
    (span,) = otel.finished()
    assert span.name == "the app's work"
    assert span.attributes["mcpcache.client.outcome"] == "fresh_hit"  # type: ignore[index]  # the last call wins
    assert [(event.name, event.attributes["mcpcache.client.outcome"]) for event in span.events] == [  # type: ignore[index]
        ("mcpcache.client.tool_call", "miss"),
        ("mcpcache.client.tool_call", "fresh_hit"),
    ]


async def test_a_call_that_fails_ends_its_span_as_an_error(otel: Otel) -> None:
    clock = FakeClock()
    cache = cache_on(MemoryStore(clock=clock), otel, clock)
    async with connect("mcp", ServerTarget.memory(notes_server()), MODERN, cache, server_id="notes") as conn:
        with pytest.raises(ValueError, match="cache mode"):
            await conn.call("notes", {"key": "a"}, cache_mode="sometimes")
    (span,) = otel.finished()
    assert not span.status.is_ok
    assert [event.name for event in span.events] == ["exception"]


async def test_the_counters_count_each_outcome_and_the_bytes_saved(backend: Backend, opened: Store, otel: Otel) -> None:
    cache = cache_on(opened, otel, backend.now)
    async with connect("mcp", ServerTarget.memory(notes_server()), MODERN, cache, server_id="notes") as conn:
        outcomes = [(await conn.call("notes", {"key": "a"})).outcome for _ in range(2)]
        await expire(backend)
        outcomes.append((await conn.call("notes", {"key": "a"})).outcome)
    assert [outcome.status for outcome in outcomes] == ["miss", "fresh_hit", "revalidated"]
    where = {"mcpcache.server": "notes", "mcpcache.tool": "notes"}
    calls = otel.points("mcpcache.client.calls")
    assert calls == {
        tuple(sorted({**where, "mcpcache.outcome": status, "mcpcache.coalesced": False}.items())): 1
        for status in ("miss", "fresh_hit", "revalidated")
    }
    saved = otel.points("mcpcache.client.saved")
    assert saved == {
        tuple(sorted({**where, "mcpcache.outcome": outcome.status}.items())): outcome.bytes_saved
        for outcome in outcomes[1:]
    }
    assert otel.total("mcpcache.client.saved") == cache.stats.bytes_saved


async def test_over_streamable_http_the_server_is_named_without_its_credentials(
    twin_urls: dict[str, str], otel: Otel
) -> None:
    clock = FakeClock()
    cache = cache_on(MemoryStore(clock=clock), otel, clock)
    url = twin_urls["A"].replace("http://", "http://reader:s3cret@") + "?token=s3cret"
    async with stock_client("fastmcp", ServerTarget.http("fastmcp", url), MODERN) as client:
        view = cache.wrap(client)  # named by its URL, as any fastmcp.Client of a URL is
        assert (await view.call_mcp("whoami", {})).outcome.status == "miss"
        assert (await view.call_mcp("whoami", {})).outcome.status == "fresh_hit"
    (label,) = {dict(attributes)["mcpcache.server"] for attributes in otel.points("mcpcache.client.calls")}
    assert label == twin_urls["A"]
    assert all("s3cret" not in str(span.attributes) for span in otel.finished())
    assert otel.total("mcpcache.client.calls", **{"mcpcache.outcome": "fresh_hit"}) == 1


class FailingStore(MemoryStore):
    """A real memory store whose saves raise, as a full disk would."""

    async def save(self, key: str, item: Any) -> bool:
        raise OSError("no space left on device")


async def test_store_failures_are_counted_by_store(otel: Otel) -> None:
    clock = FakeClock()
    cache = cache_on(FailingStore(clock=clock), otel, clock)
    async with connect("mcp", ServerTarget.memory(notes_server()), MODERN, cache, server_id="notes") as conn:
        await conn.call("notes", {"key": "a"})
        await conn.call("notes", {"key": "b"})
        await cache.flush()
    assert cache.stats.store_failures >= 1
    assert otel.points("mcpcache.client.store_failures") == {
        (("mcpcache.store", "FailingStore"),): cache.stats.store_failures
    }


async def test_without_providers_nothing_is_recorded_and_nothing_fails() -> None:
    """No global provider is set in the test process: the cache finds no tracer and no meter."""
    assert Tracing().tracer() is None
    assert Meters(lambda meter: meter).get() is None
    clock = FakeClock()
    cache = ToolCache(MemoryStore(clock=clock), clock=clock)
    async with connect("mcp", ServerTarget.memory(notes_server()), MODERN, cache, server_id="notes") as conn:
        assert (await conn.call("notes", {"key": "a"})).outcome.status == "miss"
        assert (await conn.call("notes", {"key": "a"})).outcome.status == "fresh_hit"


def test_peer_named_labels_are_bounded() -> None:
    labels = Labels(limit=3)
    assert [labels(name) for name in ("a", "b", "a", "c", "d", "e", "b")] == ["a", "b", "a", "c", OTHER, OTHER, "b"]


GLOBAL_SCRIPT = """
import json
import anyio
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.transports import MODERN, ServerTarget, stock_client
from client.test_telemetry import notes_server
from mcpcache.client import ToolCache
from mcpcache.stores import MemoryStore

async def main() -> list[str]:
    now = lambda: 1_750_000_000.0  # time stands still: the second call is a fresh hit however slow this is
    cache = ToolCache(MemoryStore(clock=now), clock=now)  # made before any provider is set
    outcomes = []
    async with stock_client("mcp", ServerTarget.memory(notes_server()), MODERN) as client:
        view = cache.wrap(client, server_id="notes")
        outcomes.append((await view.call("notes", {"key": "a"})).outcome.status)  # no provider yet
        spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        trace.set_tracer_provider(provider)
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        outcomes.append((await view.call("notes", {"key": "a"})).outcome.status)
    names = [span.name for span in spans.get_finished_spans() if span.name.startswith("mcpcache")]
    counted = {
        point.attributes["mcpcache.outcome"]: point.value
        for metric in reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
        if metric.name == "mcpcache.client.calls"
        for point in metric.data.data_points
    }
    return [outcomes, names, counted]

print(json.dumps(anyio.run(main)))
"""


def test_the_global_providers_are_used_once_the_application_sets_them() -> None:
    """In a process of its own: OpenTelemetry's global providers can be set only once per process."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")])}
    done = subprocess.run(
        [sys.executable, "-c", GLOBAL_SCRIPT], env=env, cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes, names, counted = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcomes == ["miss", "fresh_hit"]
    assert names == ["mcpcache tools/call notes"]  # the fresh hit, once a provider was there to record it
    assert counted == {"fresh_hit": 1}
