"""What the cache did for one call (`CallOutcome`), and the running totals a `ToolCache` keeps (`CacheStats`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, assert_never

Status = Literal["fresh_hit", "revalidated", "patched", "miss", "bypass", "stale_while_revalidate", "stale_if_error"]


_set_attribute = object.__setattr__


@dataclass(frozen=True)
class CallOutcome:
    """What the cache did for one call, in terms a caller can log or assert on."""

    status: Status
    """fresh_hit: served with no request; revalidated: the server said not-modified; patched: the server sent
    the change (a delta reply) and the stored answer, patched and verified, was served and stored as the new
    answer; miss: a full answer came over the wire; bypass: the cache was not consulted;
    stale_while_revalidate: the stored answer, no longer fresh, served at once while a revalidation runs in
    the background; stale_if_error: the stored answer, no longer fresh, served because the server could not
    answer (the reason says how it failed)."""
    stored: bool
    """Whether the answer went into the store. For `patched`, the store write happens just after the answer is
    returned (`ToolCache.flush()` waits for it), and the store keeps it only if it holds nothing newer:
    `CacheStats.stored` and `not_stored` count what landed."""
    reason: str
    bytes_saved: int = 0
    coalesced: bool = False
    """True when this call waited for an identical call in flight instead of sending its own."""
    fresh_for_ms: int | None = None
    """Fresh hits: how much longer the stored answer stays fresh (what a cache serving other clients, such as
    `mcpcache gateway`, hands on as their ttlMs instead of the whole ttl again). None otherwise."""
    delta_unused: str | None = None
    """Why a delta reply the server sent could not be used (the call was then asked again in full, without a
    tag): its base no longer held, ops that do not apply, a digest that does not match, a malformed or
    unasked delta. None when no delta reply was refused."""

    def __init__(
        self,
        status: Status,
        stored: bool,
        reason: str,
        bytes_saved: int = 0,
        coalesced: bool = False,
        fresh_for_ms: int | None = None,
        delta_unused: str | None = None,
    ) -> None:
        # What the generated frozen __init__ does with one write instead of a frozen write per field (a
        # third of the cost): every call builds one, a fresh hit in about 15 us all told.
        _set_attribute(
            self,
            "__dict__",
            {
                "status": status,
                "stored": stored,
                "reason": reason,
                "bytes_saved": bytes_saved,
                "coalesced": coalesced,
                "fresh_for_ms": fresh_for_ms,
                "delta_unused": delta_unused,
            },
        )


@dataclass
class CacheStats:
    """What one `ToolCache` did since it was made (`ToolCache.stats`): its calls by outcome, and its store's
    failures. Counted in this process only."""

    calls: int = 0
    """Calls answered, whatever the outcome."""
    fresh_hits: int = 0
    """Calls served from the cache without asking the server."""
    revalidations: int = 0
    """Calls the server answered "not modified": the stored answer was served."""
    patched: int = 0
    """Calls answered by patching the stored answer with a delta reply (docs/client.md, "Delta replies")."""
    deltas_unused: int = 0
    """Delta replies that could not be used: each call was asked again in full (`CallOutcome.delta_unused`)."""
    misses: int = 0
    """Calls the server answered in full."""
    bypasses: int = 0
    """Calls made with the cache bypassed: nothing looked up, nothing stored."""
    stored: int = 0
    """Answers that came from the server (whole, or patched from a delta reply) and were stored."""
    not_stored: int = 0
    """Answers from the server that were not stored (the outcome's reason says why)."""
    coalesced: int = 0
    """Calls answered by another identical call's request in flight at the same moment."""
    store_failures: int = 0
    """Store operations that raised or missed the store deadline (each one was a miss or a skipped write)."""
    bytes_saved: int = 0
    """Answer bytes that did not cross the wire: whole answers on fresh hits, answer minus the
    not-modified reply on revalidations, answer minus the delta reply on patched calls."""
    stale_while_revalidate: int = 0
    """Calls served a stale answer at once while it was revalidated in the background."""
    stale_if_error: int = 0
    """Calls served a stale answer because the server could not answer."""
    background_revalidations: int = 0
    """Revalidations started in the background for stale answers served at once (one per entry at a time)."""
    background_failures: int = 0
    """Background revalidations that failed (the server unreachable, an error, a timeout, close()): never a
    caller's failure; the entry stays as it was."""
    resent: int = 0
    """Requests sent once more because their exchange was lost after they were sent, the tool being annotated
    read-only or idempotent by a trusted server (docs/client.md, "Idempotent tools")."""

    def record(self, outcome: CallOutcome) -> None:
        self.calls += 1
        self.bytes_saved += outcome.bytes_saved
        if outcome.delta_unused is not None and not outcome.coalesced:
            self.deltas_unused += 1
        if outcome.coalesced:
            self.coalesced += 1
            return
        match outcome.status:
            case "fresh_hit":
                self.fresh_hits += 1
            case "revalidated":
                self.revalidations += 1
            case "patched":
                self.patched += 1
            case "miss":
                self.misses += 1
            case "bypass":
                self.bypasses += 1
            case "stale_while_revalidate":
                self.stale_while_revalidate += 1
            case "stale_if_error":
                self.stale_if_error += 1
            case _:
                assert_never(outcome.status)
        if outcome.status in ("miss", "bypass", "patched"):
            if outcome.stored:
                self.stored += 1
            else:
                self.not_stored += 1

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))
