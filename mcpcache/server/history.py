"""The answers a server sent with tags, kept so that a later conditional call can get the change only.

A client that holds an older answer sends its tag; if the server still holds the answer it sent under
that tag, it can reply with ops that turn one into the other (a delta reply, docs/protocol.md section
11). `AnswerHistory` is that memory: for each (partition, tool, canonical arguments), the last few
answers sent, each under its tag, bounded in bytes overall, least recently used out first.

What a version holds, and why. The history must give back exactly what was sent, later, whatever the
tool does meanwhile with the objects it answered. Strings are immutable, so a text block's text (most of
an answer, often) is held as the very string that was sent; everything mutable (structured content,
`_meta`, a block holding more than strings) is held as its JSON bytes, written once when the answer is
recorded (about a millisecond for the 5 MB structured content of a large notebook) and read back only
when a delta is computed. So what is counted is what is held: the size of each string and bytes object
(`sys.getsizeof`, which also sees that a string with one emoji stores four bytes per character), plus a
fixed allowance for the containers around them. Nothing uncounted is kept.

Partitions keep private answers apart: a version is found only under the partition it was recorded in,
so a caller is never sent a delta computed against an answer another caller received (the ops would
reveal its shape). Answers of tools declared public are kept in one shared partition, as their scope
allows.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

import orjson
from pydantic import BaseModel

from mcpcache.canonical import CanonicalizationError, _reject_non_finite
from mcpcache.etag import meta_without_block, wire_content
from mcpcache.protocol import META_KEY, opaque_tag

__all__ = [
    "ANONYMOUS",
    "DEFAULT_HISTORY_BYTES",
    "PUBLIC",
    "UNKNOWN",
    "VERSIONS_PER_KEY",
    "AnswerHistory",
    "HistoryKey",
    "HistoryStats",
    "Partition",
    "Version",
    "version_of",
]

DEFAULT_HISTORY_BYTES: Final = 64 * 1024 * 1024
"""The history's bound when none is given: room for a few versions of a few multi-megabyte answers."""

VERSIONS_PER_KEY: Final = 4
"""Versions kept per (partition, tool, arguments): a client more than three edits behind gets the full
answer, which after that many changes is rarely much larger than the delta would be."""

_VERSION_OVERHEAD: Final = 512
"""Bytes allowed per version for what is not a string or bytes object: the version itself, its tuple of
blocks, the dictionaries of the blocks held as such, and its places in the two indexes (measured with
tracemalloc: about 450 bytes for a one-block answer)."""


@dataclass(frozen=True)
class Partition:
    """Whose answers a version may serve as a base for.

    `anonymous`: every caller without a verified identity (stdio, HTTP without auth) shares one.
    `public`: answers of tools declared public, shared by everybody. `caller`: one verified identity,
    as the framework's token verifier vouched for it (client id, issuer, subject) with its scopes, the
    same components the MCP SDK binds sessions to; a caller whose token is refreshed keeps its partition.
    `unknown`: a token was there but could not be read; nothing is kept or looked up for such a call.
    """

    kind: Literal["anonymous", "public", "caller", "unknown"]
    principal: tuple[str | None, ...] = ()

    @classmethod
    def caller(cls, client_id: str, issuer: str | None, subject: str | None, scopes: Iterable[str]) -> Partition:
        return cls("caller", (client_id, issuer, subject, *sorted(set(scopes))))


ANONYMOUS: Final = Partition("anonymous")
PUBLIC: Final = Partition("public")
UNKNOWN: Final = Partition("unknown")


@dataclass(frozen=True)
class HistoryKey:
    """What a version answers: a tool called with these arguments (their canonical JSON), for a partition."""

    partition: Partition
    tool: str
    arguments: bytes


Block = dict[str, str] | bytes
"""A content block as held: its wire dictionary when every value is a string, else its JSON bytes."""

