"""The leaf hashes of stored answers, kept beside them so that a tree digest costs the change only.

A delta in the format `json-patch+splice/2` names the new answer by its tree digest
(`mcpcache.delta.tree`): the root over the hashes of the answer's leaves. A client that holds the leaf
hashes of the answer it patched rehashes only the leaves the ops touch; without them it hashes every leaf
once, which is what the whole-answer digest costs.

`LeafMemo` keeps them in memory for the answers this cache patched, by the exact stored version they
belong to: the store key, the tag and the checksum of the stored body (`mcpcache.stores.base.Item`). A
version is the same bytes only when all three agree, so hashes are never used for another answer stored
under the same tag (another process's, or a body that raced a validator). Bounded by count, least recently
used out first; each entry is about 40 bytes per leaf.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final

from mcpcache.delta.tree import Leaves

__all__ = ["DEFAULT_KEPT", "LeafMemo"]

DEFAULT_KEPT: Final = 256
"""Answers whose leaf hashes are kept: the large answers a session reads again after edits are few."""

Version = tuple[str, str, str]
"""(store key, tag, stored body's checksum)."""


class LeafMemo:
    """Leaf hashes by stored version, bounded."""

    def __init__(self, kept: int = DEFAULT_KEPT) -> None:
        self.kept = kept
        self._held: OrderedDict[Version, Leaves] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, tag: str | None, checksum: str) -> Leaves | None:
        if tag is None or not checksum:
            return None
        with self._lock:
            leaves = self._held.get((key, tag, checksum))
            if leaves is not None:
                self._held.move_to_end((key, tag, checksum))
            return leaves

    def put(self, key: str, tag: str | None, checksum: str, leaves: Leaves) -> None:
        if tag is None or not checksum or self.kept <= 0:
            return
        with self._lock:
            # One version per key: the older ones are the bases no delta will name again.
            for held in [held for held in self._held if held[0] == key]:
                del self._held[held]
            self._held[(key, tag, checksum)] = leaves
            while len(self._held) > self.kept:
                self._held.popitem(last=False)

    def __len__(self) -> int:
        return len(self._held)
