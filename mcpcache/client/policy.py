"""The client cache's decisions (docs/protocol.md section 5), with no I/O and the time passed in.

Each question is answered by a pure function that returns a typed decision with a reason a person can
read:
- `decide_lookup`: given the stored entry (if any), what to do before sending anything;
- `decide_join`: whether a call may share an identical request already in flight;
- `decide_reply`: given what the server answered, what to return and what to keep (a delta reply: whether
  to patch the stored answer with it, `ApplyDelta`, or ask again in full);
- `decide_stale`: whether a stale entry may be served (at once while it is revalidated in the background,
  or in place of a server that could not answer), and why;
- `decide_unanswered`: whether a call whose outcome is unknown (its request may have left, no answer came)
  ends freshness as a write;
- `reply_block`, `store_arm`, `freshness_ended_at`, `ends_freshness`, `may_serve`: the smaller rules the
  driver would otherwise decide on its own.
The driver (`mcpcache.client.cache`) does exactly what the decision says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeGuard, get_args

from mcp.client.caching import CacheMode

from mcpcache.client.keys import Arm
from mcpcache.delta import FORMATS
from mcpcache.delta.spec import MAX_OPS
from mcpcache.protocol import (
    NOT_MODIFIED_KEY,
    STALE_IF_ERROR_KEY,
    STALE_WHILE_REVALIDATE_KEY,
    CacheBlock,
    DeltaBlock,
    MalformedDelta,
    Scope,
    parse_cache_block,
    unconfirmed,
    weak_equal,
)

__all__ = [
    "CACHE_MODES",
    "DEFAULT_MAX_ANSWER_BYTES",
    "DELTA_FORMATS",
    "NO_CACHE_BLOCK",
    "ApplyDelta",
    "CacheMode",
    "EndFreshness",
    "EntryMeta",
    "Fetch",
    "Join",
    "JoinFlight",
    "KeepFreshness",
    "Lookup",
    "NotStale",
    "RepeatWithoutTag",
    "Reply",
    "ReturnUnstored",
    "Revalidate",
    "SendOwn",
    "ServeFresh",
    "ServeStale",
    "ServeStored",
    "StaleChoice",
    "StaleWindow",
    "StoreAnswer",
    "Unanswered",
    "decide_join",
    "decide_lookup",
    "decide_reply",
    "decide_size",
    "decide_stale",
    "decide_unanswered",
    "delta_formats",
    "ended_by_a_write",
    "ends_freshness",
    "freshness_ended_at",
    "may_serve",
    "may_share",
    "readable_bytes",
    "readable_duration",
    "reply_block",
    "store_arm",
]

# `CacheMode` is the MCP SDK's own (`mcp.client.caching`), taken by mcpcache's `cache_mode=` too. use: serve
# and store; refresh: never serve, but store what comes back; bypass: leave the cache alone.
CACHE_MODES: tuple[CacheMode, ...] = get_args(CacheMode)


@dataclass(frozen=True)
class EntryMeta:
    """What is kept about a stored answer, apart from the answer itself."""

    tool: str
    scope: Scope
    ttl_ms: int
    etag: str | None
    requested_at: float
    """When the request that produced (or last revalidated) the entry was sent; a freshness end after this
    time makes the entry stale."""
    received_at: float
    size: int
    """Bytes of the answer as sent (its JSON, encoded plainly): what a fresh hit saves on the wire."""
    arguments: str = ""
    """The call's arguments as a person reads them, abbreviated (never part of any decision)."""
    marks: tuple[str, ...] = ()
    """The store keys of the marks that can end this entry's freshness (its server's and its call's), so that
    a reader of the store (`mcpcache cache ls`) judges freshness as the cache does."""
    stored: int = 0
    """Bytes of the stored body (what loading it moves), when it differs from `size`: an answer whose text
    repeats its structured content is stored with that text once (`mcpcache.client.entries`)."""
    stale_while_revalidate_ms: int = 0
    """How long after freshness ends the answer may be served at once while it is revalidated in the
    background (the server's `staleWhileRevalidateMs`; 0: never)."""
    stale_if_error_ms: int = 0
    """How long after freshness ends the answer may be served when the server cannot answer (its
    `staleIfErrorMs`; 0: never)."""
    era: str = ""
    """The protocol version the answer came in (part of the key, never of a decision here): what tells two
    entries of one call apart in `mcpcache cache ls` ("" for entries an earlier version stored)."""

    @property
    def stored_bytes(self) -> int:
        """Bytes of the stored body, as the save recorded them (records without `stored` kept it plain)."""
        return self.stored or self.size

    def fresh_until(self) -> float:
        return self.received_at + self.ttl_ms / 1000

    def servable_stale_s(self) -> float:
        """How long after freshness ends the entry may still be served stale, by either window."""
        return max(self.stale_while_revalidate_ms, self.stale_if_error_ms) / 1000

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "scope": self.scope,
            "ttlMs": self.ttl_ms,
            "etag": self.etag,
            "requestedAt": self.requested_at,
            "receivedAt": self.received_at,
            "size": self.size,
            "args": self.arguments,
            "marks": list(self.marks),
            **({"stored": self.stored} if self.stored else {}),
            **({STALE_WHILE_REVALIDATE_KEY: self.stale_while_revalidate_ms} if self.stale_while_revalidate_ms else {}),
            **({STALE_IF_ERROR_KEY: self.stale_if_error_ms} if self.stale_if_error_ms else {}),
            **({"era": self.era} if self.era else {}),
        }

    @classmethod
    def from_json(cls, raw: object) -> EntryMeta | None:
        """None for anything that is not a record this module wrote (a corrupt or foreign entry)."""
        if not isinstance(raw, dict):
            return None
        tool, scope, ttl, etag = raw.get("tool"), raw.get("scope"), raw.get("ttlMs"), raw.get("etag")
        requested, received, size = raw.get("requestedAt"), raw.get("receivedAt"), raw.get("size")
        if not isinstance(tool, str) or (scope != "private" and scope != "public"):
            return None
        if not _is_count(ttl) or not _is_count(size) or (etag is not None and not isinstance(etag, str)):
            return None
        if not _is_time(requested) or not _is_time(received):
            return None
        # Absent from entries an earlier version stored: those are read as they were. (Read on every lookup:
        # the checks are the cheapest that still refuse a wrong shape.)
        arguments, marks, stored, era = raw.get("args", ""), raw.get("marks"), raw.get("stored", 0), raw.get("era", "")
        if type(arguments) is not str or not _is_count(stored) or type(era) is not str:
            return None
        revalidate_ms, if_error_ms = raw.get(STALE_WHILE_REVALIDATE_KEY, 0), raw.get(STALE_IF_ERROR_KEY, 0)
        if not _is_count(revalidate_ms) or not _is_count(if_error_ms):
            return None
        kept: tuple[str, ...] = ()
        if marks is not None:
            if type(marks) is not list:
                return None
            kept = tuple(marks)
            if not all(type(mark) is str for mark in kept):
                return None
        return cls(
            tool, scope, ttl, etag, float(requested), float(received), size, arguments, kept, stored,
            revalidate_ms, if_error_ms, era,
        )  # fmt: skip


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_time(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


# Lookup decisions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeFresh:
    reason: str


@dataclass(frozen=True)
class Revalidate:
    etag: str
    reason: str


@dataclass(frozen=True)
class Fetch:
    """Send an ordinary call; keep the answer if it is cacheable (`store`)."""

    store: bool
    reason: str


Lookup = ServeFresh | Revalidate | Fetch


def readable_duration(value: float) -> str:
    """A duration as a person reads it: 2.1 s, 3.5 min, 2.0 h, 4.0 d."""
    if -60.0 < value < 60.0:  # the common case, on every fresh hit's reason
        return f"{value:.1f} s"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.1f} s"


