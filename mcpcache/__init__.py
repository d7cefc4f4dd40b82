"""mcpcache: make MCP tool results cheap to ask for twice.

The names users write most are importable from here; each is loaded on first use, so importing
mcpcache (as the demo server and the benchmark workers do) does not pull in the client, the stores and
the references until they are asked for.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from mcpcache.etag import content_tag
from mcpcache.protocol import EXTENSION_ID, META_KEY, CacheBlock, parse_cache_block, weak_equal
from mcpcache.server.policies import CachePolicy, ToolPolicies

if TYPE_CHECKING:
    from mcpcache.client import CachedCall, CacheSettings, CacheStats, CallOutcome, ToolCache
    from mcpcache.refs import References

_LAZY = {
    "ToolCache": "mcpcache.client",
    "CachedCall": "mcpcache.client",
    "CacheSettings": "mcpcache.client",
    "CallOutcome": "mcpcache.client",
    "CacheStats": "mcpcache.client",
    "References": "mcpcache.refs",
}

__all__ = [
    "EXTENSION_ID",
    "META_KEY",
    "CacheBlock",
    "CachePolicy",
    "CacheSettings",
    "CacheStats",
    "CachedCall",
    "CallOutcome",
    "References",
    "ToolCache",
    "ToolPolicies",
    "content_tag",
    "parse_cache_block",
    "weak_equal",
]
try:
    __version__ = version("mcpcache")
    """The installed package's version (pyproject.toml's, read from the package's metadata)."""
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mcpcache' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
