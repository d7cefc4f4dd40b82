"""The server half's decisions, shared by the FastMCP and MCP SDK adapters.

Two questions, each answered by a pure function (no I/O, no hashing, no logging) that returns a typed
decision with a reason a person can read:

- `decide_before_body`: with a validator's tag in hand, may the body be skipped (`SkipBody`) or must it
  run (`RunBody`)?
- `decide_after_body`: given what the body answered and the tag of that answer, send it as it is
  (`SendAsIs`), send it with a cache block (`Stamp`), or answer not-modified (`AnswerNotModified`)?

`Revalidator.call` is the driver: it runs the validator (a synchronous one in a worker thread), the
body and the hash, hands the results to the decisions, and returns an `Outcome` telling the adapter what
to send: the body's result untouched (`PassThrough`), the result with a cache block merged into its
`_meta` (`Stamped`), or a not-modified reply (`NotModified`). Each outcome is counted in the driver's
`ServerStats`, set on the current OpenTelemetry span (`telemetry`), and its reason logged.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar, assert_never

import anyio.to_thread
from pydantic import BaseModel

from mcpcache.etag import CanonicalizationError, content_tag_sized, validator_tag, weak_equal
from mcpcache.protocol import META_KEY, CacheBlock, NotModifiedReply, answer_kind, requested_etag
from mcpcache.server import telemetry
from mcpcache.server.policies import CachePolicy, ToolPolicies

logger = logging.getLogger("mcpcache.server")

R = TypeVar("R")


@dataclass(frozen=True)
class Answer:
    """What a tool answered, read off the adapter's own result type.

    `meta` is the result's `_meta` as the tool and the framework left it, before any cache block is
    merged in: the tag covers it (without the block).
    """

    content: Sequence[BaseModel | Mapping[str, Any]]
    structured_content: Any
    is_error: bool
    meta: Mapping[str, Any] | None = None


# Decisions before the body ------------------------------------------------------------------------


@dataclass(frozen=True)
class RunBody:
    """Run the tool body; the answer decides the rest."""

    reason: str


@dataclass(frozen=True)
class SkipBody:
    """The validator's tag matches the request's: send `reply` without running the body."""

    reply: NotModifiedReply
    reason: str


BeforeBody = RunBody | SkipBody


def validator_matches(requested: str | None, pre_tag: str | None) -> bool:
    """The request carries a well-formed tag weakly equal to the validator's tag."""
    return requested is not None and pre_tag is not None and weak_equal(requested, pre_tag)


def decide_block(policy: CachePolicy, tag: str | None) -> CacheBlock:
    """The cache block a declared tool's answer carries; the tag only when the tool stamps tags."""
    return CacheBlock(ttl_ms=policy.ttl_ms, cache_scope=policy.scope, etag=tag if policy.etag else None)


def decide_before_body(
    tool: str,
    policy: CachePolicy,
    requested: str | None,
    pre_tag: str | None,
    structured: bool | None,
    *,
    own_kind: str | None = None,
    meta_key: str = META_KEY,
) -> BeforeBody:
    """`pre_tag`: the validator's tag (None without a validator, or when it gave no version).

    `structured`: whether the tool answers with structuredContent (None: not known yet). `own_kind` is
    the kind the tool's answers last carried: the body does not run, so the first choice of the kind
    rule (the answer's own kind) can only be remembered.
    """
    if pre_tag is None:
        return RunBody("no validator tag: the tag comes from the answer")
    if requested is None:
        return RunBody("no (well-formed) tag in the request")
    if not weak_equal(requested, pre_tag):
        return RunBody("the request's tag is not the validator's current one")
    if structured is None:
        return RunBody("validator tag matches, but whether the reply needs structuredContent is not known yet")
    kind = (own_kind or policy.kind or tool) if structured else None
    return SkipBody(
        NotModifiedReply.build(decide_block(policy, pre_tag), kind, meta_key), "validator tag matches; body skipped"
    )


# Decisions after the body -------------------------------------------------------------------------


@dataclass(frozen=True)
class SendAsIs:
    """Send the body's result exactly as it was: no cache block."""

    reason: str


@dataclass(frozen=True)
class Stamp:
    """Send the body's result with `block` merged into its `_meta`."""

    block: CacheBlock
    reason: str


