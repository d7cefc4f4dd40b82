"""The two contracts between the client cache's driver and the caching views of the clients.

`Connection` is what the driver (`ToolCache.execute`) needs from one connected client for one call; each
view implements it over its client's session (`mcpcache.client.wrappers`), and the gateway over its
upstream leg. `ViewCache` is what a view needs from its cache. Written down here, apart from both, so that
neither imports the other: `ToolCache.wrap` makes views, and views only see this face of the cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from mcp_types import CallToolResult

from mcpcache.client.keys import NamedCall
from mcpcache.client.outcomes import CallOutcome
from mcpcache.client.policy import CacheMode

__all__ = ["Connection", "Declaring", "ViewCache"]


class Declaring(Protocol):
    """Where a server's cache declarations are read from (its key arguments): a `Connection`, or a view."""

    @property
    def server_id(self) -> str: ...

    async def declarations(self) -> Mapping[str, Any] | None:
        """Each tool's cache declaration in `tools/list`, by name (None: the tools could not be listed)."""


class Connection(Protocol):
    """What the driver needs from one connected client, for one call; the wrappers implement it."""

    server_id: str
    era: str
    timeout_s: float | None
    """The caller's read timeout (its own, or its client's default); None: no bound."""

    async def send(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None, timeout_s: float | None
    ) -> CallToolResult | None:
        """The call, its answer not checked against the tool's output schema (a not-modified reply would
        fail the check; the driver checks full answers itself). None when the answer is not a plain tool
        result (the driver then sends the call through `send_plain`)."""

    async def send_plain(self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None) -> CallToolResult:
        """The call through the client's own path, its checks included."""

    async def validate(self, name: str, result: CallToolResult) -> None:
        """Raise as the client would for an answer that does not fit the tool's output schema (the SDK's
        check raises RuntimeError; anything else it raises is a failure of the call, not of the answer)."""

    async def read_only(self, name: str) -> bool | None:
        """The tool's readOnlyHint, as the server announced it (None: unknown)."""

    async def idempotent(self, name: str) -> bool | None:
        """The tool's idempotentHint, as the server announced it (None: unknown)."""

    async def declarations(self) -> Mapping[str, Any] | None:
        """Each tool's cache declaration in the server's `tools/list` (the object under the cache key), by
        tool name; None when they could not be listed. Asked only of a trusted server (`KeyRules`)."""


class ViewCache(Protocol):
    """What a caching view asks of its cache (`ToolCache` is the one implementation)."""

    @property
    def meta_key(self) -> str: ...

    async def execute(
        self,
        conn: Connection,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        mode: CacheMode = "use",
        meta: Mapping[str, Any] | None = None,
        variant: str = "",
        named: NamedCall | None = None,
    ) -> tuple[CallToolResult, CallOutcome]:
        """Answer one call, from the cache or through `conn` (`named`: as `fresh_hit` named it just before)."""

    def fresh_hit(
        self, server_id: str, era: str, name: str, arguments: Mapping[str, Any] | None, variant: str = ""
    ) -> tuple[CallToolResult, CallOutcome] | NamedCall | None:
        """The call as a fresh hit answered without awaiting; else the call as it named it (hand it to
        `execute`), or None when it cannot be named (`execute` says why)."""

    async def end_freshness(self, server_id: str, era: str | None = None) -> None:
        """End the freshness of `server_id`'s entries (a change notification)."""

    def forget_validations(self) -> None:
        """Check stored answers against the output schemas again (the tools changed)."""

    async def invalidate(
        self,
        tool: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        *,
        server_id: str,
        declaring: Declaring | None = None,
    ) -> None:
        """Never serve again, without asking the server, what is cached for one call (or a server)."""
