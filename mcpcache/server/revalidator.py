"""The server half's driver: runs validators, the body and the hash when told to, and never decides.

An adapter presents one call of a declared tool as a `ToolCall` (what was asked, who asked, and how to
run the body and read its result); `Revalidator.run` hands what it finds to the decisions
(`mcpcache.server.decisions`) and returns an `Outcome` telling the adapter what to send: the body's result
untouched (`PassThrough`), the result with a cache block merged into its `_meta` (`Stamped`), a
not-modified reply (`NotModified`) or a delta reply (`DeltaSent`). Each outcome is counted in the
driver's `ServerStats`, set on the current OpenTelemetry span and counted on its meter (`telemetry`), and
its reason logged.

Every stamped full answer (and every delta's new answer) is recorded in the driver's `AnswerHistory`
under its tag, so that a later call holding that tag can be sent the change only.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar, assert_never

import anyio.to_thread
import orjson

from mcpcache import delta
from mcpcache.canonical import CanonicalizationError, canonical_json
from mcpcache.delta.tree import leaves_of, root_of, updated
from mcpcache.etag import answer_digest, content_tag, validator_tag
from mcpcache.protocol import (
    META_KEY,
    NO_CONDITIONS,
    CacheBlock,
    Conditions,
    DeltaReply,
    NotModifiedReply,
    answer_kind,
    read_conditions,
)
from mcpcache.server.decisions import (
    Answer,
    AnswerNotModified,
    AnswerSizes,
    BelowTagging,
    DeltaChoice,
    NotAnAnswer,
    RawPending,
    RunBody,
    SendAsIs,
    SendDelta,
    SendFull,
    SkipBody,
    Stamp,
    TryDelta,
    decide_after_body,
    decide_before_body,
    decide_block,
    decide_delta,
    full_answer_bytes,
    history_partition,
    needs_content_tag,
    plan_delta,
    stub_refusal,
    text_answer_bytes,
    validator_matches,
)
from mcpcache.server.deltas import THREAD_FROM_BYTES, delta_choice
from mcpcache.server.history import (
    DEFAULT_HISTORY_BYTES,
    AnswerHistory,
    HistoryKey,
    Partition,
    StructuredInText,
    Version,
    version_of,
)
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.server.raw_deltas import raw_delta
from mcpcache.server.stubs import NO_OUTPUT_SCHEMA, StubCheck
from mcpcache.server.telemetry import Outcome as Reported
from mcpcache.server.telemetry import ServerTelemetry

__all__ = [
    "DeltaSent",
    "NotModified",
    "Outcome",
    "PassThrough",
    "Revalidator",
    "ServerStats",
    "Stamped",
    "ToolCall",
]

logger = logging.getLogger("mcpcache.server")

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


# What the adapter sends ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PassThrough(Generic[R]):
    """Send the body's result exactly as it was."""

    result: R
    reason: str


@dataclass(frozen=True)
class Stamped(Generic[R]):
    """Send the body's result with `block` merged into its `_meta`.

    `delta_declined`: the request accepted a delta, and the full answer goes instead (`reason` says why).
    """

    result: R
    block: CacheBlock
    reason: str
    delta_declined: bool = False


@dataclass(frozen=True)
class NotModified:
    """Send `reply` instead of the answer.

    `body_ran`: False when a validator matched and the body never ran. `converted`: False when the tag
    was computed below the adapter and the answer was never built. `saved`: the bytes the reply saved
    (`mcpcache.sizes`), when the answer was measured (never when the body did not run).
    """

    reply: NotModifiedReply
    body_ran: bool
    reason: str
    converted: bool = True
    saved: int | None = None


@dataclass(frozen=True)
class DeltaSent:
    """Send `reply` (a delta reply) instead of the answer. `size`: the length of the ops' JSON; `saved`:
    the bytes the reply saved (`mcpcache.sizes`)."""

    reply: DeltaReply
    reason: str
    size: int
    saved: int