@dataclass(frozen=True)
class AnswerNotModified:
    """Send `reply` instead of the answer."""

    reply: NotModifiedReply
    reason: str


AfterBody = SendAsIs | Stamp | AnswerNotModified


def needs_content_tag(policy: CachePolicy, pre_tag: str | None, answer: Answer | None) -> bool:
    """Whether the driver has to hash the answer: a tagging tool's good answer with no validator tag."""
    return policy.etag and pre_tag is None and answer is not None and not answer.is_error


def not_modified_kind(tool: str, policy: CachePolicy, structured_content: Any) -> str | None:
    """The kind rule: the answer's own string `kind`, else the declared kind, else the tool name; None
    (no structuredContent in the reply) when the answer has none."""
    if structured_content is None:
        return None
    return answer_kind(structured_content) or policy.kind or tool


def decide_after_body(
    tool: str,
    policy: CachePolicy,
    requested: str | None,
    tag: str | None,
    answer: Answer | None,
    *,
    meta_key: str = META_KEY,
) -> AfterBody:
    """`tag`: the tag of this answer (the validator's, else the hash of the answer), None when there is
    none (the tool stamps no tag, or the answer has no canonical form). `answer` None: what came back is
    not a tool answer (e.g. an input-required leg)."""
    if answer is None:
        return SendAsIs("not a tool answer (e.g. input required)")
    if answer.is_error:
        return SendAsIs("error results are never stamped")
    block = decide_block(policy, tag)
    if block.etag is None:
        why = "the tool stamps no tag" if not policy.etag else "the answer has no canonical form"
        if requested is not None:
            return Stamp(block, f"stamped without a tag ({why}); the conditional call gets the full answer")
        return Stamp(block, f"stamped without a tag ({why})")
    if requested is None:
        return Stamp(block, "stamped (no tag in the request)")
    if not weak_equal(requested, block.etag):
        return Stamp(block, "stamped (the request's tag is not the current one)")
    kind = not_modified_kind(tool, policy, answer.structured_content)
    return AnswerNotModified(NotModifiedReply.build(block, kind, meta_key), "tag matches the current answer")


# Tags computed below the adapter ------------------------------------------------------------------


@dataclass
class BelowTagging:
    """Handed down to the tool when the answer's tag is to come from the answer.

    The layer below the adapter (FastMCP: the tool, before the framework converts its return value)
    may hash an exact cheaper form of the answer in a tag domain of its own (docs/protocol.md section 2.1)
    and call `decide` with that tag. On a match it gets the not-modified reply to send in place
    of the answer, so the framework converts nothing; otherwise the driver stamps `tag` on the answer
    that comes back instead of hashing it. Untouched, the driver hashes the answer as usual.
    """

    tool: str
    policy: CachePolicy
    requested: str | None
    meta_key: str = META_KEY
    tag: str | None = None
    reply: NotModifiedReply | None = None
    reason: str = "no tag computed below the adapter"
    size: int | None = None
    """The length of the bytes `tag` was computed from, when the caller says."""
    converted: bool = False
    """Whether the framework had already converted the answer when `decide` was called."""

    def decide(
        self, tag: str, structured_content: Any, *, is_error: bool = False, size: int | None = None
    ) -> NotModifiedReply | None:
        """`tag`: the answer's tag in the caller's domain; `structured_content`: the answer's, as it would
        be sent (for the kind rule); `size`: the length of the hashed bytes, if known. Returns the reply
        to send instead of the answer, or None. An error is never tagged nor answered not-modified."""
        if is_error:
            self.reason = "error results are never stamped"
            return None
        self.tag = tag
        self.size = size
        answer = Answer(content=(), structured_content=structured_content, is_error=False)
        after = decide_after_body(self.tool, self.policy, self.requested, tag, answer, meta_key=self.meta_key)
        self.reason = after.reason
        if isinstance(after, AnswerNotModified):
            self.reply = after.reply
            return after.reply
        return None


@dataclass(frozen=True)
class NotAnAnswer:
    """What `read_answer` returns for a result this layer must send as it is, with the reason why
    (an input-required leg; an answer a mounted server's own mcpcache layer already stamped)."""

    reason: str


# What the adapter sends ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PassThrough(Generic[R]):
    """Send the body's result exactly as it was."""

    result: R
    reason: str


