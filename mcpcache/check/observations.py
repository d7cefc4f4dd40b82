"""What the probes of `mcpcache check` saw of one tool (`ToolObservations`, one `Exchange` per call): the
data every server judge (`mcpcache.check.server_rules`) is a pure function of."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpcache.check.wire import sent_tag

__all__ = ["Exchange", "ToolObservations"]


@dataclass(frozen=True)
class Exchange:
    """One `tools/call` as it went over the wire."""

    sent: object
    """The `etag` value the request's cache block carried; None for an ordinary call."""
    result: Mapping[str, Any] | None
    """The result's JSON exactly as received; None when the call failed."""
    error: str | None = None
    """A JSON-RPC error, or why the reply could not be read."""
    reply_bytes: int | None = None
    request_bytes: int | None = None


@dataclass(frozen=True)
class ToolObservations:
    """Everything the probes saw of one tool, with one set of arguments."""

    tool: str
    entry: Mapping[str, Any]
    """The tool's `tools/list` entry, as sent."""
    arguments: Mapping[str, Any]
    meta_key: str
    exchanges: Mapping[str, Exchange] = field(default_factory=dict)
    mutations: tuple[str, ...] = ()
    """The mutating calls made between the two phases, as `name(arguments)`."""
    invalid_arguments: Mapping[str, Any] | None = None
    """What the error probes sent (arguments the tool's input schema refuses), None if none could be built."""

    def get(self, probe: str) -> Exchange | None:
        return self.exchanges.get(probe)

    def result(self, probe: str) -> Mapping[str, Any] | None:
        exchange = self.exchanges.get(probe)
        return exchange.result if exchange is not None else None

    @property
    def current_tag(self) -> str | None:
        """The tag of the second ordinary call: what a client holding the latest answer would send."""
        second = self.result("second")
        return sent_tag(second, self.meta_key) if second is not None else None

    @property
    def output_schema(self) -> Mapping[str, Any] | None:
        schema = self.entry.get("outputSchema")
        return schema if isinstance(schema, Mapping) else None