Outcome = PassThrough[R] | Stamped[R] | NotModified | DeltaSent


# Counters -----------------------------------------------------------------------------------------


@dataclass
class ServerStats:
    """What one server adapter did with the calls of its declared tools, since it was made.

    Undeclared tools are not counted: they never reach mcpcache's logic. Every declared call counts in
    exactly one of `stamped`, `not_modified`, `deltas_sent`, `errors_passed` and `passed_through` (a call
    cancelled while the body runs counts in none).
    """

    stamped: int = 0
    """Full answers sent with a cache block."""
    deltas_declined: int = 0
    """Of `stamped`: the request accepted a delta, and the full answer went instead (the log at DEBUG says
    why: base not held, delta larger than half the answer, ...)."""
    not_modified: int = 0
    """Not-modified replies sent, by whatever path (the three kinds below and after a hashed answer)."""
    body_skipped: int = 0
    """Of `not_modified`: a validator named the version, so the tool's body never ran."""
    conversion_skipped: int = 0
    """Of `not_modified`: the raw return value's tag matched, so the body ran but its answer was never
    built (FastMCP only)."""
    errors_passed: int = 0
    """Error results sent as they were, and tools that raised: never stamped, never not-modified."""
    passed_through: int = 0
    """Results sent untouched for another reason: not a tool answer (input required), or an answer a
    mounted server's own mcpcache layer stamped."""
    deltas_sent: int = 0
    """Delta replies sent: the answer changed, and only the change went."""
    bytes_saved: int = 0
    """The bytes not sent, where known (`mcpcache.sizes`: the full answer less the reply sent in its place,
    both as the wire carries them), over not-modified and delta replies. A not-modified reply whose body
    never ran (a validator matched) adds nothing: the answer was never made, so its size is not known."""

    def snapshot(self) -> ServerStats:
        """A copy that later calls do not change."""
        return replace(self)


def _is_async_callable(fn: object) -> bool:
    """A coroutine function, seen through `functools.partial` and callable objects, as FastMCP decides
    whether a tool runs on the loop or in a worker thread."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or (callable(fn) and inspect.iscoroutinefunction(fn.__call__))


class ToolCall(Protocol[R_co]):
    """One call of a declared tool, as an adapter hands it to `Revalidator.run`."""

    @property
    def tool(self) -> str:
        """The tool's name as called."""

    @property
    def arguments(self) -> Mapping[str, Any] | None: ...

    @property
    def request_meta(self) -> object:
        """The request's `_meta`, where a conditional call carries its tag."""

    @property
    def partition(self) -> Partition:
        """Who is asking, as far as the framework verified it (`ANONYMOUS` without a verified identity).
        Read only when the answer is to be recorded or a delta looked up."""

    @property
    def policy(self) -> CachePolicy | None:
        """The tool's declaration when the adapter resolved it (FastMCP: from the tool's own `meta` or its
        function); None: looked up by name in the driver's policies."""

    @property
    def memo_inside(self) -> bool:
        """A response memo sits between the adapter and the body."""

    @property
    def memo_outside(self) -> bool:
        """A response memo sits above the adapter."""

    @property
    def tags_below(self) -> bool:
        """`run_body_tagged` may be used: nothing between the adapter and the tool changes the answer."""

    async def run_body(self) -> R_co:
        """Run the tool and return the adapter's result."""

    async def run_body_tagged(self, tagging: BelowTagging) -> R_co:
        """Run the tool like `run_body`, letting the layer below tag the answer from a cheaper exact form
        (see `BelowTagging`). Called only when `tags_below`, whenever the tag comes from the answer."""

    def read_answer(self, result: Any) -> Answer | NotAnAnswer | None:
        """The answer in a result, or None / a `NotAnAnswer` for a result to send as it is."""

    async def has_structured_output(self) -> bool | None:
        """Whether the tool answers with structured content (None: not known)."""

    async def stub_check(self) -> StubCheck:
        """The tool's output schema, which the stub of a not-modified or delta reply must pass
        (`StubCheck.unknown` when the adapter cannot see it). Asked only of a call that carries a tag."""