def decide_lookup(mode: CacheMode, entry: EntryMeta | None, now: float, freshness_ended_at: float | None) -> Lookup:
    if mode == "bypass":
        return Fetch(store=False, reason="bypass: the cache is not consulted and nothing is stored")
    if mode == "refresh":
        return Fetch(store=True, reason="refresh: the stored entry is not served")
    if entry is None:
        return Fetch(store=True, reason="miss: nothing stored for this call")
    ended = ended_by_a_write(entry, freshness_ended_at)
    remaining = entry.fresh_until() - now
    if not ended and remaining > 0:
        return ServeFresh(f"fresh: {readable_duration(remaining)} of {entry.ttl_ms} ms left")
    if ended:
        assert freshness_ended_at is not None
        ago = readable_duration(now - freshness_ended_at)
        why = f"stale: freshness ended {ago} ago (a mutating call, a notification or an invalidation)"
    elif entry.ttl_ms == 0:
        why = "stale: ttl 0, revalidate before every reuse"
    else:
        why = f"stale: ttl {entry.ttl_ms} ms expired {readable_duration(-remaining)} ago"
    if entry.etag is not None:
        return Revalidate(entry.etag, f"{why}; revalidating with its tag")
    return Fetch(store=True, reason=f"{why}; no tag to revalidate with")


