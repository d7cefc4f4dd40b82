"""Cache keys for tool results (docs/protocol.md section 5).

A key names (arm, server, partition, protocol era, tool, canonical arguments). `_meta` is never part of
it and arrays are never reordered. The fields are hashed as one JSON array, so no crafted value can
make two different tuples collide at a field boundary; the digest is SHA-256 because stores may be
shared by several principals, where a 64-bit or non-cryptographic hash could be made to collide.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import orjson
import xxhash

from mcpcache.etag import canonical_json

__all__ = ["READABLE_LIMIT", "Arm", "CallIdentity", "abbreviate", "readable_server"]

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

    def call_mark_key(self) -> str:
        """Where the time this call's entries were last invalidated (in this partition) is kept: the same for
        every protocol era and variant, so one invalidation reaches every stored copy of the call. Raises
        CanonicalizationError as `canonical_arguments` does.

        Read on every lookup, so it is xxh3-128 rather than SHA-256: a crafted collision could only make
        someone's entry stale (one more revalidation), never serve anyone a wrong answer."""
        head = orjson.dumps(["call", self.server, self.partition, self.tool])
        return "c:" + xxhash.xxh3_128_hexdigest(head + b"\x00" + self.canonical_arguments())

    def readable_arguments(self) -> str:
        """The canonical arguments as text a person can read, cut to `READABLE_LIMIT` characters."""
        return abbreviate(self.canonical_arguments().decode())


READABLE_LIMIT = 200
"""How many characters of a server or of arguments an entry keeps in clear, for people to read and list by."""


def abbreviate(text: str, limit: int = READABLE_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@functools.lru_cache(maxsize=256)
def readable_server(server_id: str) -> str:
    """The label a stored entry carries for its server: what a person recognises and lists by.

    A URL loses its query and fragment (where tokens travel); a stdio server is its command line (its
    environment, where credentials travel, was only ever kept as a digest); anything else (a `server_id` the
    user chose, one connection's id) is kept as it is. At most `READABLE_LIMIT` characters.
    """
    kind, _, rest = server_id.partition(":")
    if kind == "url":
        parts = urlsplit(rest)
        return abbreviate(urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")))
    if kind == "stdio":
        try:
            command, args, cwd, _ = json.loads(rest)
            line = shlex.join([str(command), *(str(arg) for arg in args)])
        except (ValueError, TypeError):
            return abbreviate(server_id)
        return abbreviate(f"stdio: {line}" + (f" (in {cwd})" if cwd else ""))
    return abbreviate(server_id)
