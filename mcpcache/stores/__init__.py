"""Stores for tool results and references: memory, SQLite (the embedded default) and Redis."""

from mcpcache.stores.base import Item, Listed, Match, Page, Store, StoreLimits, Usage
from mcpcache.stores.memory import MemoryStore
from mcpcache.stores.redis import RedisStore
from mcpcache.stores.sqlite import SQLiteBusyError, SQLiteStore

__all__ = [
    "Item",
    "Listed",
    "Match",
    "MemoryStore",
    "Page",
    "RedisStore",
    "SQLiteBusyError",
    "SQLiteStore",
    "Store",
    "StoreLimits",
    "Usage",
]
