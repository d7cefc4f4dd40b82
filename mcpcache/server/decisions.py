"""The server half's decisions, shared by the FastMCP and MCP SDK adapters and the gateway.

Each question is answered by a pure function (no I/O, no hashing, no logging) that returns a typed
decision with a reason a person can read:

- `decide_before_body`: with a validator's tag in hand, may the body be skipped (`SkipBody`) or must it
  run (`RunBody`)?
- `decide_after_body`: given what the body answered and the tag of that answer, send it as it is
  (`SendAsIs`), send it with a cache block (`Stamp`), or answer not-modified (`AnswerNotModified`)?
- When the answer is to be stamped and the caller holds an older one: `plan_delta` says whether a delta
  reply is worth trying (`TryDelta`) or the full answer goes (`SendFull`), and after the driver has
  looked the base up and computed the ops, `decide_delta` says which reply goes (`SendDelta` or
  `SendFull`). `history_partition` says whose history an answer belongs to.

`BelowTagging` carries the second question down to the layer below an adapter (the tool, before the
framework converts its return value), which may answer it from a cheaper exact form of the answer.
`mcpcache.server.revalidator` drives them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from mcp_types import TextContent
from pydantic import BaseModel

from mcpcache.protocol import (
    META_KEY,
    CacheBlock,
    Conditions,
    DeltaBlock,
    DeltaReply,
    NotModifiedReply,
    answer_kind,
    weak_equal,
)
from mcpcache.server.history import PUBLIC, Partition, StructuredInText
from mcpcache.server.policies import CachePolicy
from mcpcache.server.stubs import NO_OUTPUT_SCHEMA, StubCheck
from mcpcache.sizes import answer_bytes, bytes_saved, text_json_bytes

__all__ = [
    "AfterBody",
    "Answer",
    "AnswerNotModified",
    "AnswerSizes",
    "BeforeBody",
    "BelowTagging",
    "DeltaChoice",
    "DeltaPlan",
    "NotAnAnswer",
    "Reply",
    "RunBody",
    "SendAsIs",
    "SendDelta",
    "SendFull",
    "SkipBody",
    "Stamp",
    "TryDelta",
    "decide_after_body",
    "decide_before_body",
    "decide_block",
    "decide_delta",
    "history_partition",
    "needs_content_tag",
    "not_modified_kind",
    "plan_delta",
    "saved_by",
    "stub_refusal",
    "validator_matches",
]


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


class Reply(Protocol):
    """A reply sent in place of an answer, in any model that has a result's parts (the reply models, a
    framework's result)."""

    @property
    def content(self) -> Sequence[Any]: ...
    @property
    def structured_content(self) -> Any: ...
    @property
    def meta(self) -> Mapping[str, Any] | None: ...


def saved_by(reply: Reply, answer: Answer, meta_key: str = META_KEY) -> int:
    """The bytes `reply` saved in place of `answer` (`mcpcache.sizes`): the answer as it would have gone,
    stamped with the reply's block less what makes it a reply (`notModified`, `delta`), less the reply."""
    return bytes_saved(full_answer_bytes(reply, answer, meta_key), reply_bytes(reply))


def full_answer_bytes(reply: Reply, answer: Answer, meta_key: str = META_KEY) -> int:
    """The length of `answer` as it would have gone in place of `reply`, stamped with `reply`'s block less
    what makes it a reply."""
    meta = dict(answer.meta or {})
    block = (reply.meta or {}).get(meta_key)
    if isinstance(block, Mapping):
        meta[meta_key] = {key: value for key, value in block.items() if key not in _REPLY_ONLY}
    return answer_bytes(answer.content, answer.structured_content, answer.is_error, meta)


def reply_bytes(reply: Reply) -> int:
    return answer_bytes(reply.content, reply.structured_content, False, reply.meta)


_REPLY_ONLY = frozenset({"notModified", "delta"})


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
    return CacheBlock(
        ttl_ms=policy.ttl_ms,
        cache_scope=policy.scope,
        etag=tag if policy.etag else None,
        stale_while_revalidate_ms=policy.stale_while_revalidate_ms or None,
        stale_if_error_ms=policy.stale_if_error_ms or None,
    )