# Reply decisions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReturnUnstored:
    """Return the answer as it came; `drop_entry`: the stored entry is superseded and must go."""

    drop_entry: bool
    reason: str


@dataclass(frozen=True)
class StoreAnswer:
    meta: EntryMeta
    reason: str


@dataclass(frozen=True)
class ServeStored:
    """Not modified: serve the stored answer with `block` merged onto its `_meta`, and keep `meta`."""

    meta: EntryMeta
    block: CacheBlock
    reason: str


@dataclass(frozen=True)
class RepeatWithoutTag:
    """A not-modified reply that cannot be matched is never a result: ask again, unconditionally. So is a
    delta reply that cannot be used (`delta`: the reply was one; the outcome counts it)."""

    reason: str
    delta: bool = False


@dataclass(frozen=True)
class ApplyDelta:
    """A delta reply to the tag that was sent: build the new answer from a private copy of the stored one
    (`mcpcache.client.patching`), and if it verifies, return and keep it as `then` says, exactly as a full
    answer with the reply's block would be kept. If it does not, the call is asked again without a tag."""

    delta: DeltaBlock
    then: StoreAnswer | ReturnUnstored
    reason: str


Reply = ReturnUnstored | StoreAnswer | ServeStored | RepeatWithoutTag | ApplyDelta

DELTA_FORMATS: tuple[str, ...] = FORMATS
"""The delta formats the client cache applies, in its order of preference (docs/protocol.md section 11)."""

NO_CACHE_BLOCK = "the answer has no cache block"
"""Why an answer is not stored when its server stamps nothing (the proxy says once what would stamp it)."""


def delta_formats(deltas: bool) -> tuple[str, ...]:
    """What a conditional request lists under `acceptDelta` (`CacheSettings(deltas=...)`): nothing when off."""
    return DELTA_FORMATS if deltas else ()


def refused_delta(
    block: CacheBlock, sent_etag: str | None, accepted: tuple[str, ...], entry: EntryMeta | None, *, is_error: bool
) -> str | None:
    """Why a reply carrying a `delta` field cannot be used (the call is then asked again without a tag),
    or None when it is a delta against the stored answer the request named, in a format it accepted.

    Only what the reply itself shows is judged here; whether the ops apply to the stored answer and give the
    answer the digest names is found out by applying them (`mcpcache.client.patching`)."""
    delta = block.delta
    if isinstance(delta, MalformedDelta):
        return f"malformed delta reply: {delta.reason}"
    assert delta is not None
    if is_error:
        return "a delta reply marked as an error patches nothing"
    if block.not_modified:
        return "a reply that says both not-modified and delta is neither"
    if sent_etag is None:
        return "delta reply to a request that carried no tag"
    if not accepted:
        return "delta reply to a request that accepted none (deltas are off)"
    if delta.format not in accepted:
        return f"delta in format {delta.format[:64]!r}, which the request did not accept"
    if not weak_equal(delta.base, sent_etag):
        return "the delta's base is not the tag that was sent"
    if block.etag is None:
        return "the delta reply names no tag for the new answer"
    if len(delta.ops) > MAX_OPS:
        return f"the delta holds {len(delta.ops)} ops, more than the {MAX_OPS} a delta may hold"
    if entry is None:
        return "delta reply but the stored entry is gone"
    if entry.etag is None or not weak_equal(entry.etag, sent_etag):
        return "the stored entry changed while the request was in flight"
    return None


