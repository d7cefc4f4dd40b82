"""OpenTelemetry for both halves: what mcpcache decided, put on the span the caller's code already has.

The MCP SDK and FastMCP open a span per `tools/call` (server side, and around a client's request); mcpcache
adds its outcome to the current span rather than opening one of its own, so a trace shows one span per call
with the cache's decision on it. `opentelemetry-api` is not a dependency of mcpcache (the MCP SDK brings
it): without it, or without a configured tracer provider (the current span is then a non-recording one),
this is a no-op costing one attribute lookup. It is imported on first use, so that neither half pays for
it at import time, and a broken tracer never fails a call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["annotate_current_span"]

_UNSET: Any = object()
_trace: Any = _UNSET


def _tracing() -> Any:
    """`opentelemetry.trace`, or None when it is not installed."""
    global _trace
    if _trace is _UNSET:
        try:
            from opentelemetry import trace as module
        except ImportError:
            module = None  # type: ignore[assignment]
        _trace = module
    return _trace


Attributes = Mapping[str, str | int | bool]


def annotate_current_span(attributes: Callable[[], Attributes], *, event: str | None = None) -> None:
    """Set `attributes()` on the current span if it records (the last call under a span wins), and add them
    as an `event` too when named (one per call). The attributes are built only for a span that records: a
    call with no tracer pays for none of them. Never raises."""
    trace = _tracing()
    if trace is None:
        return
    try:
        span = trace.get_current_span()
        if not span.is_recording():
            return
        built = dict(attributes())
        span.set_attributes(built)
        if event is not None:
            span.add_event(event, built)
    except Exception:  # pragma: no cover - a broken tracer must never fail a tool call
        return
