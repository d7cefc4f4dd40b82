"""OpenTelemetry for the server half: span attributes and counters, when something listens.

The MCP SDK and FastMCP already open a span per `tools/call` (their `tools/call <tool>` server span);
mcpcache adds what it decided to that span rather than opening one of its own, so a trace shows one
span per call with the cache's outcome on it:

- `mcpcache.tool`: the tool name as called;
- `mcpcache.outcome`: `stamped`, `not_modified`, `conversion_skipped`, `body_skipped`, `delta`, `error`
  or `passed_through` (the values of `Outcome`, explained in docs/server.md);
- `mcpcache.bytes_saved`: on a not-modified or delta reply, the bytes it saved (`mcpcache.sizes`: the
  full answer less the reply, as the wire carries them), when known (absent when the body never ran).

Metrics (meter `mcpcache`; docs/observability.md), with `mcpcache.tool` (bounded: `mcpcache.telemetry.Labels`)
and `mcpcache.outcome` as above:

- `mcpcache.server.calls` ({call}): calls of declared tools;
- `mcpcache.server.saved` (By): the bytes saved, as on the span.

How it reaches the span, and why that costs nothing without a tracer: `mcpcache.telemetry`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Literal

from mcpcache.telemetry import Labels, Meters, annotate_current_span

Outcome = Literal["stamped", "not_modified", "conversion_skipped", "body_skipped", "delta", "error", "passed_through"]


def annotate(tool: str, outcome: Outcome, bytes_saved: int | None = None) -> None:
    """Set the mcpcache attributes on the current span, if it records. Never raises."""

    def attributes() -> dict[str, str | int | bool]:
        built: dict[str, str | int | bool] = {"mcpcache.tool": tool, "mcpcache.outcome": outcome}
        if bytes_saved is not None:
            built["mcpcache.bytes_saved"] = bytes_saved
        return built

    annotate_current_span(attributes)


@dataclass(frozen=True)
class _Instruments:
    calls: Any
    saved: Any


def _instruments(meter: Any) -> _Instruments:
    return _Instruments(
        meter.create_counter("mcpcache.server.calls", unit="{call}", description="Calls of declared tools"),
        meter.create_counter(
            "mcpcache.server.saved", unit="By", description="Answer bytes replaced by not-modified or delta replies"
        ),
    )


class ServerTelemetry:
    """One server adapter's span attributes and counters."""

    def __init__(self, meter_provider: Any | None = None) -> None:
        self._meters = Meters(_instruments, meter_provider)
        self._tools = Labels()

    def record(self, tool: str, outcome: Outcome, bytes_saved: int | None = None) -> None:
        annotate(tool, outcome, bytes_saved)
        instruments = self._meters.get()
        if instruments is None:
            return
        with contextlib.suppress(Exception):  # a broken meter must never fail a tool call
            labels = {"mcpcache.tool": self._tools(tool), "mcpcache.outcome": outcome}
            instruments.calls.add(1, labels)
            if bytes_saved:
                instruments.saved.add(bytes_saved, labels)
