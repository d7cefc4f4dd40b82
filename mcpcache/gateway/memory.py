"""Giving memory back to the system after a large answer has passed through the gateway.

Reading one 97 MB answer from an HTTP upstream makes the MCP SDK hold several copies of it for a moment
(the server-sent event's text as it arrives, joined, the UTF-8 copy pydantic parses, the parsed message),
and most of that memory comes from many allocations smaller than glibc's mmap threshold. Freed, it stays in
the process's heap: about 250 MB after one such answer, measured, on top of which the next answer's copies
land (docs/benchmarks.md, section 8). glibc returns it only when the top of the heap is free, which a
long-lived server's heap seldom is; `malloc_trim(0)` returns every free page, in about 10 ms for a few
hundred MB.

So once an answer of at least `RELEASE_AFTER_CHARS` has come back through the gateway (from upstream or
from the store), and before FastMCP serialises it for the caller (which allocates about as much again),
the freed memory is handed back. On a C library without `malloc_trim` (musl, macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

import mcp_types as mt
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult

logger = logging.getLogger("mcpcache.gateway")

RELEASE_AFTER_CHARS = 8_000_000
"""Text (and base64 data) in an answer from which its passage is worth a trim: below it, what the SDK freed
is small against the interpreter's own footprint, and a trim after every call would be wasted work."""


def answer_chars(result: ToolResult) -> int:
    """The characters of text and binary data in an answer's content blocks (its structured content, when
    FastMCP sends one, is about as large again)."""
    total = 0
    for block in result.content:
        if isinstance(block, mt.TextContent):
            total += len(block.text)
        elif isinstance(block, mt.ImageContent | mt.AudioContent):
            total += len(block.data)
    return total


def _glibc_malloc_trim() -> Callable[[], None] | None:
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc: no malloc_trim to call
        return None
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


release_freed_memory: Callable[[], None] | None = _glibc_malloc_trim()
"""Returns the heap's free pages to the system; None where the C library has no `malloc_trim`."""


class ReleaseMemoryAfterLargeAnswers(Middleware):
    """The outermost tool-call middleware: after an answer of at least `threshold` characters, `release()`."""

    def __init__(
        self, release: Callable[[], None] | None = release_freed_memory, *, threshold: int = RELEASE_AFTER_CHARS
    ) -> None:
        self.release = release
        self.threshold = threshold

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        result = await call_next(context)
        if self.release is not None and answer_chars(result) >= self.threshold:
            try:
                self.release()
            except Exception:  # an allocator hint: never worth failing a call for
                logger.debug("could not return freed memory to the system", exc_info=True)
        return result
