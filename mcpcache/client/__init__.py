"""The client half: a revalidating private cache for tool results, and caching views of the clients."""

from mcpcache.client.cache import CacheStats, CallOutcome, ToolCache
from mcpcache.client.inventory import CachedEntry
from mcpcache.client.settings import CacheSettings
from mcpcache.client.wrappers import CachedCall, CachedMCPClient, CachedSession

__all__ = [
    "CacheSettings",
    "CacheStats",
    "CachedCall",
    "CachedEntry",
    "CachedMCPClient",
    "CachedSession",
    "CallOutcome",
    "ToolCache",
]