@dataclass(frozen=True)
class Stamped(Generic[R]):
    """Send the body's result with `block` merged into its `_meta`."""

    result: R
    block: CacheBlock
    reason: str


@dataclass(frozen=True)
class NotModified:
    """Send `reply` instead of the answer.

    `body_ran`: False when a validator matched and the body never ran. `converted`: False when the tag
    was computed below the adapter and the answer was never built. `size`: the length of the answer's
    hashed form (what was not sent), when known.
    """

    reply: NotModifiedReply
    body_ran: bool
    reason: str
    converted: bool = True
    size: int | None = None


Outcome = PassThrough[R] | Stamped[R] | NotModified


# Counters -----------------------------------------------------------------------------------------


@dataclass
class ServerStats:
    """What one server adapter did with the calls of its declared tools, since it was made.

    Undeclared tools are not counted: they never reach mcpcache's logic. Every declared call counts in
    exactly one of `stamped`, `not_modified`, `errors_passed` and `passed_through` (a call cancelled
    while the body runs counts in none).
    """

    stamped: int = 0
    """Full answers sent with a cache block."""
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
    bytes_saved: int = 0
    """The summed size of the answers not sent, where known: the canonical (or raw) bytes their tag was
    computed from. Not-modified replies whose body never ran add nothing: their size is not known."""

    def snapshot(self) -> ServerStats:
        """A copy that later calls do not change."""
        return replace(self)


