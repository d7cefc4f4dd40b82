"""The MCP SDK's `ResponseCacheStore` protocol (get/set/delete/clear on `CacheKey`/`CacheEntry`) on top of
any mcpcache store's primitives, so one SQLite file or Redis server also holds `mcp.Client`'s own list and
`resources/read` cache. `Store` takes it in as `SDKResponseCacheMixin`."""

from __future__ import annotations

import hashlib
import json
from typing import Protocol

import mcp_types
from mcp.client import CacheEntry, CacheKey
from pydantic import ValidationError

from mcpcache.stores.items import Item

__all__ = ["SDK_GROUP", "SDKResponseCacheMixin", "sdk_store_key"]


class _Primitives(Protocol):
    """The store operations the SDK protocol is built on (every `Store` has them)."""

    def now(self) -> float: ...

    async def load(self, key: str) -> Item | None: ...

    async def save(self, key: str, item: Item) -> bool: ...

    async def remove(self, key: str) -> None: ...

    async def remove_group(self, group: str) -> int: ...


SDK_GROUP = "mcp-sdk"
"""The group holding entries written through the SDK's ResponseCacheStore protocol."""


def sdk_store_key(key: CacheKey) -> str:
    """The store key an SDK `CacheKey` is kept under."""
    # Fields hashed as a JSON array: the SDK warns against flattening CacheKey into one string.
    fields = json.dumps([key.method, key.params_key, key.partition])
    return "s:" + hashlib.sha256(fields.encode()).hexdigest()


def _result_type(name: object) -> type[mcp_types.Result] | None:
    # Only result models from mcp_types are rebuilt: a record naming anything else is corrupt or hostile.
    cls = getattr(mcp_types, name, None) if isinstance(name, str) else None
    if isinstance(cls, type) and issubclass(cls, mcp_types.Result):
        return cls
    return None


class SDKResponseCacheMixin:
    """The MCP SDK's `ResponseCacheStore` protocol on top of the store primitives."""

    async def get(self: _Primitives, key: CacheKey) -> CacheEntry | None:
        store = self
        item = await store.load(sdk_store_key(key))
        if item is None:
            return None
        cls = _result_type(item.meta.get("type"))
        scope = item.meta.get("scope")
        expires_at = item.meta.get("expiresAt")
        if cls is None or scope not in ("public", "private") or not isinstance(expires_at, int | float | None):
            await store.remove(sdk_store_key(key))
            return None
        try:
            value = cls.model_validate_json(item.body, by_alias=True)
        except ValidationError:
            await store.remove(sdk_store_key(key))
            return None
        return CacheEntry(value=value, scope=scope, expires_at=expires_at)

    async def set(self: _Primitives, key: CacheKey, entry: CacheEntry) -> None:
        store = self
        value = entry.value
        if not isinstance(value, mcp_types.Result) or _result_type(type(value).__name__) is not type(value):
            raise TypeError(f"cannot store a {type(value).__name__} in an mcpcache store")
        body = value.model_dump_json(by_alias=True, exclude_unset=True).encode()
        meta = {"type": type(value).__name__, "scope": entry.scope, "expiresAt": entry.expires_at}
        # An SDK entry is only ever served while fresh, so the store may drop it once it is not.
        item = Item(meta=meta, body=body, group=SDK_GROUP, created_at=store.now(), expires_at=entry.expires_at)
        await store.save(sdk_store_key(key), item)

    async def delete(self: _Primitives, key: CacheKey) -> None:
        await self.remove(sdk_store_key(key))

    async def clear(self: _Primitives) -> None:
        """Clears the SDK's entries only; the store's other contents are not the SDK's to drop."""
        await self.remove_group(SDK_GROUP)
