"""The by-reference scenario: a model moves a 240-row time series from a query tool into a chart tool.

Inline, the model writes every row back out as tool-call arguments; by reference it writes one
`mcp+cache://` URI. What is counted is what a model pays: o200k tokens (and bytes) of the arguments it
must write, and of the tool result it must read (the whole result, or the view whose rows became a
named marker). Also the time to resolve a large referenced payload from the embedded store.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from mcpcache.bench.common import percentile
from mcpcache.refs import References
from mcpcache.stores import MemoryStore, SQLiteStore
from mcpcache.tokens import count_tokens

ROWS = 240
STATION = "KSLC"
TITLE = "KSLC temperature"
_FIRST_HOUR = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def time_series(station: str = STATION, hours: int = ROWS) -> list[dict[str, Any]]:
    """Hourly readings at a station from 2026-03-01: deterministic, about 75 bytes of JSON a row.

    The one series of the project: `mcpcache bench`, benchmarks/by_reference.py and the reference
    tests (tests/refs) all pass these rows around, and the tests' digests depend on them.
    """
    rows = []
    for hour in range(hours):
        rows.append(
            {
                "t": (_FIRST_HOUR + dt.timedelta(hours=hour)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "temp_c": round(8 + 7 * math.sin(hour / 24 * 2 * math.pi) + (hour % 7) * 0.13, 2),
                "rh_pct": round(55 + 20 * math.cos(hour / 24 * 2 * math.pi), 1),
                "station": station,
            }
        )
    return rows


def query_answer(station: str = STATION, hours: int = ROWS) -> dict[str, Any]:
    """What the scenario's query tool answers: the series with its units."""
    return {"station": station, "unit": {"temp_c": "°C", "rh_pct": "%"}, "rows": time_series(station, hours)}


def cost(text_or_value: Any) -> dict[str, Any]:
    """What a model pays to write or read something: its UTF-8 bytes and its tokens.

    A `str` is counted as the text it is; anything else as its compact JSON (orjson), as a host passes
    tool-call arguments and results on.
    """
    text = text_or_value if isinstance(text_or_value, str) else orjson.dumps(text_or_value).decode()
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
        return {
            "payload_bytes": stored.size_bytes,
            "median_ms": statistics.median(samples) * 1000,
            "p95_ms": percentile(samples, 0.95) * 1000,
        }
    finally:
        await store.close()


async def run(*, resolve_bytes: int = 10_000_000, runs: int = 15) -> dict[str, Any]:
    answer = query_answer()
    refs = References(MemoryStore(), conversation_id="bench-conversation", max_view_bytes=4096)
    view = await refs.for_model(answer, server="db", tool="query", arguments={"station": STATION})
    assert view.uri is not None
    inline_arguments = {"title": TITLE, "data": answer["rows"]}
    by_reference = {"title": TITLE, "data_uri": str(view.uri.at("/rows"))}
    whole_reference = {"title": TITLE, "data_uri": str(view.uri)}
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = await _resolve_time(lambda: SQLiteStore(Path(tmp) / "refs.db"), resolve_bytes, runs)
    return {
        "rows": len(answer["rows"]),
        "write_inline": cost(inline_arguments),
        "write_by_reference": cost(by_reference),
        "write_by_reference_whole": cost(whole_reference),
        "read_full_result": cost(answer),
        "read_shortened_view": cost(view.envelope),
        "resolve_from_sqlite": sqlite,
    }