def decide_reply(
    *,
    tool: str,
    sent_etag: str | None,
    entry: EntryMeta | None,
    is_error: bool,
    block: CacheBlock | None,
    size: int,
    requested_at: float,
    received_at: float,
    store: bool,
    keep_private: bool = True,
    accepted: tuple[str, ...] = (),
) -> Reply:
    """`block` is the reply's parsed cache block (None when it has none); `size` its answer's bytes;
    `keep_private`: whether this cache may keep private answers (see `CacheSettings(keep_private=...)`);
    `accepted`: the delta formats the request listed (empty: it accepted none)."""
    if block is not None and block.delta is not None:
        why = refused_delta(block, sent_etag, accepted, entry, is_error=is_error)
        if why is not None:
            return RepeatWithoutTag(why, delta=True)
        assert isinstance(block.delta, DeltaBlock)
        # The new answer is kept as the same answer sent whole would be: the reply's block, minus the delta.
        then: StoreAnswer | ReturnUnstored
        if not store:  # never so: a bypass sends no tag, so no delta is accepted
            then = ReturnUnstored(drop_entry=False, reason="not stored: bypass")
        elif block.cache_scope == "private" and not keep_private:
            then = _private_unkept(entry)
        else:
            answer = block.model_copy(update={"delta": None})
            then = _full_answer(tool, entry, answer, size, requested_at, received_at)
        delta = block.delta
        return ApplyDelta(delta, then, f"delta reply ({delta.format}, {len(delta.ops)} op(s)) to the tag that was sent")
    if block is not None and block.not_modified:
        why = unconfirmed(block, sent_etag, is_error=is_error)
        if why is not None:
            return RepeatWithoutTag(why)
        assert sent_etag is not None  # a reply that confirms a tag confirms the one that was sent
        if entry is None:
            return RepeatWithoutTag("not-modified reply but the stored entry is gone")
        if entry.etag is None or not weak_equal(entry.etag, sent_etag):
            return RepeatWithoutTag("the stored entry changed while the request was in flight")
        refreshed = replace(
            entry,
            scope=block.cache_scope,
            ttl_ms=block.ttl_ms if block.ttl_ms is not None else 0,
            etag=block.etag,
            requested_at=requested_at,
            received_at=received_at,
            stale_while_revalidate_ms=block.stale_while_revalidate_ms or 0,
            stale_if_error_ms=block.stale_if_error_ms or 0,
        )
        return ServeStored(refreshed, block, "revalidated: the server confirmed the stored answer")
    if is_error:
        return ReturnUnstored(drop_entry=False, reason="error results are never stored")
    if block is None or not block.cacheable:
        return ReturnUnstored(drop_entry=entry is not None, reason=f"not stored: {NO_CACHE_BLOCK}")
    if not store:
        return ReturnUnstored(drop_entry=False, reason="not stored: bypass")
    if block.cache_scope == "private" and not keep_private:
        return _private_unkept(entry)
    return _full_answer(tool, entry, block, size, requested_at, received_at)


def _private_unkept(entry: EntryMeta | None) -> ReturnUnstored:
    # What is stored here (public answers) is superseded by this answer, which must not be kept.
    why = "not stored: private answers are not kept in this partition (it answers principals it cannot tell apart)"
    return ReturnUnstored(drop_entry=entry is not None, reason=why)


def _full_answer(
    tool: str, entry: EntryMeta | None, block: CacheBlock, size: int, requested_at: float, received_at: float
) -> StoreAnswer:
    meta = EntryMeta(
        tool=tool,
        scope=block.cache_scope,
        ttl_ms=block.ttl_ms if block.ttl_ms is not None else 0,
        etag=block.etag,
        requested_at=requested_at,
        received_at=received_at,
        size=size,
        stale_while_revalidate_ms=block.stale_while_revalidate_ms or 0,
        stale_if_error_ms=block.stale_if_error_ms or 0,
    )
    verb = "replaced" if entry is not None else "stored"
    if entry is not None and entry.etag is not None and meta.etag is not None and weak_equal(entry.etag, meta.etag):
        # What a server sends to the tag it issued when the tool's output schema refuses the not-modified
        # reply's {"kind": K} (docs/protocol.md section 4): the same answer, whole.
        verb = "replaced by the full answer under the same tag"
    tagged = "tagged" if meta.etag else "no tag"
    return StoreAnswer(meta, f"{verb}: {block.cache_scope}, ttl {meta.ttl_ms} ms, {tagged}")