StructuredInText: TypeAlias = Literal["plain", "wrapped"] | None
"""Whether an answer's structured content is the JSON in its one text block ("plain"), or that JSON
wrapped as `{"result": ...}` ("wrapped"), as a framework that writes the text from the structured value
guarantees (FastMCP's conversion of a returned dict); None: not known to be."""


@dataclass(slots=True)
class Derived:
    """What a version's delta work found once and keeps for the next delta against it (each computed when
    first needed and then only read, so two calls racing to fill one are harmless), counted in the
    history's bytes once set (`AnswerHistory.recount`):

    - `leaves`: the tree digest's leaf hashes (`mcpcache.delta.tree`), so a delta from this version
      rehashes only the leaves its ops touch;
    - `layout`, `text_sizes`: where each part's JSON lies in the text, and the text's sizes;
    - `raw`, `raw_domain`: the hashes of the parts of the tool's return value this version was converted
      from (`mcpcache.server.raw_deltas.RawLeaves`), and the tag domain they were computed in.

    The last three serve deltas computed from the return value's change (`mcpcache.server.raw_deltas`).
    """

    leaves: Any = None
    layout: Any = None
    text_sizes: tuple[int, int] | None = None
    raw: Any = None
    raw_domain: bytes | None = None

    def cost(self) -> int:
        """About the bytes these hold: a hash (a bytes object and its place) 80, an integer 36."""
        total = 0
        leaves = self.leaves
        if leaves is not None:
            total += 80 * (len(leaves.blocks) + 1)
            for member in (leaves.members or {}).values():
                total += 80 * (len(member) if isinstance(member, tuple) else 1)
        layout = self.layout
        if layout is not None:
            total += 72 * len(layout.heads)  # a head and a value, each an int and its place
            total += sum(sys.getsizeof(value) for value in layout.values if not isinstance(value, int))
        total += sum(sys.getsizeof(member) + 100 for member in (self.raw or {}).values())  # and its place
        return total


@dataclass(frozen=True, slots=True)
class Version:
    """One answer as it was sent, in a form nothing outside can change (see the module docstring)."""

    content: tuple[Block, ...]
    structured: bytes | None
    meta: bytes | None
    size: int
    """The bytes this version holds (strings and bytes objects, plus `_VERSION_OVERHEAD`)."""
    json_size: int
    """A lower bound of the length of the answer's document as compact JSON (string values counted in
    code points, before escaping): what "half the answer" is measured against."""
    structured_in_text: StructuredInText = None
    """Set: the structured content is not held apart (`structured` is None) but read from the text."""
    derived: Derived = field(default_factory=Derived, compare=False, repr=False)

    def document(self) -> dict[str, Any]:
        """The answer's document (`mcpcache.delta.answer_document`), built anew: the caller may keep it.
        Raises `orjson.JSONDecodeError` if what it holds is not JSON (it always is, unless a framework
        broke its promise that a text block is the JSON of the structured content)."""
        document: dict[str, Any] = {
            "content": [dict(block) if isinstance(block, dict) else orjson.loads(block) for block in self.content]
        }
        if self.structured_in_text is not None:
            first = self.content[0]
            assert isinstance(first, dict)  # version_of keeps the text block as a dict of strings
            value = orjson.loads(first["text"])
            document["structuredContent"] = {"result": value} if self.structured_in_text == "wrapped" else value
        elif self.structured is not None:
            document["structuredContent"] = orjson.loads(self.structured)
        if self.meta is not None:
            document["_meta"] = orjson.loads(self.meta)
        return document


def _json_bytes(value: Any, *, finite: bool) -> bytes:
    """`value`'s compact JSON, keys in their order. orjson writes NaN and the infinities as null, which
    would make a version that differs from what was sent: unless `finite` says the value was checked
    already, a null in the output is looked into."""
    data = orjson.dumps(value)
    if not finite and b"null" in data:
        _reject_non_finite(value)
    return data


