"""Delta replies from the gateway: a caller that holds an older answer, and says it can apply a delta, is
sent the change only, whatever the upstream is (docs/gateway.md, "Delta replies").

The gateway has the full answer near the upstream (fetched, or from its store while fresh); the answer the
caller holds is in the store's history (`mcpcache.gateway.history`), recorded when the gateway sent it,
by this replica or another. The decisions are the server half's (`plan_delta`, `decide_delta` through
`mcpcache.server.deltas.delta_choice`): the gateway is a server using mcpcache for its callers. This module
only finds the two answers, records the one being sent, and does the CPU work off the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, assert_never

import anyio.to_thread
import mcp_types as mt

from mcpcache import delta
from mcpcache.canonical import CanonicalizationError, canonical_json
from mcpcache.etag import answer_digest
from mcpcache.gateway.decisions import Route, history_partition
from mcpcache.gateway.history import CallKey, StoreHistory
from mcpcache.protocol import Conditions, DeltaReply, Scope
from mcpcache.server.decisions import (
    AfterBody,
    Answer,
    AnswerNotModified,
    SendAsIs,
    SendDelta,
    SendFull,
    Stamp,
    TryDelta,
    plan_delta,
    saved_by,
    stub_refusal,
)
from mcpcache.server.deltas import THREAD_FROM_BYTES, delta_choice
from mcpcache.server.policies import CachePolicy
from mcpcache.server.stubs import NO_OUTPUT_SCHEMA, StubCheck

__all__ = ["DeltaCounters", "GatewayDeltas"]

logger = logging.getLogger("mcpcache.gateway")


@dataclass
class DeltaCounters:
    """What the gateway did with callers' requests for deltas, since it started (this process)."""

    sent: int = 0
    """Delta replies sent."""
    declined: int = 0
    """Requests that accepted a delta and got the full answer (the DEBUG log says why)."""
    bytes_saved: int = 0
    """The bytes the delta replies saved (`mcpcache.sizes`: each full answer less the delta reply sent
    instead, both as the wire carries them)."""


_CALLS_KEPT = 4096
"""Call keys kept by `GatewayDeltas.call_key`, emptied when full."""


@dataclass
class GatewayDeltas:
    """Records the answers the gateway sends through its store, and answers a caller's request for a delta."""

    history: StoreHistory
    counters: DeltaCounters = field(default_factory=DeltaCounters)
    _calls: dict[tuple[str, str, str, str, bytes], CallKey] = field(default_factory=dict, init=False, repr=False)

    @property
    def formats(self) -> tuple[str, ...]:
        """The delta formats the gateway sends (advertised in the extension's settings): the tree digest's
        (computed whole here: the gateway keeps no leaf hashes) and the whole-answer digest's."""
        return delta.FORMATS

    def call_key(
        self,
        route: Route,
        partition: str,
        era: str,
        arguments: Mapping[str, Any] | None,
        scope: Scope,
        canonical: bytes | None = None,
    ) -> CallKey | None:
        """Where this call's answers are kept in the history; None when they are not kept (the tool opted
        out, a private answer to an anonymous caller, arguments with no canonical form). `canonical`: the
        canonical JSON of `route.keyed(arguments)`, when the caller has it already."""
        if not route.settings.deltas or not route.settings.etag:
            return None
        owner = history_partition(scope, partition)
        if owner is None:
            return None
        if canonical is None:
            try:
                canonical = canonical_json(route.keyed(arguments))
            except CanonicalizationError:
                return None
        named = (owner, route.server_id, era, route.tool, canonical)
        call = self._calls.get(named)
        if call is None:
            # Kept, so that a call made again reuses its digest (a SHA-256 of the arguments) every time.
            if len(self._calls) >= _CALLS_KEPT:
                self._calls.clear()
            call = self._calls[named] = CallKey(*named)
        return call

    async def reply(
        self,
        route: Route,
        call: CallKey | None,
        conditions: Conditions,
        policy: CachePolicy,
        after: AfterBody,
        result: mt.CallToolResult,
        *,
        stub: StubCheck = NO_OUTPUT_SCHEMA,
    ) -> DeltaReply | None:
        """What goes to the caller instead of `after`'s reply: a delta reply, or None (send `after`'s).

        `result`: the answer with the block `after` would stamp on it. A full answer that is sent is
        recorded in the history (unless held), and a not-modified reply counts as a use of the version
        it confirms. `stub`: the tool's output schema, which a delta reply's stub must pass."""
        if call is None:
            return None
        match after:
            case SendAsIs():
                return None
            case AnswerNotModified():
                if conditions.etag is not None:
                    await self.history.touch(call, conditions.etag)
                return None
            case Stamp(block=block, reason=reason):
                pass
            case _:
                assert_never(after)
        tag = block.etag
        if tag is None:
            return None
        name = route.public_name
        refused = stub_refusal(name, policy, result.structured_content, stub) if conditions.accept_delta else None
        plan = plan_delta(policy, conditions, tag, offered=self.formats, kept=True, refused=refused)
        # The base is read before the new answer is recorded, which may push it out of its call's versions.
        base = await self.history.base(call, plan.base) if isinstance(plan, TryDelta) else None
        size = await self.history.record(call, tag, result)
        match plan:
            case SendFull(reason=why):
                if conditions.accept_delta:
                    self._declined(name, reason, why)
                return None
            case TryDelta():
                pass
            case _:
                assert_never(plan)
        if size is None and base is not None:
            self._declined(name, reason, "the answer is not kept in the history (too large, or the store failed)")
            return None
        meta_key = self.history.meta_key

        def work() -> SendDelta | SendFull:
            return delta_choice(
                name,
                policy,
                block,
                plan,
                result.structured_content,
                base=delta.document_of(base, meta_key) if base is not None else None,
                new_document=lambda: delta.document_of(result, meta_key),
                answer_size=size,
                digest=lambda: answer_digest(result.content, result.structured_content, result.meta, meta_key=meta_key),
                meta_key=meta_key,
                stub=stub,
            )

        choice = await anyio.to_thread.run_sync(work) if (size or 0) >= THREAD_FROM_BYTES else work()
        match choice:
            case SendDelta(reply=reply, reason=why):
                self.counters.sent += 1
                full = Answer(result.content, result.structured_content, result.is_error, result.meta)

                def saved() -> int:
                    return saved_by(reply, full, meta_key)

                large = (size or 0) >= THREAD_FROM_BYTES  # measuring serialises the answer once
                self.counters.bytes_saved += await anyio.to_thread.run_sync(saved) if large else saved()
                logger.debug("tool %r: %s", name, why)
                return reply
            case SendFull(reason=why):
                self._declined(name, reason, why)
                return None
            case _:
                assert_never(choice)

    def _declined(self, name: str, reason: str, why: str) -> None:
        self.counters.declined += 1
        logger.debug("tool %r: %s; full answer: %s", name, reason, why)