DEFAULT_MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""The largest answer the tool cache stores, in stored bytes (`CacheSettings(max_answer_bytes=...)`)."""


def readable_bytes(value: int) -> str:
    """A size as a person reads it: 512 B, 3.5 KiB, 92.0 MiB, 1.2 GiB."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f} {unit}".replace(".0 ", " ")
    return f"{value} B"


def decide_size(stored_bytes: int, max_answer_bytes: int, *, at_least: bool = False) -> ReturnUnstored | None:
    """Whether an answer a `StoreAnswer` decision would keep is too large to keep (None: it is not).

    Past the bound it is passed to the caller as it came and neither stored nor held decoded: what a store
    can hold, and how long saving or loading may take (the deadlines grow with the bytes, up to this bound),
    must stay bounded whatever a server sends. The stored entry it supersedes goes, so the call is not
    later served an older answer as fresh. `at_least`: the size is a lower bound, known without encoding.
    """
    if stored_bytes <= max_answer_bytes:
        return None
    size = f"{'at least ' if at_least else ''}{readable_bytes(stored_bytes)}"
    why = f"not stored: the answer is {size} as stored, above max_answer_bytes ({readable_bytes(max_answer_bytes)})"
    return ReturnUnstored(drop_entry=True, reason=why)


def may_share(block: CacheBlock | None, keep_private: bool) -> bool:
    """Whether a follower of a single flight may be handed the leader's answer. A cache that keeps no private
    answers answers principals it cannot tell apart (`CacheSettings(keep_private=False)`), so it shares none
    between its callers either; it shares what it would keep."""
    return keep_private or (block is not None and block.cache_scope == "public")


def may_serve(entry: EntryMeta, arm: Arm, share_public: bool) -> bool:
    """A public-arm entry is served across partitions only if it says public and sharing is on."""
    if arm == "private":
        return True
    return entry.scope == "public" and share_public


def ends_freshness(*, read_only: bool | None, trusted: bool, answered_with_block: bool) -> bool:
    """Whether a call that reached the server ends the freshness of the server's entries in the partition.

    Annotations are believed only from a trusted server. A reply that carries a cache block is the
    server saying the call was a read, so it never ends freshness on its own.
    """
    if answered_with_block:
        return False
    return not (trusted and read_only is True)


@dataclass(frozen=True)
class EndFreshness:
    reason: str


@dataclass(frozen=True)
class KeepFreshness:
    reason: str


Unanswered = EndFreshness | KeepFreshness


def decide_unanswered(*, failure: str, read_only: bool | None, trusted: bool, stored: bool) -> Unanswered:
    """Whether a call that failed once its request may have left (`failure`: a timeout, a lost connection, a
    cancellation, an error) ends freshness: its outcome is unknown, so it does exactly as an answered write
    would, and a read leaves freshness alone as an answered read would.

    A read is a tool a trusted server annotated read-only, or a call whose stored answer (`stored`) came with
    a cache block: the server called it a read when it answered (`ends_freshness`); anything else may be a
    write the server applied before its answer was lost.
    """
    if not ends_freshness(read_only=read_only, trusted=trusted, answered_with_block=stored):
        what = "its stored answer came with a cache block" if stored else "annotated read-only by a trusted server"
        return KeepFreshness(f"{failure}; freshness not ended: a read ({what})")
    return EndFreshness(
        f"{failure}; its outcome is unknown, so freshness ends as after an answered write (the server may have "
        "applied it)"
    )


def reply_block(meta: object, meta_key: str) -> CacheBlock | None:
    """A reply's cache block, with `notModified` read strictly.

    The tolerant reading of the block makes a malformed `notModified` false, which would store and return
    a not-modified reply's empty stub as the answer. Here a claim in any form but absent, null or false is
    a claim: it must match the tag that was sent, or the call is asked again.
    """
    block = parse_cache_block(meta, meta_key)
    if block is None or block.not_modified:
        return block
    raw = meta.get(meta_key) if isinstance(meta, Mapping) else None
    if isinstance(raw, Mapping) and raw.get(NOT_MODIFIED_KEY) not in (None, False):
        return block.model_copy(update={"not_modified": True})
    return block


def store_arm(scope: Scope, share_public: bool) -> Arm:
    """Where an answer is kept: the shared arm only for a public answer with sharing turned on."""
    return "public" if scope == "public" and share_public else "private"


