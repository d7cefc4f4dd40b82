"""A store that cannot be had: what `default_store` hands over when the cache folder cannot be used.

Every operation raises the reason it cannot be had, so whoever uses it through a store fence
(`mcpcache.stores.fence`) meets a failing store: a miss, counted, said once in a line that names the real
reason (the folder and why), never a guess such as "the store holds a newer answer".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from mcpcache.stores.base import Store
from mcpcache.stores.items import DEFAULT_PAGE_SIZE, Item, Match, Page, Usage

__all__ = ["UnusableStore"]


class UnusableStore(Store):
    """Raises `error` (a fresh copy of it, with its message) from every operation."""

    def __init__(self, error: OSError) -> None:
        self.error = error

    def _fail(self) -> NoReturn:
        raise type(self.error)(str(self.error))

    async def load(self, key: str) -> Item | None:
        self._fail()

    async def save(self, key: str, item: Item) -> bool:
        self._fail()

    async def update_meta(
        self,
        key: str,
        meta: Mapping[str, Any],
        expires_at: float | None,
        *,
        if_tag: str | None = None,
        stamp: float | None = None,
    ) -> bool:
        self._fail()

    async def remove(self, key: str) -> None:
        self._fail()

    async def remove_group(self, group: str) -> int:
        self._fail()

    async def remove_created_before(self, group_prefix: str, created_before: float) -> int:
        self._fail()

    async def trim_group(self, group: str, max_bytes: int) -> int:
        self._fail()

    async def usage(self, group: str | None = None) -> Usage:
        self._fail()

    async def remove_all(self) -> None:
        self._fail()

    async def list_page(self, match: Match, cursor: str | None = None, limit: int = DEFAULT_PAGE_SIZE) -> Page:
        self._fail()
