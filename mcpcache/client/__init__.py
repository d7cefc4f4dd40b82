"""The client half: a revalidating private cache for tool results, and caching views of the clients."""

from mcpcache.client.cache import CacheStats, CallOutcome, ToolCache
from mcpcache.client.wrappers import CachedCall, CachedMCPClient, CachedSession

__all__ = ["CacheStats", "CachedCall", "CachedMCPClient", "CachedSession", "CallOutcome", "ToolCache"]