@dataclass(frozen=True)
class _Facts:
    """What the driver knows about an answer beyond the answer itself, for recording it in the history."""

    from_answer: bool
    """The tag was hashed from the answer (or from the raw value it was converted from): an equal tag
    means an identical answer, and the hash refused any NaN or infinity in it. A validator's tag names a
    version of the source, and says nothing of the kind."""
    structured_in_text: StructuredInText = None
    """What the layer below knows of the text block (`BelowTagging.structured_in_text`)."""
    below: BelowTagging | None = None
    """The layer below's tagging, which may hand over the tool's return value for the history."""


# The driver ---------------------------------------------------------------------------------------


class Revalidator:
    """The server half's driver: runs validators, the body and the hash when told to, never decides."""

    def __init__(
        self,
        policies: ToolPolicies,
        *,
        meta_key: str = META_KEY,
        delta_history_bytes: int = DEFAULT_HISTORY_BYTES,
        meter_provider: Any | None = None,
    ) -> None:
        """`delta_history_bytes`: the bound of the history of answers sent (0: none kept, no deltas).
        `meter_provider`: the OpenTelemetry meter provider to count on (None: the global one, once set)."""
        if isinstance(delta_history_bytes, bool) or not isinstance(delta_history_bytes, int):
            raise TypeError("delta_history_bytes must be an int of bytes")
        self.policies = policies
        self.meta_key = meta_key
        self.stats = ServerStats()
        self.telemetry = ServerTelemetry(meter_provider)
        self.sizes = AnswerSizes()
        """The sizes of the answers not sent, by tag and block (for `bytes_saved`)."""
        self.history = AnswerHistory(delta_history_bytes) if delta_history_bytes > 0 else None
        self.delta_formats: tuple[str, ...] = delta.FORMATS if self.history is not None else ()
        """The delta formats this server sends (advertised in the extension's settings)."""
        # Tools that answered with structured content in this process, for adapters that cannot see the
        # tool's output schema before the body runs.
        self._structured_seen: dict[str, bool] = {}
        # The `kind` each tool's last answer carried, for not-modified replies that skip the body.
        self._kind_seen: dict[str, str | None] = {}
        # Tools whose stub went out unchecked (the adapter cannot see their schema): warned about once.
        self._unchecked_warned: set[str] = set()

    async def _version_tag(self, tool: str, policy: CachePolicy, arguments: Mapping[str, Any]) -> str | None:
        validator = policy.validator
        if validator is None:
            return None
        try:
            if _is_async_callable(validator):
                version = await validator(arguments)
            else:
                # A synchronous validator may read a file or a database: like FastMCP's synchronous
                # tools, it runs in a worker thread so that it never blocks the event loop.
                version = await anyio.to_thread.run_sync(validator, arguments)
                if inspect.isawaitable(version):  # a plain function that returned a coroutine
                    version = await version
        except Exception:
            logger.warning("tool %r: validator failed; the tag will come from the answer", tool, exc_info=True)
            return None
        if version is None:
            return None
        try:
            # Over the arguments that name the answer: a call that differs only in a volatile one gets the tag.
            return validator_tag(tool, policy.keyed(arguments), version)
        except CanonicalizationError as exc:
            logger.warning("tool %r: validator value has no canonical form (%s)", tool, exc)
            return None

    def _answer_tag(self, tool: str, answer: Answer) -> str | None:
        try:
            return content_tag(answer.content, answer.structured_content, answer.meta, meta_key=self.meta_key)
        except CanonicalizationError as exc:
            logger.warning("tool %r: answer has no canonical form (%s); sent without a tag", tool, exc)
            return None

    def _saved(self, tag: str | None, reply: NotModifiedReply | DeltaReply, answer: Answer) -> int:
        def measure() -> int:
            return full_answer_bytes(reply, answer, self.meta_key)

        return measure() if tag is None else self.sizes.saved(tag, reply, measure, self.meta_key)

    def _record_error(self, tool: str, reason: str) -> None:
        self.stats.errors_passed += 1
        self.telemetry.record(tool, "error")
        logger.debug("tool %r: error: %s", tool, reason)

    def _record(self, tool: str, outcome: Outcome[R], *, is_error: bool = False) -> Outcome[R]:
        """Count the outcome, put it on the current span, and log its reason."""
        stats = self.stats
        kind: Reported
        saved: int | None = None
        match outcome:
            case Stamped(delta_declined=declined):
                stats.stamped += 1
                if declined:
                    stats.deltas_declined += 1
                kind = "stamped"
            case DeltaSent(saved=saved):
                stats.deltas_sent += 1
                stats.bytes_saved += saved
                kind = "delta"
            case NotModified(body_ran=body_ran, converted=converted, saved=saved):
                stats.not_modified += 1
                if not body_ran:
                    stats.body_skipped += 1
                    kind = "body_skipped"
                elif not converted:
                    stats.conversion_skipped += 1
                    kind = "conversion_skipped"
                else:
                    kind = "not_modified"
                if saved is not None:
                    stats.bytes_saved += saved
            case PassThrough():
                if is_error:
                    stats.errors_passed += 1
                    kind = "error"
                else:
                    stats.passed_through += 1
                    kind = "passed_through"
            case _:
                assert_never(outcome)
        self.telemetry.record(tool, kind, saved)
        logger.debug("tool %r: %s: %s", tool, kind, outcome.reason)
        return outcome

    async def run(self, call: ToolCall[R]) -> Outcome[R]:
        """Answer one call of a tool: skip its body on a validator match, else run it, tag the answer and
        stamp it or answer not-modified. See `ToolCall` for what the adapter provides.

        A memo inside the adapter may answer from an older version of the source than the validator just
        named, so the validator is not used and the tag comes from what the memo answered. A memo outside
        would keep a not-modified reply and serve it to callers that sent no tag, so none is made.
        """
        tool = call.tool
        policy = call.policy if call.policy is not None else self.policies.get(tool)
        if policy is None:
            return PassThrough(await call.run_body(), "tool not declared")
        args = call.arguments or {}
        asked = read_conditions(call.request_meta, self.meta_key) if policy.etag and not call.memo_outside else None
        conditions = asked or NO_CONDITIONS
        requested = conditions.etag
        pre_tag = None if call.memo_inside else await self._version_tag(tool, policy, args)
        # Only a call with a tag can be answered with a stub: only then is the schema worth looking up.
        stub = await call.stub_check() if requested is not None else NO_OUTPUT_SCHEMA

        structured: bool | None = None
        if validator_matches(requested, pre_tag):  # only then is the tool's schema worth looking up
            structured = await call.has_structured_output()
            if structured is None:
                structured = self._structured_seen.get(tool)
        before = decide_before_body(
            tool,
            policy,
            requested,
            pre_tag,
            structured,
            own_kind=self._kind_seen.get(tool),
            meta_key=self.meta_key,
            stub=stub,
        )
        match before:
            case SkipBody(reply=reply, reason=reason):
                self._confirmed(call, policy, args, requested)
                self._unchecked(tool, stub, reply)
                return self._record(tool, NotModified(reply, body_ran=False, reason=reason))
            case RunBody():
                logger.debug("tool %r: %s", tool, before.reason)
            case _:
                assert_never(before)

        below: BelowTagging | None = None
        try:
            if call.tags_below and policy.etag and pre_tag is None:
                below = BelowTagging(tool, policy, requested, self.meta_key, sizes=self.sizes, stub=stub)
                below.raw_deltas = bool(conditions.accept_delta) and self.history is not None
                result = await call.run_body_tagged(below)
                pending = below.raw_pending
                if pending is not None:
                    # Sent as the change when it can be, or else converted now: beside the loop when large.
                    below.raw_pending = None
                    large = (below.size or 0) >= THREAD_FROM_BYTES
                    work = functools.partial(self._raw_delta, call, policy, args, conditions, stub, below, pending)
                    made = await anyio.to_thread.run_sync(work) if large else work()
                    if made is not None:
                        self._unchecked(tool, stub, made.reply)
                        return self._record(tool, made)
                    result = await anyio.to_thread.run_sync(pending.convert) if large else pending.convert()
            else:
                result = await call.run_body()
        except Exception:
            # A framework that turns a raising tool into an error result above this layer (FastMCP)
            # shows the error here as an exception; it passes through all the same.
            self._record_error(tool, "the tool raised; the error passes through")
            raise
        if below is not None:
            if below.reply is not None:
                reason = f"{below.reason} ({'answer converted first' if below.converted else 'answer not converted'})"
                self._confirmed(call, policy, args, requested)
                self._unchecked(tool, stub, below.reply)
                return self._record(
                    tool,
                    NotModified(
                        below.reply, body_ran=True, reason=reason, converted=below.converted, saved=below.saved
                    ),
                )
            logger.debug("tool %r: below the adapter: %s", tool, below.reason)
        read = call.read_answer(result)
        if not isinstance(read, Answer):
            why = read.reason if read is not None else "not a tool answer (e.g. input required)"
            return self._record(tool, PassThrough(result, why))
        answer = read
        if not answer.is_error:
            self._structured_seen[tool] = answer.structured_content is not None
            self._kind_seen[tool] = answer_kind(answer.structured_content)
        tag = pre_tag
        facts = _Facts(from_answer=pre_tag is None)
        if needs_content_tag(policy, pre_tag, answer):
            if below is not None and below.tag is not None:
                tag = below.tag
                facts = _Facts(from_answer=True, structured_in_text=below.structured_in_text, below=below)
            else:
                tag = self._answer_tag(tool, answer)
        after = decide_after_body(tool, policy, requested, tag, answer, meta_key=self.meta_key, stub=stub)
        match after:
            case SendAsIs(reason=reason):
                return self._record(tool, PassThrough(result, reason), is_error=answer.is_error)
            case Stamp(block=block, reason=reason):
                sent = await self._full_or_delta(
                    call, policy, args, conditions, answer, result, block, reason, facts, stub
                )
                if isinstance(sent, DeltaSent):
                    self._unchecked(tool, stub, sent.reply)
                return self._record(tool, sent)
            case AnswerNotModified(reply=reply, reason=reason):
                self._confirmed(call, policy, args, requested)
                saved = self._saved(tag, reply, answer)
                self._unchecked(tool, stub, reply)
                return self._record(tool, NotModified(reply, body_ran=True, reason=reason, saved=saved))
            case _:
                assert_never(after)

    def _unchecked(self, tool: str, stub: StubCheck, reply: NotModifiedReply | DeltaReply) -> None:
        """Warn, once per tool, that a stub went out that nobody could check against the tool's schema."""
        if stub.known or reply.structured_content is None or tool in self._unchecked_warned:
            return
        self._unchecked_warned.add(tool)
        logger.warning(
            "tool %r: its output schema is not known here, so the stub %s went out unchecked; a schema that "
            "requires more than `kind` refuses it (to check it: %s)",
            tool,
            orjson.dumps(reply.structured_content).decode(),
            stub.hint,
        )

    # The history ----------------------------------------------------------------------------------

    def _history_key(self, call: ToolCall[Any], policy: CachePolicy, args: Mapping[str, Any]) -> HistoryKey | None:
        """The key of this call's answers in the history; None when none are kept (no history, the tool
        opted out, arguments with no canonical form)."""
        if self.history is None or not policy.deltas or not policy.etag:
            return None
        partition = history_partition(policy, call.partition)
        if partition is None:
            return None
        try:
            # The arguments that name the answer: a base is found when only a volatile argument differs.
            arguments = canonical_json(dict(policy.keyed(args)))
        except CanonicalizationError:
            return None
        return HistoryKey(partition, call.tool, arguments)

    def _confirmed(self, call: ToolCall[Any], policy: CachePolicy, args: Mapping[str, Any], tag: str | None) -> None:
        """A not-modified reply: the version under `tag` is what the caller holds; keep it longest."""
        if self.history is not None and tag is not None:
            key = self._history_key(call, policy, args)
            if key is not None:
                self.history.touch(key, tag)

    async def _full_or_delta(
        self,
        call: ToolCall[R],
        policy: CachePolicy,
        args: Mapping[str, Any],
        conditions: Conditions,
        answer: Answer,
        result: R,
        block: CacheBlock,
        reason: str,
        facts: _Facts,
        stub: StubCheck = NO_OUTPUT_SCHEMA,
    ) -> Stamped[R] | DeltaSent:
        """Record the stamped answer in the history, and send it, or the change only when the caller holds
        an older answer the history still has."""
        tag = block.etag
        key = self._history_key(call, policy, args) if tag is not None else None
        refused = stub_refusal(call.tool, policy, answer.structured_content, stub) if conditions.accept_delta else None
        plan = plan_delta(policy, conditions, tag, offered=self.delta_formats, kept=key is not None, refused=refused)
        base: Version | None = None
        version: Version | None = None
        if self.history is not None and key is not None and tag is not None:
            # Looked up before the new answer is recorded, which may push the base out of its key's versions.
            base = self.history.get(key, plan.base) if isinstance(plan, TryDelta) else None
            # A tag already held is not recorded again, so the same answer read again (by every stock
            # client, which never sends a tag) costs a lookup. Under a tag hashed from the answer the
            # version held is this very answer. Under a validator's tag it is the answer first sent under
            # it; a body that raced the validator and read a newer source sends another answer under the
            # same tag, and a client holding that one fails a later delta's digest and asks again.
            version = self.history.get(key, tag)
            if version is None:
                version = version_of(
                    answer.content,
                    answer.structured_content,
                    answer.meta,
                    self.meta_key,
                    finite=facts.from_answer,
                    structured_in_text=facts.structured_in_text,
                )
                if version is not None:
                    self.history.record(key, tag, version)
            below = facts.below
            if below is not None and below.raw_leaves is not None and below.raw_domain is not None:
                self.history.attach_raw(key, tag, below.raw_leaves, below.raw_domain)
        match plan:
            case SendFull(reason=why):
                if not conditions.accept_delta:
                    return Stamped(result, block, reason)
                return Stamped(result, block, f"{reason}; full answer: {why}", delta_declined=True)
            case TryDelta():
                work = functools.partial(
                    self._delta_choice, call.tool, policy, block, plan, answer, base, version, stub
                )
                # A large answer's diff and digest (about 30 ms at 5 MB) run beside the loop, not on it.
                large = version is not None and version.json_size >= THREAD_FROM_BYTES
                choice = await anyio.to_thread.run_sync(work) if large else work()
            case _:
                assert_never(plan)
        if self.history is not None and base is not None and key is not None and tag is not None:
            self.history.recount(key, plan.base)  # leaf hashes kept beside them by the tree digest
            self.history.recount(key, tag)
        match choice:
            case SendDelta(reply=reply, size=size, reason=why):
                return DeltaSent(reply, why, size=size, saved=self._saved(tag, reply, answer))
            case SendFull(reason=why):
                return Stamped(result, block, f"{reason}; full answer: {why}", delta_declined=True)
            case _:
                assert_never(choice)

    def _delta_choice(
        self,
        tool: str,
        policy: CachePolicy,
        block: CacheBlock,
        plan: TryDelta,
        answer: Answer,
        base: Version | None,
        version: Version | None,
        stub: StubCheck,
    ) -> DeltaChoice:
        """The CPU work of a delta (`mcpcache.server.deltas.delta_choice`) from the history's versions."""
        base_document: dict[str, Any] | None = None
        if base is not None:
            try:
                base_document = base.document()
            except orjson.JSONDecodeError:  # a framework broke its promise that a text block was JSON
                logger.warning("tool %r: a version in the history could not be read back; full answer", tool)
        content, structured, meta = answer.content, answer.structured_content, answer.meta

        def tree(ops: list[dict[str, Any]], document: dict[str, Any]) -> str:
            # The base's leaf hashes, kept beside it once computed: the new answer's rehash only what changed.
            assert base is not None
            assert base_document is not None
            base_leaves = base.derived.leaves
            if base_leaves is None:
                base_leaves = base.derived.leaves = leaves_of(base_document)
            leaves = updated(base_leaves, ops, document)
            if version is not None:
                version.derived.leaves = leaves
            return root_of(leaves)

        return delta_choice(
            tool,
            policy,
            block,
            plan,
            answer.structured_content,
            base=base_document,
            new_document=lambda: delta.answer_document(content, structured, meta, self.meta_key),
            answer_size=version.json_size if version is not None else None,
            digest=lambda: answer_digest(content, structured, meta, meta_key=self.meta_key),
            meta_key=self.meta_key,
            stub=stub,
            tree=tree,
        )

    def _raw_delta(
        self,
        call: ToolCall[Any],
        policy: CachePolicy,
        args: Mapping[str, Any],
        conditions: Conditions,
        stub: StubCheck,
        below: BelowTagging,
        pending: RawPending,
    ) -> DeltaSent | None:
        """For a return value the layer below left unconverted (`pending`): the delta from the base the
        request names to the answer the framework would make of it, computed from the change alone
        (`mcpcache.server.raw_deltas`), recorded as any delta. None: the caller converts the value, and
        the usual path decides."""
        tag, raw, domain = pending.tag, pending.raw, pending.domain
        history = self.history
        key = self._history_key(call, policy, args)
        if history is None or key is None:
            return None
        refused = stub_refusal(call.tool, policy, raw if type(raw) is dict else None, stub)
        plan = plan_delta(policy, conditions, tag, offered=self.delta_formats, kept=True, refused=refused)
        if not isinstance(plan, TryDelta):
            return None
        base = history.get(key, plan.base)
        if base is None or base.derived.raw is None or base.derived.raw_domain != domain:
            return None
        made = raw_delta(
            base, raw, pending.leaves, pending.conversion, format=plan.format, max_bytes=base.json_size // 2
        )
        if made is None:
            return None
        block = decide_block(policy, tag)
        choice = decide_delta(
            call.tool,
            policy,
            block,
            plan,
            raw if type(raw) is dict else None,
            base_held=True,
            answer_size=made.version.json_size,
            ops=made.ops if made.ops_size <= made.version.json_size // 2 else None,
            ops_size=made.ops_size,
            digest=made.digest,
            meta_key=self.meta_key,
            stub=stub,
        )
        if not isinstance(choice, SendDelta):
            return None
        history.recount(key, plan.base)  # the base's layout and leaves, if this delta made them
        if history.get(key, tag) is None:
            history.record(key, tag, made.version)
            history.attach_raw(key, tag, pending.leaves, domain)
        saved = self.sizes.saved(
            tag, choice.reply, lambda: text_answer_bytes(choice.reply, made.text_sizes, self.meta_key), self.meta_key
        )
        return DeltaSent(choice.reply, f"{choice.reason}; computed from the return value's change", choice.size, saved)
