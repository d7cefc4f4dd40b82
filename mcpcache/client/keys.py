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
from dataclasses import dataclass, field
from typing import Any, Literal, final
from urllib.parse import urlsplit, urlunsplit

import orjson
import xxhash

from mcpcache.canonical import canonical_json
from mcpcache.key_arguments import KeyArguments

__all__ = ["READABLE_LIMIT", "Arm", "CallIdentity", "NamedCall", "abbreviate", "plain_arguments", "readable_server"]

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
    projection: str = ""
    """The rule `arguments` were projected by (`KeyArguments.label`; "": every argument the call sent): part of
    every key but the call's mark, so entries keyed by a projection never meet those keyed on every argument."""
    sent: Mapping[str, Any] | None = field(default=None, compare=False)
    """Every argument the call sends, when `arguments` is a projection of them (None: `arguments` are all)."""

    @property
    def sent_arguments(self) -> Mapping[str, Any]:
        """What the call sends to the server: every argument, whatever names its answer."""
        return self.sent if self.sent is not None else self.arguments

    @functools.cached_property
    def _canonical_arguments(self) -> bytes:
        return canonical_json(dict(self.arguments))

    def canonical_arguments(self) -> bytes:
        """Raises CanonicalizationError for arguments with no canonical form (such calls are not cached).

        Computed once per identity: a call needs it for each arm it looks in.
        """
        return self._canonical_arguments

    def _remembered(self) -> tuple[Any, ...] | None:
        """What names this call in `_KEYS`: every field, with the arguments as (name, type, value) triples,
        for arguments of a few plain values (str, int, bool, None); None for any other (computed each time).
        The type is part of it: `True == 1` and both hash alike, but their canonical JSON differs."""
        cached = self.__dict__.get("_memo", _UNSET)
        if cached is not _UNSET:
            return cached  # type: ignore[no-any-return]
        memo: tuple[Any, ...] | None = None
        triples = plain_arguments(self.arguments)
        if triples is not None:
            memo = (self.server, self.partition, self.era, self.tool, self.variant, self.projection, triples)
        self.__dict__["_memo"] = memo  # a frozen dataclass: set as cached_property sets its value
        return memo

    def key(self, arm: Arm, *, share_public: bool = False) -> str:
        """The store key of this call's entry in `arm`.

        A public entry leaves the partition out only when the user turned sharing on; otherwise public
        entries stay inside their partition like private ones.
        """
        memo = self._remembered()
        which = (arm, share_public, memo)
        if memo is not None and (known := _KEYS.get(which)) is not None:
            return known
        partition = None if arm == "public" and share_public else self.partition
        # Strings (and one None) only: their JSON is already canonical and holds no NaN to look for.
        fields = [arm, self.server, partition, self.era, self.tool, self.variant]
        if self.projection:  # absent otherwise, so the keys of every call without one stay as they were
            fields.append(self.projection)
        head = orjson.dumps(fields)
        digest = hashlib.sha256(head)
        digest.update(b"\x00")
        digest.update(self.canonical_arguments())
        key = "t:" + digest.hexdigest()
        if memo is not None:
            _keep(which, key)
        return key

    def mark_key(self) -> str:
        """Where the time this (server, partition) last ended freshness is kept."""
        which = ("mark", self.server, self.partition)
        known = _KEYS.get(which)
        if known is None:
            known = "m:" + hashlib.sha256(orjson.dumps([self.server, self.partition])).hexdigest()
            _keep(which, known)
        return known

    def call_mark_key(self) -> str:
        """Where the time this call's entries were last invalidated (in this partition) is kept: the same for
        every protocol era and variant, so one invalidation reaches every stored copy of the call. Raises
        CanonicalizationError as `canonical_arguments` does.

        Read on every lookup, so it is xxh3-128 rather than SHA-256: a crafted collision could only make
        someone's entry stale (one more revalidation), never serve anyone a wrong answer."""
        memo = self._remembered()
        which = ("call", memo)
        if memo is not None and (known := _KEYS.get(which)) is not None:
            return known
        head = orjson.dumps(["call", self.server, self.partition, self.tool])
        key = "c:" + xxhash.xxh3_128_hexdigest(head + b"\x00" + self.canonical_arguments())
        if memo is not None:
            _keep(which, key)
        return key

    def readable_arguments(self) -> str:
        """The canonical arguments as text a person can read, cut to `READABLE_LIMIT` characters."""
        return abbreviate(self.canonical_arguments().decode())


@final
@dataclass(frozen=True, slots=True)
class NamedCall:
    """A call named once: its identity (holding the one copy of its arguments the cache makes), its private
    store key, and the rule it was keyed by. A view's fresh check builds it (`ToolCache.fresh_hit`) and, on a
    miss, hands it to the driver's slow path (`ToolCache.execute(named=...)`), which takes it as it is."""

    identity: CallIdentity
    key: str
    rule: KeyArguments | None


_UNSET: Any = object()
_MEMO_MOST_ARGUMENTS = 8
_MEMO_LONGEST_STRING = 256
_KEYS: dict[tuple[Any, ...], str] = {}
"""The keys of calls made lately (of a few plain arguments: `CallIdentity._remembered`), so that a call made
again (a fresh hit) does not hash again; emptied when it reaches `_KEYS_MOST`."""
_KEYS_MOST = 8192


def _first(triple: tuple[str, type, Any]) -> str:
    return triple[0]


def plain_arguments(arguments: Mapping[str, Any]) -> tuple[tuple[str, type, Any], ...] | None:
    """Arguments of a few plain values (str, int, bool, None) as sorted (name, type, value) triples: a
    hashable name for them that two calls share exactly when their canonical JSON is the same; None for any
    other arguments. The type is part of it: `True == 1` and both hash alike, but their JSON differs."""
    if len(arguments) > _MEMO_MOST_ARGUMENTS:
        return None
    triples = []
    for name, value in arguments.items():
        kind = type(value)
        if type(name) is not str or not (kind is str or kind is int or kind is bool or value is None):
            return None
        if kind is str and len(value) > _MEMO_LONGEST_STRING:
            return None
        triples.append((name, kind, value))
    triples.sort(key=_first)
    return tuple(triples)


def _keep(which: tuple[Any, ...], key: str) -> None:
    if len(_KEYS) >= _KEYS_MOST:
        _KEYS.clear()
    _KEYS[which] = key


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