def freshness_ended_at(known_here: float | None, *stored_marks: object) -> float | None:
    """The latest end of freshness of an entry: what this process knows, or what the store's marks say
    (another process may have ended it: a mutation ends its server's entries in the partition, an
    invalidation one call's), whichever is later. A malformed mark is ignored."""
    latest = known_here
    for mark in stored_marks:
        if isinstance(mark, int | float) and not isinstance(mark, bool):
            latest = float(mark) if latest is None else max(latest, float(mark))
    return latest


# Single-flight decisions ------------------------------------------------------------------------


@dataclass(frozen=True)
class JoinFlight:
    reason: str


@dataclass(frozen=True)
class SendOwn:
    reason: str


Join = JoinFlight | SendOwn


def decide_join(
    flight_sent_at: float | None, freshness_ended_at: float | None, *, stored: bool, read_only: bool | None
) -> Join:
    """Whether a call may share an identical request (`flight_sent_at`: when the one in flight was sent, or
    None when there is none; the answer then says whether this call's own request may be shared).

    Only reads are shared: two identical calls of a tool that writes are two writes, and sharing one request
    would perform one of them and tell both callers theirs was done. A call is known to be a read when the
    server stamped a cache block on its answer before (`stored`) or annotated the tool read-only. (Believed
    from any server here: a wrong annotation can only merge this client's own identical calls.)
    And a call never shares a request sent before the partition's freshness last ended: its answer may
    predate a mutation the caller has already seen return (read-your-writes).
    """
    if not stored and read_only is not True:
        return SendOwn("not shared: the tool is not known to be a read (no stored answer, not annotated read-only)")
    if flight_sent_at is None:
        return JoinFlight("no identical call in flight; identical calls may share this one")
    if freshness_ended_at is not None and flight_sent_at <= freshness_ended_at:
        return SendOwn("the identical call in flight was sent before freshness last ended; sending a new one")
    return JoinFlight("sharing an identical call in flight")


# Serving stale (docs/protocol.md section 12) ----------------------------------------------------

StaleWindow = Literal["stale_while_revalidate", "stale_if_error"]
"""Which of an entry's stale windows a decision is about; also the outcome's status when it is served."""


@dataclass(frozen=True)
class ServeStale:
    """Serve the stored answer though it is not fresh: at once, while it is revalidated in the background
    (`stale_while_revalidate`), or in place of a server that could not answer (`stale_if_error`)."""

    window: StaleWindow
    reason: str


@dataclass(frozen=True)
class NotStale:
    """Serve nothing stale: the call goes on as it would without the window (or its failure is raised)."""

    reason: str


StaleChoice = ServeStale | NotStale


def ended_by_a_write(entry: EntryMeta, freshness_ended_at: float | None) -> bool:
    """Whether a freshness end (a mutating call, a notification, an invalidation, a clear) came after the
    request that produced the entry: it is then stale whatever its ttl, and never served stale."""
    return freshness_ended_at is not None and freshness_ended_at >= entry.requested_at


def decide_stale(window: StaleWindow, entry: EntryMeta, now: float, freshness_ended_at: float | None) -> StaleChoice:
    """Whether `entry` may be served under `window` at `now`: only within that many milliseconds after its
    freshness ended by its ttl, and never after a write ended it (a caller reads its own writes, whatever
    the server allows). For `stale_if_error` the caller has already met the server's failure."""
    name = window.replace("_", "-")
    if ended_by_a_write(entry, freshness_ended_at):
        return NotStale(f"not served {name}: its freshness was ended by a write (read-your-writes)")
    window_ms = entry.stale_while_revalidate_ms if window == "stale_while_revalidate" else entry.stale_if_error_ms
    if window_ms == 0:
        return NotStale(f"not served {name}: the server allows none")
    stale_for = now - entry.fresh_until()
    if stale_for > window_ms / 1000:
        return NotStale(f"not served {name}: stale for {readable_duration(stale_for)}, past its {window_ms} ms")
    age = f"stale for {readable_duration(max(stale_for, 0.0))}, within its {window_ms} ms"
    if window == "stale_while_revalidate":
        return ServeStale(window, f"{name}: {age}; served at once, revalidating in the background")
    return ServeStale(window, f"{name}: {age}; served the stored answer")
