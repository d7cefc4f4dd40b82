"""OpenTelemetry span attributes for the server half, when a tracer is there to receive them.

The MCP SDK and FastMCP already open a span per `tools/call` (their `tools/call <tool>` server span);
mcpcache adds what it decided to that span rather than opening one of its own, so a trace shows one
span per call with the cache's outcome on it:

- `mcpcache.tool`: the tool name as called;
- `mcpcache.outcome`: `stamped`, `not_modified`, `conversion_skipped`, `body_skipped`, `delta`, `error`
  or `passed_through` (the values of `Outcome`, explained in docs/server.md);
- `mcpcache.bytes_saved`: on a not-modified reply, the size of the answer that was not sent, when it is
  known (the canonical or raw bytes the tag was computed from; absent when the body never ran); on a
  delta reply, the answer's size less the delta's.

`opentelemetry-api` is not a dependency of mcpcache (the MCP SDK brings it): without it, or without a
configured tracer provider (the current span is then a non-recording one), this is a no-op costing one
attribute lookup.
"""

from __future__ import annotations

from typing import Any, Literal

Outcome = Literal["stamped", "not_modified", "conversion_skipped", "body_skipped", "delta", "error", "passed_through"]

_UNSET: Any = object()
_trace: Any = _UNSET


def _tracing() -> Any:
    """`opentelemetry.trace`, or None when it is not installed. Imported on first use: the server half
    must not pay for it at import time, and must work without it."""
    global _trace
    if _trace is _UNSET:
        try:
            from opentelemetry import trace as module
        except ImportError:
            module = None  # type: ignore[assignment]
        _trace = module
    return _trace


def annotate(tool: str, outcome: Outcome, bytes_saved: int | None = None) -> None:
    """Set the mcpcache attributes on the current span, if it records. Never raises."""
    trace = _tracing()
    if trace is None:
        return
    try:
        span = trace.get_current_span()
        if not span.is_recording():
            return
        attributes: dict[str, Any] = {"mcpcache.tool": tool, "mcpcache.outcome": outcome}
        if bytes_saved is not None:
            attributes["mcpcache.bytes_saved"] = bytes_saved
        span.set_attributes(attributes)
    except Exception:  # pragma: no cover - a broken tracer must never fail a tool call
        return