def decide_before_body(
    tool: str,
    policy: CachePolicy,
    requested: str | None,
    pre_tag: str | None,
    structured: bool | None,
    *,
    own_kind: str | None = None,
    meta_key: str = META_KEY,
    stub: StubCheck = NO_OUTPUT_SCHEMA,
) -> BeforeBody:
    """`pre_tag`: the validator's tag (None without a validator, or when it gave no version).

    `structured`: whether the tool answers with structuredContent (None: not known yet). `own_kind` is
    the kind the tool's answers last carried: the body does not run, so the first choice of the kind
    rule (the answer's own kind) can only be remembered. `stub`: the tool's output schema; a stub it
    refuses is never sent, so the body runs and the full answer goes.
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
    refused = stub.refusal(kind) if kind is not None else None
    if refused is not None:
        return RunBody(f"validator tag matches, but {refused}: the body runs and the full answer goes")
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


def stub_refusal(tool: str, policy: CachePolicy, structured_content: Any, stub: StubCheck) -> str | None:
    """Why the stub of a not-modified or delta reply in place of this answer may not be sent (the tool's
    output schema refuses it), or None when it may (no stub, no schema, or one that accepts it)."""
    kind = not_modified_kind(tool, policy, structured_content)
    return stub.refusal(kind) if kind is not None else None


def decide_after_body(
    tool: str,
    policy: CachePolicy,
    requested: str | None,
    tag: str | None,
    answer: Answer | None,
    *,
    meta_key: str = META_KEY,
    stub: StubCheck = NO_OUTPUT_SCHEMA,
) -> AfterBody:
    """`tag`: the tag of this answer (the validator's, else the hash of the answer), None when there is
    none (the tool stamps no tag, or the answer has no canonical form). `answer` None: what came back is
    not a tool answer (e.g. an input-required leg). `stub`: the tool's output schema; when it refuses
    the stub, a matching tag gets the full answer, stamped."""
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
    refused = stub.refusal(kind) if kind is not None else None
    if refused is not None:
        return Stamp(block, f"stamped: the tag matches, but {refused}, so the full answer goes")
    return AnswerNotModified(NotModifiedReply.build(block, kind, meta_key), "tag matches the current answer")


# Delta replies ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TryDelta:
    """Look up the answer sent under `base` and compute the ops from it to this answer, in `format`."""

    base: str
    """The request's tag, as the caller sent it: the delta block names it as its base."""
    format: str
    reason: str


@dataclass(frozen=True)
class SendFull:
    """Send the full answer, stamped, though the caller would have taken a delta."""

    reason: str


@dataclass(frozen=True)
class SendDelta:
    """Send `reply` (no content, the stub structured content, the new block with the delta) instead of
    the answer. `size`: the length of the ops' JSON."""

    reply: DeltaReply
    size: int
    reason: str


DeltaPlan = TryDelta | SendFull
DeltaChoice = SendDelta | SendFull


def history_partition(policy: CachePolicy, caller: Partition) -> Partition | None:
    """Whose history the answer belongs to: everybody's for a tool declared public (nothing in its
    answers depends on who asked), else the caller's own, so that a private answer is never the base of
    a delta sent to anybody else; None (keep nothing) when who called could not be read."""
    if policy.scope == "public":
        return PUBLIC
    return None if caller.kind == "unknown" else caller


def plan_delta(
    policy: CachePolicy,
    conditions: Conditions,
    tag: str | None,
    *,
    offered: Sequence[str],
    kept: bool,
    refused: str | None = None,
) -> DeltaPlan:
    """For an answer about to be stamped with `tag`: is a delta worth computing?

    `conditions`: what the request asked for. `offered`: the formats the server sends (empty when it
    keeps no history). `kept`: whether this call's answers have a place in the history (False for
    arguments with no canonical form, or a caller whose token could not be read). `refused`: why the
    stub may not be sent (`stub_refusal`), None when it may. The caller's own order of preference picks
    the format.
    """
    if not conditions.accept_delta:
        return SendFull("the request accepts no delta")
    if not offered:
        return SendFull("the server keeps no history of answers (delta_history_bytes=0)")
    if not policy.deltas:
        return SendFull("deltas are off for this tool")
    if tag is None:
        return SendFull("the answer has no tag")
    if conditions.etag is None:
        return SendFull("the request carries no tag to name a base")
    if weak_equal(conditions.etag, tag):
        return SendFull("the request's tag is the current one")  # not-modified is decided before this
    chosen = next((name for name in conditions.accept_delta if name in offered), None)
    if chosen is None:
        return SendFull(f"the request accepts none of the formats this server sends ({', '.join(offered)})")
    if not kept:
        return SendFull("this call's answers are not kept (arguments with no canonical form, unreadable token)")
    if refused is not None:
        return SendFull(f"{refused} (a delta reply carries the same stub)")
    return TryDelta(conditions.etag, chosen, f"the request accepts {chosen} and its tag is not the current one")


def decide_delta(
    tool: str,
    policy: CachePolicy,
    block: CacheBlock,
    plan: TryDelta,
    structured_content: Any,
    *,
    base_held: bool,
    answer_size: int | None,
    ops: list[dict[str, Any]] | None,
    ops_size: int,
    digest: str | None,
    meta_key: str = META_KEY,
    stub: StubCheck = NO_OUTPUT_SCHEMA,
) -> DeltaChoice:
    """After the driver's work: send the delta, or the full answer and why.

    `block`: the new answer's block (its tag, ttl and scope). `base_held`: whether the history holds
    the answer sent under `plan.base` for this key. `answer_size`: the answer's size as the history
    measured it (None: it has no JSON form). `ops`: the diff, None when it would be larger than half the
    answer (or was not computed: no base, no size). `ops_size`: the length of their JSON. `digest`: the
    new answer's, None when it has no digest form (or was not computed, after an earlier "no"). `stub`:
    the tool's output schema, which the delta reply's stub must pass.
    """
    refused = stub_refusal(tool, policy, structured_content, stub)
    if refused is not None:
        return SendFull(f"{refused} (a delta reply carries the same stub)")
    if not base_held:
        return SendFull(
            "base not held: the answer sent under the request's tag is not in this server's history "
            "(never sent by this process, evicted, or sent for other arguments or to another partition)"
        )
    if answer_size is None:
        return SendFull("the answer has no JSON form to diff")
    if ops is None:
        return SendFull(f"the delta would be larger than half the answer ({answer_size // 2} bytes)")
    if digest is None:
        return SendFull("the answer has no digest form (RFC 8785: e.g. an integer beyond 2^53)")
    kind = not_modified_kind(tool, policy, structured_content)
    delta = DeltaBlock(base=plan.base, format=plan.format, ops=ops, digest=digest)
    return SendDelta(
        DeltaReply.build(block, delta, kind, meta_key),
        ops_size,
        f"delta of {len(ops)} op(s), {ops_size} bytes, against the answer sent under the request's tag "
        f"(the answer: about {answer_size} bytes)",
    )


# Tags computed below the adapter ------------------------------------------------------------------


@dataclass(frozen=True)
class RawPending:
    """A return value the layer below left unconverted (its result is a placeholder) for the driver to send
    as a delta from its change, or else to convert (`convert()`: the framework's result, as it would have
    made it). `tag`: the value's tag in `domain`, `leaves` the hashes of its parts; `conversion`: the
    framework's conversion in parts."""

    tag: str
    raw: Any
    leaves: Any
    domain: bytes
    conversion: Any
    convert: Callable[[], Any]


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
    saved: int | None = None
    """On a match, the bytes the reply saved (`saved_by`), when the layer below could measure the answer."""
    converted: bool = False
    """Whether the framework had already converted the answer when `decide` was called."""
    sizes: AnswerSizes = field(default_factory=lambda: AnswerSizes(kept=1))
    """Where the sizes of answers matched are kept (the driver's, shared by its calls)."""
    structured_in_text: StructuredInText = None
    """Set when the answer's one text block is, by the framework's own construction, the JSON of its
    structured content ("plain"), or of the value it wraps under `result` ("wrapped"): the history then
    keeps the text once instead of a second copy of the same data."""
    stub: StubCheck = NO_OUTPUT_SCHEMA
    """The tool's output schema, which a not-modified reply's stub must pass."""
    raw_leaves: Any = None
    """The hashes of the tool's return value's parts (`mcpcache.server.raw_deltas.RawLeaves`), computed
    with its tag in `raw_domain`, when the layer below converted it into an answer whose text is its
    structured content's JSON: the history keeps them for deltas computed from the next value's change."""
    raw_domain: bytes | None = None
    raw_deltas: bool = False
    """Set by the driver when the request may take a delta: the layer below may then hand the return value
    over unconverted (`raw_pending`) for a delta computed from its change (`mcpcache.server.raw_deltas`)."""
    raw_pending: RawPending | None = None

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
        after = decide_after_body(
            self.tool, self.policy, self.requested, tag, answer, meta_key=self.meta_key, stub=self.stub
        )
        self.reason = after.reason
        if isinstance(after, AnswerNotModified):
            self.reply = after.reply
            return after.reply
        return None

    def measure(self, answer: Answer) -> None:
        """After a match: the answer that was not sent, as the framework would have sent it."""
        reply, tag = self.reply, self.tag
        if reply is not None and tag is not None:
            self.saved = self.sizes.saved(
                tag, reply, lambda: full_answer_bytes(reply, answer, self.meta_key), self.meta_key
            )

    def measure_text_json(self, value: dict[str, Any]) -> None:
        """After a match: the answer the framework would have made of `value`, a dict of exact JSON types
        (one text block holding its compact JSON, the same JSON as structured content, no `_meta` of its
        own), measured without making it."""
        reply, tag = self.reply, self.tag
        if reply is None or tag is None:
            return

        def full() -> int:
            return _json_text_answer_bytes(reply, orjson.dumps(value), self.meta_key)

        self.saved = self.sizes.saved(tag, reply, full, self.meta_key)


def _json_text_answer_bytes(reply: Reply, data: bytes, meta_key: str) -> int:
    # The answer with `{}` for the dict: its bytes, less the placeholder, plus the JSON twice (as
    # structured content, and escaped in the text block).
    shell = Answer([TextContent(type="text", text="")], {}, False)
    return full_answer_bytes(reply, shell, meta_key) - 2 + len(data) + text_json_bytes(data)


def text_answer_bytes(reply: Reply, sizes: tuple[int, int], meta_key: str = META_KEY) -> int:
    """The length of the answer that is one text block holding the compact JSON of its structured content
    (and no `_meta` of its own), stamped with `reply`'s block, from that JSON's `sizes`: its UTF-8 length,
    and its length written as a JSON string (`text_json_bytes`). Measured without building it."""
    shell = Answer([TextContent(type="text", text="")], {}, False)
    return full_answer_bytes(reply, shell, meta_key) - 2 + sizes[0] + sizes[1]


class AnswerSizes:
    """The size of the full answer sent under each tag with each cache block, measured once: a tag names a
    version, so a version matched again is not serialised again only to be counted (a measure costs about
    what hashing the answer did). The oldest go first past `kept`."""

    def __init__(self, kept: int = 4096) -> None:
        self._kept = kept
        self._sizes: dict[tuple[str, bytes], int] = {}

    def saved(self, tag: str, reply: Reply, measure: Callable[[], int], meta_key: str = META_KEY) -> int:
        """What `reply` saved in place of the answer under `tag`, which `measure()` measures if need be."""
        key = (tag, orjson.dumps((reply.meta or {}).get(meta_key)))
        full = self._sizes.get(key)
        if full is None:
            full = measure()
            if len(self._sizes) >= self._kept:
                del self._sizes[next(iter(self._sizes))]
            self._sizes[key] = full
        return bytes_saved(full, reply_bytes(reply))


@dataclass(frozen=True)
class NotAnAnswer:
    """What `read_answer` returns for a result this layer must send as it is, with the reason why
    (an input-required leg; an answer a mounted server's own mcpcache layer already stamped)."""

    reason: str
