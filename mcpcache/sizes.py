"""Bytes saved: one meaning for the client, the server and the gateway.

An answer that did not cross the wire saved the size of the full answer less the size of what was sent
instead, both measured as the JSON the wire carries: the `CallToolResult` serialised as the MCP SDK
serialises it (wire field names, absent fields left out), `_meta` and its cache block included.

- a fresh hit (client): the whole answer; nothing was sent;
- a not-modified reply: the answer less the not-modified reply;
- a delta reply: the answer less the delta reply.

The client measures the answer it stored and the reply it received; the server and the gateway measure the
answer they would have sent and the reply they sent, so for one not-modified reply both sides report the
same number. What the transports add around a result (the JSON-RPC envelope, HTTP framing, compression)
is left out: it is the same for an answer and a reply, give or take the result's own length.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mcp_types import CallToolResult
from pydantic import BaseModel

__all__ = ["answer_bytes", "bytes_saved", "result_bytes", "text_json_bytes"]


def bytes_saved(answer: int, sent: int) -> int:
    """What a reply of `sent` bytes saved in place of an answer of `answer` bytes (never below 0)."""
    return max(answer - sent, 0)


def result_bytes(result: BaseModel) -> int:
    """The length of a result model (`CallToolResult`, a not-modified or delta reply) as the wire carries it."""
    return len(result.__pydantic_serializer__.to_json(result, by_alias=True, exclude_none=True))


def answer_bytes(
    content: Iterable[BaseModel | Mapping[str, Any]],
    structured_content: Any,
    is_error: bool,
    meta: Mapping[str, Any] | None,
) -> int:
    """The length of the `CallToolResult` made of these parts, as the wire carries it (`result_bytes`)."""
    # Built without validation (the parts are what a server is about to send, or has just received), so
    # blocks given as mappings are written as they are.
    result = CallToolResult.model_construct(
        content=list(content),  # type: ignore[arg-type]
        structured_content=structured_content,
        is_error=is_error,
        meta=None if meta is None else dict(meta),
    )
    return len(result.__pydantic_serializer__.to_json(result, by_alias=True, exclude_none=True, warnings=False))


def text_json_bytes(data: bytes) -> int:
    """The length of compact JSON `data` written as a JSON string: with its quotes and backslashes escaped
    (compact JSON holds no other character a string escapes), without the string's own quotes."""
    return len(data) + data.count(b'"') + data.count(b"\\")
