"""An upstream that never heard of mcpcache and counts what reaches it.

`numbered_private` and `numbered_public` answer `{"kind": "numbered", "name": ..., "fetch": N}`, where N
counts every call that reached this process: an answer served by the gateway from its store keeps the
number it was fetched with, so a test reads from the answer itself whether upstream was called. `calls`
(never declared in a gateway) reports the count.
"""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP


def build_counting_server() -> FastMCP[Any]:
    server: FastMCP[Any] = FastMCP("counting-upstream")
    fetches = {"count": 0}

    def numbered(name: str) -> dict[str, Any]:
        fetches["count"] += 1
        return {"kind": "numbered", "name": name, "fetch": fetches["count"]}

    @server.tool(annotations={"readOnlyHint": True})
    def numbered_private(name: str) -> dict[str, Any]:
        """A numbered answer (declared private in the tests' gateways)."""
        return numbered(name)

    @server.tool(annotations={"readOnlyHint": True})
    def numbered_public(name: str) -> dict[str, Any]:
        """A numbered answer (declared public in the tests' gateways)."""
        return numbered(name)

    @server.tool
    def calls() -> dict[str, int]:
        """How many numbered answers this process has given."""
        return {"calls": fetches["count"]}

    return server
