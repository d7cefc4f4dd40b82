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

How it reaches the span, and why that costs nothing without a tracer: `mcpcache.telemetry`.
"""

from __future__ import annotations

from typing import Literal

from mcpcache.telemetry import annotate_current_span

Outcome = Literal["stamped", "not_modified", "conversion_skipped", "body_skipped", "delta", "error", "passed_through"]


def annotate(tool: str, outcome: Outcome, bytes_saved: int | None = None) -> None:
    """Set the mcpcache attributes on the current span, if it records. Never raises."""

    def attributes() -> dict[str, str | int | bool]:
        built: dict[str, str | int | bool] = {"mcpcache.tool": tool, "mcpcache.outcome": outcome}
        if bytes_saved is not None:
            built["mcpcache.bytes_saved"] = bytes_saved
        return built

    annotate_current_span(attributes)
