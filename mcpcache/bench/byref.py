"""The by-reference scenario: a model moves a 240-row time series from a query tool into a chart tool.

Inline, the model writes every row back out as tool-call arguments; by reference it writes one
`mcp+cache://` URI. What is counted is what a model pays: o200k tokens (and bytes) of the arguments it
must write, and of the tool result it must read (the whole result, or the view whose rows became a
named marker). Also the time to resolve a large referenced payload from the embedded store.
"""

from __future__ import annotations

import datetime as dt
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from mcpcache.refs import References
from mcpcache.stores import MemoryStore, SQLiteStore
from mcpcache.tokens import count_tokens

ROWS = 240


def time_series(rows: int = ROWS, seed: int = 42) -> dict[str, Any]:
    """A weather station's readings every 15 minutes: the answer of a query tool."""
    rng = random.Random(seed)
    start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    series = []
    temperature, humidity = 8.0, 70.0
    for i in range(rows):
        temperature += rng.uniform(-0.4, 0.4)
        humidity = min(100.0, max(20.0, humidity + rng.uniform(-1.5, 1.5)))
        series.append(
            {
                "time": (start + dt.timedelta(minutes=15 * i)).isoformat().replace("+00:00", "Z"),
                "station": "KSEA",
                "temperature_c": round(temperature, 2),
                "humidity_pct": round(humidity, 1),
            }
        )
    return {"kind": "timeseries", "query": "select * from readings where station = 'KSEA'", "rows": series}


def _cost(value: Any) -> dict[str, Any]:
    text = orjson.dumps(value).decode()
    tokens = count_tokens(text)
    return {"bytes": len(text.encode()), "tokens": tokens.count, "token_method": tokens.method}


async def _resolve_time(store_factory: Any, payload_bytes: int, runs: int) -> dict[str, float]:
    payload = {"kind": "blob", "rows": ["x" * 1000 for _ in range(payload_bytes // 1006)]}
    store = store_factory()
    try:
        refs = References(store, conversation_id="bench")
        stored = await refs.put(payload, server="bench", tool="make", arguments={})
        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            resolution = await refs.resolve(tool="use", arguments={"data_uri": str(stored.uri)})
            samples.append(time.perf_counter() - started)
            assert resolution.ok
        ordered = sorted(samples)
        return {
            "payload_bytes": stored.size_bytes,
            "median_ms": statistics.median(samples) * 1000,
            "p95_ms": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))] * 1000,
        }
    finally:
        await store.close()


async def run(*, resolve_bytes: int = 10_000_000, runs: int = 15) -> dict[str, Any]:
    answer = time_series()
    refs = References(MemoryStore(), conversation_id="bench-conversation", max_view_bytes=4096)
    view = await refs.for_model(answer, server="db", tool="query", arguments={"station": "KSEA"})
    assert view.uri is not None
    inline_arguments = {"title": "KSEA temperature", "data": answer["rows"]}
    by_reference = {"title": "KSEA temperature", "data_uri": str(view.uri.at("/rows"))}
    whole_reference = {"title": "KSEA temperature", "data_uri": str(view.uri)}
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = await _resolve_time(lambda: SQLiteStore(Path(tmp) / "refs.db"), resolve_bytes, runs)
    return {
        "rows": ROWS,
        "write_inline": _cost(inline_arguments),
        "write_by_reference": _cost(by_reference),
        "write_by_reference_whole": _cost(whole_reference),
        "read_full_result": _cost(answer),
        "read_shortened_view": _cost(view.envelope),
        "resolve_from_sqlite": sqlite,
    }
