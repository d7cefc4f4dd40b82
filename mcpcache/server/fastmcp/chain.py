"""Where the middleware stands among FastMCP's layers: the response memos around it, whether anything
inside it can change an answer, and the claim a mounted server's own mcpcache layer leaves for the outer
one."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING

from fastmcp.server.extensions import ServerExtension
from fastmcp.server.middleware import Middleware

if TYPE_CHECKING:
    from fastmcp import FastMCP

__all__ = ["CLAIM", "Claim", "inside_is_transparent", "memos_around"]


_MEMO_MODULE = "fastmcp.server.middleware.caching"


def _memo_covers(memo: Middleware, tool: str) -> bool:
    # FastMCP's memo is looked up in sys.modules instead of imported: importing it pulls in its storage
    # backends (about 440 modules, a quarter of a second), and if the module was never imported, no
    # middleware in the chain can be one of its instances.
    caching = sys.modules.get(_MEMO_MODULE)
    if caching is None or not isinstance(memo, caching.ResponseCachingMiddleware):
        return False
    try:
        settings = memo._call_tool_settings
        return settings.get("enabled") is not False and memo._matches_tool_cache_settings(tool_name=tool)
    except AttributeError:
        # Its settings moved in some FastMCP release: assume it covers the tool, the safe reading.
        return True


def memos_around(chain: list[Middleware], me: Middleware, tool: str) -> tuple[bool, bool]:
    """(a memo covering `tool` sits inside `me`, one sits outside `me`) in a middleware chain."""
    try:
        position = next(i for i, mw in enumerate(chain) if mw is me)
    except StopIteration:
        return False, False
    inside = any(_memo_covers(mw, tool) for mw in chain[position + 1 :])
    outside = any(_memo_covers(mw, tool) for mw in chain[:position])
    return inside, outside


def _leaves_calls_alone(middleware: Middleware) -> bool:
    kind = type(middleware)
    return all(
        getattr(kind, hook, None) is getattr(Middleware, hook)
        for hook in ("__call__", "on_message", "on_request", "on_call_tool")
    )


def inside_is_transparent(server: FastMCP, me: Middleware) -> bool:
    """Nothing between `me` and the tool can change a `tools/call` answer: every middleware inside `me`
    and every extension leaves `tools/call` to the base class. Unknown layouts read as not transparent."""
    chain = server.middleware
    try:
        position = next(i for i, mw in enumerate(chain) if mw is me)
    except StopIteration:
        return False
    if not all(_leaves_calls_alone(mw) for mw in chain[position + 1 :]):
        return False
    extensions = getattr(server, "_extensions", None)
    if not isinstance(extensions, Mapping):
        return False
    return all(type(ext).intercept_tool_call is ServerExtension.intercept_tool_call for ext in extensions.values())


class Claim:
    """Set by a middleware around its call for a declared tool. A mounted server's own mcpcache
    middleware that handles the same call records the result it returns here, and the outer one then
    sends that result as it is: one layer stamps, the one nearest the tool, which knows its validator
    and can tag the raw value. (Without this, the outer layer would hash the inner one's not-modified
    reply as if it were an answer.)"""

    __slots__ = ("inner_result",)

    def __init__(self) -> None:
        self.inner_result: object = None


CLAIM: ContextVar[Claim | None] = ContextVar("mcpcache_fastmcp_claim", default=None)
