"""Stores for tool results and references: memory, SQLite (the embedded default) and Redis."""

from typing import TYPE_CHECKING, Any

from mcpcache.stores.base import Store
from mcpcache.stores.fence import FenceSettings
from mcpcache.stores.items import Item, Listed, Match, Page, StoreLimits, Usage
from mcpcache.stores.memory import MemoryStore
from mcpcache.stores.sqlite import SQLiteBusyError, SQLiteStore

if TYPE_CHECKING:
    from mcpcache.stores.redis import RedisStore

__all__ = [
    "FenceSettings",
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


def __getattr__(name: str) -> Any:
    # The Redis store needs the redis extra: imported on first use, so the other stores work without it.
    if name == "RedisStore":
        from mcpcache.stores.redis import RedisStore

        return RedisStore
    raise AttributeError(f"module 'mcpcache.stores' has no attribute {name!r}")