def version_of(
    content: Iterable[BaseModel | Mapping[str, Any]],
    structured_content: Any,
    meta: Mapping[str, Any] | None,
    meta_key: str = META_KEY,
    *,
    finite: bool = False,
    structured_in_text: StructuredInText = None,
) -> Version | None:
    """The answer as a `Version`, or None when some part of it has no JSON form (an integer beyond 64
    bits, NaN, a key that is not a string, a lone surrogate): such an answer is never a base.

    `finite`: the answer is known to hold no NaN or infinity (its tag was hashed from it, or from the raw
    value it was converted from, and both refuse them), so the look for them (half a millisecond on a
    5 MB notebook) is skipped. `structured_in_text`: the framework guarantees that the one text block is
    the JSON of the structured content (see `StructuredInText`), which is then not serialised and kept a
    second time: recording such an answer costs next to nothing, and it is held once."""
    try:
        blocks: list[Block] = []
        size = _VERSION_OVERHEAD
        json_size = 64
        for block in wire_content(content):
            if all(type(value) is str for value in block.values()):
                held: dict[str, str] = block
                blocks.append(held)
                for name, value in held.items():
                    size += sys.getsizeof(value)
                    json_size += len(name) + len(value) + 6
            else:
                serialised = _json_bytes(block, finite=finite)
                blocks.append(serialised)
                size += sys.getsizeof(serialised)
                json_size += len(serialised) + 1
        in_text = structured_in_text if _text_holds(blocks, structured_content, structured_in_text) else None
        if in_text is not None:
            structured = None
            first = blocks[0]
            assert isinstance(first, dict)  # _text_holds checked
            json_size += len(first["text"])  # the structured content is as long as the JSON it is read from
        elif structured_content is None:
            structured = None
        else:
            structured = _json_bytes(structured_content, finite=finite)
        rest = meta_without_block(meta, meta_key)
        meta_bytes = None if rest is None else _json_bytes(rest, finite=finite)
    except (TypeError, orjson.JSONEncodeError, CanonicalizationError):
        return None
    for data in (structured, meta_bytes):
        if data is not None:
            size += sys.getsizeof(data)
            json_size += len(data)
    return Version(tuple(blocks), structured, meta_bytes, size, json_size, in_text)


def _text_holds(blocks: list[Block], structured_content: Any, claimed: StructuredInText) -> bool:
    """The shape the claim needs: one text block held as strings, and an object of structured content
    (the claim itself, that the text is its JSON, is the framework's)."""
    if claimed is None or len(blocks) != 1 or type(structured_content) is not dict:
        return False
    block = blocks[0]
    if not isinstance(block, dict) or block.get("type") != "text" or "text" not in block:
        return False
    return claimed == "plain" or (len(structured_content) == 1 and "result" in structured_content)


@dataclass
class HistoryStats:
    """What the history holds now, and what it let go."""

    bytes: int = 0
    versions: int = 0
    keys: int = 0
    evicted: int = 0
    """Versions dropped to stay within the byte bound (not those a key's fifth version pushed out)."""
    refused: int = 0
    """Answers not kept because one alone would take more than half the bound."""


