"""Cache keys for tool results (docs/protocol.md section 5).

A key names (arm, server, partition, protocol era, tool, canonical arguments). `_meta` is never part of
it and arrays are never reordered. The fields are hashed as one JSON array, so no crafted value can
make two different tuples collide at a field boundary; the digest is SHA-256 because stores may be
shared by several principals, where a 64-bit or non-cryptographic hash could be made to collide.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from mcpcache.etag import canonical_json

Arm = Literal["private", "public"]


@dataclass(frozen=True)
class CallIdentity:
    """Everything that decides which stored answer a call may be served."""

    server: str
    partition: str
    era: str
    tool: str
    arguments: Mapping[str, Any]
    variant: str = ""
    """Anything else the caller sent that selects a different answer (e.g. FastMCP's tool `version`)."""

    @functools.cached_property
    def _canonical_arguments(self) -> bytes:
        return canonical_json(dict(self.arguments))

    def canonical_arguments(self) -> bytes:
        """Raises CanonicalizationError for arguments with no canonical form (such calls are not cached).

        Computed once per identity: a call needs it for each arm it looks in.
        """
        return self._canonical_arguments

    def key(self, arm: Arm, *, share_public: bool = False) -> str:
        """The store key of this call's entry in `arm`.

        A public entry leaves the partition out only when the user turned sharing on; otherwise public
        entries stay inside their partition like private ones.
        """
        partition = None if arm == "public" and share_public else self.partition
        # Strings (and one None) only: their JSON is already canonical and holds no NaN to look for.
        head = orjson.dumps([arm, self.server, partition, self.era, self.tool, self.variant])
        digest = hashlib.sha256(head)
        digest.update(b"\x00")
        digest.update(self.canonical_arguments())
        return "t:" + digest.hexdigest()

    def mark_key(self) -> str:
        """Where the time this (server, partition) last ended freshness is kept."""
        return "m:" + hashlib.sha256(orjson.dumps([self.server, self.partition])).hexdigest()
