"""The server half: declare which tools are cacheable, and stamp their answers.

The adapters live in their own modules, `mcpcache.server.fastmcp` (needs the `[fastmcp]` extra) and
`mcpcache.server.sdk` (the MCP SDK's `MCPServer`). Their main names are also importable from here, each
loaded on first use, so that using one SDK never imports the other and this package imports without
FastMCP installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mcpcache.server.files import FileVersions
from mcpcache.server.policies import CachePolicy, DeclarationError, ToolPolicies, cache_meta
from mcpcache.server.revalidator import Revalidator, ServerStats

if TYPE_CHECKING:
    from mcpcache.server.fastmcp import RevalidationMiddleware, install
    from mcpcache.server.sdk import RevalidationExtension

_LAZY = {
    "install": "mcpcache.server.fastmcp",
    "RevalidationMiddleware": "mcpcache.server.fastmcp",
    "RevalidationExtension": "mcpcache.server.sdk",
}

__all__ = [
    "CachePolicy",
    "DeclarationError",
    "FileVersions",
    "RevalidationExtension",
    "RevalidationMiddleware",
    "Revalidator",
    "ServerStats",
    "ToolPolicies",
    "cache_meta",
    "install",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mcpcache.server' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