def _is_async_callable(fn: object) -> bool:
    """A coroutine function, seen through `functools.partial` and callable objects, as FastMCP decides
    whether a tool runs on the loop or in a worker thread."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or (callable(fn) and inspect.iscoroutinefunction(fn.__call__))


# The driver ---------------------------------------------------------------------------------------


class Revalidator:
    """The server half's driver: runs validators, the body and the hash when told to, never decides."""

    def __init__(self, policies: ToolPolicies, *, meta_key: str = META_KEY) -> None:
        self.policies = policies
        self.meta_key = meta_key
        self.stats = ServerStats()
        # Tools that answered with structured content in this process, for adapters that cannot see the
        # tool's output schema before the body runs.
        self._structured_seen: dict[str, bool] = {}
        # The `kind` each tool's last answer carried, for not-modified replies that skip the body.
        self._kind_seen: dict[str, str | None] = {}

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
            return validator_tag(tool, arguments, version)
        except CanonicalizationError as exc:
            logger.warning("tool %r: validator value has no canonical form (%s)", tool, exc)
            return None

    def _answer_tag(self, tool: str, answer: Answer) -> tuple[str | None, int | None]:
        try:
            return content_tag_sized(answer.content, answer.structured_content, answer.meta, meta_key=self.meta_key)
        except CanonicalizationError as exc:
            logger.warning("tool %r: answer has no canonical form (%s); sent without a tag", tool, exc)
            return None, None

    def _record_error(self, tool: str, reason: str) -> None:
        self.stats.errors_passed += 1
        telemetry.annotate(tool, "error")
        logger.debug("tool %r: error: %s", tool, reason)

    def _record(self, tool: str, outcome: Outcome[R], *, is_error: bool = False) -> Outcome[R]:
        """Count the outcome, put it on the current span, and log its reason."""
        stats = self.stats
        kind: telemetry.Outcome
        size: int | None = None
        match outcome:
            case Stamped():
                stats.stamped += 1
                kind = "stamped"
            case NotModified(body_ran=body_ran, converted=converted, size=size):
                stats.not_modified += 1
                if not body_ran:
                    stats.body_skipped += 1
                    kind = "body_skipped"
                elif not converted:
                    stats.conversion_skipped += 1
                    kind = "conversion_skipped"
                else:
                    kind = "not_modified"
                if size is not None:
                    stats.bytes_saved += size
            case PassThrough():
                if is_error:
                    stats.errors_passed += 1
                    kind = "error"
                else:
                    stats.passed_through += 1
                    kind = "passed_through"
            case _:
                assert_never(outcome)
        telemetry.annotate(tool, kind, size)
        logger.debug("tool %r: %s: %s", tool, kind, outcome.reason)
        return outcome

    async def call(
        self,
        *,
        tool: str,
        arguments: Mapping[str, Any] | None,
        request_meta: object,
        run_body: Callable[[], Awaitable[R]],
        read_answer: Callable[[R], Answer | NotAnAnswer | None],
        has_structured_output: Callable[[], Awaitable[bool | None]] | None = None,
        memo_inside: bool = False,
        memo_outside: bool = False,
        run_body_tagged: Callable[[BelowTagging], Awaitable[R]] | None = None,
        policy: CachePolicy | None = None,
    ) -> Outcome[R]:
        """`policy`: the tool's declaration, when the adapter resolved it (FastMCP: from the tool's own
        `meta` or its function); otherwise it is looked up by name in `policies`.

        `run_body_tagged`: runs the body like `run_body`, and lets the layer below tag the answer from
        a cheaper exact form (see `BelowTagging`); used, when given, whenever the tag comes from the
        answer. The adapter passes it only when nothing between it and the tool changes the answer.

        `read_answer` returns None or a `NotAnAnswer` for a result that is to be sent as it is.

        `memo_inside`/`memo_outside`: a response memo sits between this layer and the body, or above it.

        A memo inside may answer from an older version of the source than the validator just named, so
        the validator is not used and the tag comes from what the memo answered. A memo outside would
        keep a not-modified reply and serve it to callers that sent no tag, so none is made.
        """
        if policy is None:
            policy = self.policies.get(tool)
        if policy is None:
            return PassThrough(await run_body(), "tool not declared")
        args = arguments or {}
        requested = requested_etag(request_meta, self.meta_key) if policy.etag and not memo_outside else None
        pre_tag = None if memo_inside else await self._version_tag(tool, policy, args)

        structured: bool | None = None
        if validator_matches(requested, pre_tag):  # only then is the tool's schema worth looking up
            structured = await has_structured_output() if has_structured_output is not None else None
            if structured is None:
                structured = self._structured_seen.get(tool)
        before = decide_before_body(
            tool, policy, requested, pre_tag, structured, own_kind=self._kind_seen.get(tool), meta_key=self.meta_key
        )
        match before:
            case SkipBody(reply=reply, reason=reason):
                return self._record(tool, NotModified(reply, body_ran=False, reason=reason))
            case RunBody():
                logger.debug("tool %r: %s", tool, before.reason)
            case _:
                assert_never(before)

        below: BelowTagging | None = None
        try:
            if run_body_tagged is not None and policy.etag and pre_tag is None:
                below = BelowTagging(tool, policy, requested, self.meta_key)
                result = await run_body_tagged(below)
            else:
                result = await run_body()
        except Exception:
            # A framework that turns a raising tool into an error result above this layer (FastMCP)
            # shows the error here as an exception; it passes through all the same.
            self._record_error(tool, "the tool raised; the error passes through")
            raise
        if below is not None:
            if below.reply is not None:
                reason = f"{below.reason} ({'answer converted first' if below.converted else 'answer not converted'})"
                return self._record(
                    tool,
                    NotModified(below.reply, body_ran=True, reason=reason, converted=below.converted, size=below.size),
                )
            logger.debug("tool %r: below the adapter: %s", tool, below.reason)
        read = read_answer(result)
        if not isinstance(read, Answer):
            why = read.reason if read is not None else "not a tool answer (e.g. input required)"
            return self._record(tool, PassThrough(result, why))
        answer = read
        if not answer.is_error:
            self._structured_seen[tool] = answer.structured_content is not None
            self._kind_seen[tool] = answer_kind(answer.structured_content)
        tag, size = pre_tag, None
        if needs_content_tag(policy, pre_tag, answer):
            if below is not None and below.tag is not None:
                tag, size = below.tag, below.size
            else:
                tag, size = self._answer_tag(tool, answer)
        after = decide_after_body(tool, policy, requested, tag, answer, meta_key=self.meta_key)
        match after:
            case SendAsIs(reason=reason):
                return self._record(tool, PassThrough(result, reason), is_error=answer.is_error)
            case Stamp(block=block, reason=reason):
                return self._record(tool, Stamped(result, block, reason))
            case AnswerNotModified(reply=reply, reason=reason):
                return self._record(tool, NotModified(reply, body_ran=True, reason=reason, size=size))
            case _:
                assert_never(after)
