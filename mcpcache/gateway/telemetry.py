"""The gateway's OpenTelemetry counters (docs/observability.md), beside its partitions' `ToolCache`s (which
count their own calls upstream as the client does: `mcpcache.client.*`, `mcpcache.server` naming the
upstream's identity).

Metrics (meter `mcpcache`), each with `mcpcache.upstream` (the upstream's name in the configuration) and
`mcpcache.tool` (the name callers use): both come from the configuration, so they are bounded.

- `mcpcache.gateway.calls` ({call}): calls of declared tools, by `mcpcache.outcome`, what the caller got:
  `full` (the answer, stamped), `not_modified`, `delta`, or `relayed` (as the upstream sent it: an error,
  an answer with no cache block, a request for input);
- `mcpcache.gateway.saved` (By): what not-modified and delta replies saved the callers (`mcpcache.sizes`),
  when the gateway held the full answer (not when the upstream itself confirmed the caller's tag);
- `mcpcache.gateway.upstream.received` (By): the answers received from upstreams, as the wire carries them.

Each size is measured only while a meter provider is configured: without one, nothing is serialised to be
counted.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Literal

from fastmcp.tools.base import ToolResult

from mcpcache.client.policy import reply_block
from mcpcache.gateway.decisions import Route
from mcpcache.server.decisions import Answer, saved_by
from mcpcache.sizes import answer_bytes
from mcpcache.telemetry import Meters

__all__ = ["GatewayTelemetry"]

Sent = Literal["full", "not_modified", "delta", "relayed"]


@dataclass(frozen=True)
class _Instruments:
    calls: Any
    saved: Any
    received: Any


def _instruments(meter: Any) -> _Instruments:
    return _Instruments(
        meter.create_counter("mcpcache.gateway.calls", unit="{call}", description="Calls of declared tools"),
        meter.create_counter(
            "mcpcache.gateway.saved", unit="By", description="Answer bytes replaced by not-modified or delta replies"
        ),
        meter.create_counter(
            "mcpcache.gateway.upstream.received", unit="By", description="Answer bytes received from upstreams"
        ),
    )


def sent_kind(reply: ToolResult, meta_key: str) -> Sent:
    block = reply_block(reply.meta, meta_key)
    if block is None:
        return "relayed"
    if block.not_modified:
        return "not_modified"
    if block.delta is not None:
        return "delta"
    return "full"


class GatewayTelemetry:
    def __init__(self, meter_provider: Any | None = None, *, meta_key: str) -> None:
        self._meters = Meters(_instruments, meter_provider)
        self.meta_key = meta_key

    def sent(self, route: Route, reply: ToolResult, full: Answer | None) -> None:
        """`reply` went to a caller; `full`: the answer it stands for, when the gateway held it."""
        instruments = self._meters.get()
        if instruments is None:
            return
        with contextlib.suppress(Exception):  # a broken meter must never fail a tool call
            kind = sent_kind(reply, self.meta_key)
            labels = {"mcpcache.upstream": route.upstream, "mcpcache.tool": route.public_name}
            instruments.calls.add(1, {**labels, "mcpcache.outcome": kind})
            if full is not None and kind in ("not_modified", "delta"):
                saved = saved_by(reply, full, self.meta_key)
                if saved:
                    instruments.saved.add(saved, {**labels, "mcpcache.outcome": kind})

    def received(self, route: Route, result: ToolResult) -> None:
        """`result` came from the upstream."""
        instruments = self._meters.get()
        if instruments is None:
            return
        with contextlib.suppress(Exception):  # a broken meter must never fail a tool call
            size = answer_bytes(result.content, result.structured_content, result.is_error, result.meta)
            instruments.received.add(size, {"mcpcache.upstream": route.upstream, "mcpcache.tool": route.public_name})