@dataclass
class AnswerHistory:
    """The answers sent with tags, by key and tag; bounded in bytes (`max_bytes`) overall and in
    versions per key, least recently used out first.

    Every method is synchronous and takes a lock, so the indexes never disagree even if two threads
    share one server adapter; none of them does I/O or more than dictionary work.
    """

    max_bytes: int = DEFAULT_HISTORY_BYTES
    versions_per_key: int = VERSIONS_PER_KEY
    stats: HistoryStats = field(default_factory=HistoryStats)
    _lru: OrderedDict[tuple[HistoryKey, str], tuple[Version, int]] = field(default_factory=OrderedDict, repr=False)
    _tags: dict[HistoryKey, OrderedDict[str, None]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.max_bytes < 0:
            raise ValueError(f"the history's bound must be >= 0 bytes, got {self.max_bytes}")
        if self.versions_per_key < 1:
            raise ValueError(f"versions_per_key must be >= 1, got {self.versions_per_key}")

    def get(self, key: HistoryKey, tag: str) -> Version | None:
        """The version sent under a tag weakly equal to `tag` for `key`, now the most recently used."""
        opaque = opaque_tag(tag)
        if opaque is None:
            return None
        slot = (key, opaque)
        with self._lock:
            held = self._lru.get(slot)
            if held is None:
                return None
            self._lru.move_to_end(slot)
            self._tags[key].move_to_end(opaque)
            return held[0]

    def touch(self, key: HistoryKey, tag: str) -> None:
        """A not-modified reply confirmed this version: it is the one the caller holds, keep it longest."""
        self.get(key, tag)

    def record(self, key: HistoryKey, tag: str, version: Version) -> bool:
        """Keep `version` as the answer sent under `tag` for `key`. Returns whether it was kept.

        A version that alone would take more than half the bound is refused (a delta needs two: the base
        and the new answer), and so as not to keep another answer under the same tag, any version held
        under that tag is dropped. Recording a tag already held replaces its version (the driver looks a
        tag up before it records one, and records only tags it does not hold).
        """
        opaque = opaque_tag(tag)
        if opaque is None:
            return False
        slot = (key, opaque)
        # Each version holds its own key (its arguments' bytes) and tag: counted with it.
        cost = version.size + sys.getsizeof(key.arguments) + sys.getsizeof(key.tool) + sys.getsizeof(opaque)
        with self._lock:
            if slot in self._lru:
                self._drop(slot)
            if cost > self.max_bytes // 2:
                self.stats.refused += 1
                return False
            tags = self._tags.get(key)
            if tags is None:
                tags = self._tags[key] = OrderedDict()
                self.stats.keys += 1
            self._lru[slot] = (version, cost)
            tags[opaque] = None
            self.stats.bytes += cost
            self.stats.versions += 1
            while len(tags) > self.versions_per_key:
                self._drop((key, next(iter(tags))))
            while self.stats.bytes > self.max_bytes:
                self._drop(next(iter(self._lru)))
                self.stats.evicted += 1
            return True

    def attach_raw(self, key: HistoryKey, tag: str, leaves: Any, domain: bytes) -> None:
        """Keep `leaves`, the hashes of the parts of the return value the version under `tag` was converted
        from (computed in `domain`), beside it: a delta from it may then be computed from the change."""
        opaque = opaque_tag(tag)
        if opaque is None:
            return
        with self._lock:
            held = self._lru.get((key, opaque))
            if held is None or held[0].derived.raw is not None:
                return
            derived = held[0].derived
            derived.raw, derived.raw_domain = leaves, domain
        self.recount(key, tag)

    def recount(self, key: HistoryKey, tag: str) -> None:
        """Count again what the version under `tag` holds, now that its delta work kept more beside it
        (`Derived`); the bound is then kept as on recording."""
        opaque = opaque_tag(tag)
        if opaque is None:
            return
        slot = (key, opaque)
        with self._lock:
            held = self._lru.get(slot)
            if held is None:
                return
            version, cost = held
            now = version.size + version.derived.cost() + sys.getsizeof(key.arguments)
            now += sys.getsizeof(key.tool) + sys.getsizeof(opaque)
            if now == cost:
                return
            self._lru[slot] = (version, now)
            self.stats.bytes += now - cost
            while self.stats.bytes > self.max_bytes and len(self._lru) > 1:
                self._drop(next(iter(self._lru)))
                self.stats.evicted += 1

    def _drop(self, slot: tuple[HistoryKey, str]) -> None:
        key, opaque = slot
        _, cost = self._lru.pop(slot)
        self.stats.bytes -= cost
        self.stats.versions -= 1
        tags = self._tags[key]
        del tags[opaque]
        if not tags:
            del self._tags[key]
            self.stats.keys -= 1

    def snapshot(self) -> HistoryStats:
        with self._lock:
            return HistoryStats(**vars(self.stats))
