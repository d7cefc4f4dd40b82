"""What mcpcache may tag in a FastMCP tool result, read by the server middleware and by the gateway."""

from __future__ import annotations

from typing import Any

from fastmcp.tools.base import ToolResult

from mcpcache.server.decisions import Answer, NotAnAnswer

__all__ = ["READDRESSED", "read_tool_answer", "readdressed_above_middleware"]


def readdressed_above_middleware(structured_content: Any) -> bool:
    """Whether FastMCP will rewrite this answer's tool references after every middleware has run.

    `FastMCP.call_tool` re-addresses a Prefab payload's `toolCall` references to the names of the
    server's current tool listing, above the middleware chain: the same body can then be sent as two
    answers, so no tag made below can name it.
    """
    from fastmcp.server.providers.prefab_payload import payload_has_identities

    return bool(payload_has_identities(structured_content))


READDRESSED = "FastMCP re-addresses this answer's tool references after mcpcache runs (Prefab): sent untagged"


def read_tool_answer(result: ToolResult) -> Answer | NotAnAnswer:
    """What mcpcache may tag in a FastMCP tool result, or why it must be sent as it is."""
    if getattr(result, "input_required", None) is not None:
        return NotAnAnswer("not a tool answer (input required)")
    if readdressed_above_middleware(result.structured_content):
        return NotAnAnswer(READDRESSED)
    return Answer(
        content=result.content,
        structured_content=result.structured_content,
        is_error=result.is_error,
        meta=result.meta,  # what the tool and FastMCP put there; the tag covers it
    )
