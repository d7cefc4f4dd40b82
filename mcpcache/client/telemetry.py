"""The client's OpenTelemetry: each call's outcome on a span, and counted (docs/observability.md).

Span: the caller's current span when it records (attributes, and one `mcpcache.client.tool_call` event per
call); else, when a tracer provider is configured, a span of the cache's own around the call,
`mcpcache tools/call <tool>` (kind INTERNAL, the same attributes), so that a fresh hit, which sends no
request, still leaves a trace. Never both.

Metrics (meter `mcpcache`), each with `mcpcache.server` (the server as stored entries name it: a URL
without credentials or query, a command line) and `mcpcache.tool`, both bounded (`mcpcache.telemetry.Labels`):

- `mcpcache.client.calls` ({call}): by `mcpcache.outcome` (`CallOutcome.status`) and `mcpcache.coalesced`;
- `mcpcache.client.saved` (By): the bytes that did not cross the wire (`mcpcache.sizes`), by outcome;
- `mcpcache.client.store_failures` ({failure}): store operations that raised or missed the deadline, by
  `mcpcache.store` (the store's class).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

from mcpcache.client.keys import readable_server
from mcpcache.client.outcomes import CallOutcome
from mcpcache.telemetry import CALLERS, Labels, Meters, Tracing, annotate_current_span

__all__ = ["ClientTelemetry"]


@dataclass(frozen=True)
class _Instruments:
    calls: Any
    saved: Any
    store_failures: Any


def _instruments(meter: Any) -> _Instruments:
    return _Instruments(
        meter.create_counter("mcpcache.client.calls", unit="{call}", description="Tool calls through the cache"),
        meter.create_counter(
            "mcpcache.client.saved", unit="By", description="Answer bytes that did not cross the wire"
        ),
        meter.create_counter(
            "mcpcache.client.store_failures",
            unit="{failure}",
            description="Store operations that raised or missed the store deadline",
        ),
    )


@functools.lru_cache(maxsize=256)
def _server_label(server_id: str) -> str:
    return readable_server(server_id)


class ClientTelemetry:
    """One `ToolCache`'s spans and counters."""

    def __init__(self, tracer_provider: Any | None = None, meter_provider: Any | None = None) -> None:
        self._tracing = Tracing(tracer_provider)
        self._meters = Meters(_instruments, meter_provider)
        self._servers = Labels()
        self._tools = Labels()

    def begin(self, tool: str) -> Any | None:
        """Where the outcome of a call of `tool` goes: `CALLERS` (the caller's span records), the cache's own
        span (none records, and a tracer provider is configured), or None (nowhere)."""
        return self._tracing.start_own(lambda: f"mcpcache tools/call {tool}")

    @staticmethod
    def own(span: Any | None) -> bool:
        """Whether `begin` opened a span of the cache's own."""
        return span is not None and span is not CALLERS

    def inside(self, span: Any) -> Any:
        """A context manager making the cache's own `span` current while the call runs (the SDK's request
        span, on a call that goes to the server, is then its child)."""
        from opentelemetry.trace import use_span

        return use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False)

    def record(self, span: Any | None, server_id: str, tool: str, outcome: CallOutcome) -> None:
        """A call's outcome: on `span` (the cache's own, ended here) or the caller's, and counted."""
        if span is not None:
            self._on_span(span, server_id, tool, outcome)
        instruments = self._meters.get()
        if instruments is None:
            return
        try:
            labels = {
                "mcpcache.server": self._servers(_server_label(server_id)),
                "mcpcache.tool": self._tools(tool),
                "mcpcache.outcome": outcome.status,
            }
            instruments.calls.add(1, {**labels, "mcpcache.coalesced": outcome.coalesced})
            if outcome.bytes_saved:
                instruments.saved.add(outcome.bytes_saved, labels)
        except Exception:  # pragma: no cover - a broken meter must never fail a tool call
            pass

    @staticmethod
    def _on_span(span: Any, server_id: str, tool: str, outcome: CallOutcome) -> None:
        def attributes() -> dict[str, str | int | bool]:
            return {
                "mcpcache.client.outcome": outcome.status,
                "mcpcache.client.coalesced": outcome.coalesced,
                "mcpcache.client.stored": outcome.stored,
                "mcpcache.client.bytes_saved": outcome.bytes_saved,
                "mcpcache.client.tool": tool,
                "mcpcache.client.server": _server_label(server_id),
            }

        if span is CALLERS:
            annotate_current_span(attributes, event="mcpcache.client.tool_call")
            return
        try:
            span.set_attributes(attributes())
            span.end()
        except Exception:  # pragma: no cover - a broken tracer must never fail a tool call
            pass

    def failed(self, span: Any | None, error: BaseException) -> None:
        """The call raised: the cache's own span, if any, ends marked as failed."""
        if span is None or span is CALLERS:
            return
        try:
            from opentelemetry.trace import Status, StatusCode

            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.end()
        except Exception:  # pragma: no cover - a broken tracer must never fail a tool call
            pass

    def store_failure(self, store: str) -> None:
        instruments = self._meters.get()
        if instruments is not None:
            with contextlib.suppress(Exception):  # a broken meter must never fail a tool call
                instruments.store_failures.add(1, {"mcpcache.store": store})
