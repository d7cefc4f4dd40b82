"""The server half's decisions, shared by the FastMCP and MCP SDK adapters.

An adapter hands `Revalidator.call` the tool name, the arguments, the request's `_meta`, a way to run
the rest of the chain (the tool body), and a way to read what came back. It gets an `Outcome` telling it
what to send: the body's result untouched, the result with a cache block merged into its `_meta`, or a
not-modified reply. The decisions themselves (`decide_*`) are pure functions.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from mcpcache.etag import CanonicalizationError, content_tag, validator_tag, weak_equal
from mcpcache.protocol import META_KEY, CacheBlock, NotModifiedReply, answer_kind, requested_etag
from mcpcache.server.policies import CachePolicy, ToolPolicies

logger = logging.getLogger("mcpcache.server")

R = TypeVar("R")


@dataclass(frozen=True)
class Answer:
    """What a tool answered, read off the adapter's own result type."""

    content: Sequence[BaseModel | Mapping[str, Any]]
    structured_content: Any
    is_error: bool


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
    """Send `reply` instead of the answer."""

    reply: NotModifiedReply
    body_ran: bool
    reason: str


Outcome = PassThrough[R] | Stamped[R] | NotModified


def decide_block(policy: CachePolicy, tag: str | None) -> CacheBlock:
    return CacheBlock(ttl_ms=policy.ttl_ms, cache_scope=policy.scope, etag=tag if policy.etag else None)


def decide_after_body(
    tool: str,
    policy: CachePolicy,
    requested: str | None,
    pre_tag: str | None,
    answer: Answer,
    meta_key: str = META_KEY,
) -> tuple[CacheBlock | None, NotModifiedReply | None, str]:
    """Given the answer: (block to stamp, or None to leave it alone; a not-modified reply or None; why)."""
    if answer.is_error:
        return None, None, "error results are never stamped"
    tag = pre_tag
    if policy.etag and tag is None:
        try:
            tag = content_tag(answer.content, answer.structured_content)
        except CanonicalizationError as exc:
            logger.warning("tool %r: answer has no canonical form (%s); sent without a tag", tool, exc)
    block = decide_block(policy, tag)
    if requested is not None and block.etag is not None and weak_equal(requested, block.etag):
        kind = None
        if answer.structured_content is not None:
            kind = answer_kind(answer.structured_content) or policy.kind or tool
        return block, NotModifiedReply.build(block, kind, meta_key), "tag matches the current answer"
    if requested is None:
        return block, None, "stamped (no tag in the request)"
    if block.etag is None:
        return block, None, "stamped without a tag; the conditional call gets the full answer"
    return block, None, "stamped (the client's tag is not the current one)"


def decide_before_body(
    tool: str,
    policy: CachePolicy,
    requested: str | None,
    pre_tag: str | None,
    structured: bool | None,
    meta_key: str = META_KEY,
    own_kind: str | None = None,
) -> NotModifiedReply | None:
    """With a validator tag in hand: a not-modified reply that skips the body, or None to run it.

    `own_kind` is the kind the tool's answers last carried: the body does not run, so the K rule's first
    choice (the answer's own kind) can only be remembered.
    """
    if requested is None or pre_tag is None or not weak_equal(requested, pre_tag):
        return None
    if structured is None:
        # Whether the reply needs structuredContent is unknown until the tool has answered once.
        return None
    kind = (own_kind or policy.kind or tool) if structured else None
    return NotModifiedReply.build(decide_block(policy, pre_tag), kind, meta_key)


class Revalidator:
    """The server half's driver: runs validators and the body when told to, never decides on its own."""

    def __init__(self, policies: ToolPolicies, *, meta_key: str = META_KEY) -> None:
        self.policies = policies
        self.meta_key = meta_key
        # Tools that answered with structured content in this process, for adapters that cannot see the
        # tool's output schema before the body runs.
        self._structured_seen: dict[str, bool] = {}
        # The `kind` each tool's last answer carried, for not-modified replies that skip the body.
        self._kind_seen: dict[str, str | None] = {}

    async def _version_tag(self, tool: str, policy: CachePolicy, arguments: Mapping[str, Any]) -> str | None:
        if policy.validator is None:
            return None
        try:
            version = policy.validator(arguments)
            if inspect.isawaitable(version):
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

    async def call(
        self,
        *,
        tool: str,
        arguments: Mapping[str, Any] | None,
        request_meta: object,
        run_body: Callable[[], Awaitable[R]],
        read_answer: Callable[[R], Answer | None],
        has_structured_output: Callable[[], Awaitable[bool | None]] | None = None,
        memo_inside: bool = False,
        memo_outside: bool = False,
    ) -> Outcome[R]:
        """`memo_inside`/`memo_outside`: a response memo sits between this layer and the body, or above it.

        A memo inside may answer from an older version of the source than the validator just named, so
        the validator is not used and the tag comes from what the memo answered. A memo outside would
        keep a not-modified reply and serve it to callers that sent no tag, so none is made.
        """
        policy = self.policies.get(tool)
        if policy is None:
            return PassThrough(await run_body(), "tool not declared")
        args = arguments or {}
        requested = requested_etag(request_meta, self.meta_key) if policy.etag and not memo_outside else None
        pre_tag = None if memo_inside else await self._version_tag(tool, policy, args)
        if requested is not None and pre_tag is not None and weak_equal(requested, pre_tag):
            structured = await has_structured_output() if has_structured_output is not None else None
            if structured is None:
                structured = self._structured_seen.get(tool)
            own_kind = self._kind_seen.get(tool)
            reply = decide_before_body(tool, policy, requested, pre_tag, structured, self.meta_key, own_kind)
            if reply is not None:
                return NotModified(reply, body_ran=False, reason="validator tag matches; body skipped")
        result = await run_body()
        answer = read_answer(result)
        if answer is None:
            return PassThrough(result, "not a tool answer (e.g. input required)")
        if not answer.is_error:
            self._structured_seen[tool] = answer.structured_content is not None
            self._kind_seen[tool] = answer_kind(answer.structured_content)
        block, reply, reason = decide_after_body(tool, policy, requested, pre_tag, answer, self.meta_key)
        if reply is not None:
            return NotModified(reply, body_ran=True, reason=reason)
        if block is None:
            return PassThrough(result, reason)
        return Stamped(result, block, reason)
