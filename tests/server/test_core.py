"""The server half's decisions (mcpcache.server.decisions), tested directly: no adapter, no transport.

`decide_before_body` and `decide_after_body` are pure: they are handed the policy, the request's tag,
the validator's or the answer's tag and the answer, and return a typed decision with a reason. The
rules of docs/protocol.md sections 3 and 4 (the conditional request, the not-modified reply) are stated here as
plain cases and as one property over every combination. A few driver tests at the end run
`Revalidator.run` with a plain `ToolCall`, to show it does what the decisions say.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpcache.etag import content_tag, validator_tag
from mcpcache.protocol import META_KEY, CacheBlock, conditional_request_meta, format_tag, requested_etag, weak_equal
from mcpcache.server.decisions import (
    Answer,
    AnswerNotModified,
    BelowTagging,
    RunBody,
    SendAsIs,
    SkipBody,
    Stamp,
    decide_after_body,
    decide_before_body,
    needs_content_tag,
    not_modified_kind,
)
from mcpcache.server.history import ANONYMOUS, Partition
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.server.revalidator import NotModified, PassThrough, Revalidator, Stamped
from mcpcache.server.stubs import StubCheck

pytestmark = pytest.mark.anyio

TAG = format_tag("0123456789abcdef" * 2)
OTHER = format_tag("fedcba9876543210" * 2)
MALFORMED: list[Any] = ["", 'W/""', '""', TAG[3:-1], f"W/{TAG[3:-1]}", f"{TAG} ", f'w/"{TAG[3:-1]}"', TAG + "x"]
POLICY = CachePolicy(ttl_ms=5000, scope="public", kind="declared")
TEXT = [{"type": "text", "text": "x = 1"}]


def answer(structured: Any = None, *, is_error: bool = False, meta: dict[str, Any] | None = None) -> Answer:
    return Answer(content=TEXT, structured_content=structured, is_error=is_error, meta=meta)


# --- after the body --------------------------------------------------------------------------------


def test_a_match_answers_not_modified_with_fresh_hints_and_the_current_tag() -> None:
    decision = decide_after_body("read", POLICY, TAG, TAG, answer({"kind": "doc"}))
    assert isinstance(decision, AnswerNotModified)
    assert decision.reply.to_wire() == {
        "content": [],
        "structuredContent": {"kind": "doc"},
        "isError": False,
        "_meta": {META_KEY: {"ttlMs": 5000, "cacheScope": "public", "etag": TAG, "notModified": True}},
    }
    # Weak comparison: the request's strong form matches, and the reply names the current (weak) tag.
    strong = decide_after_body("read", POLICY, TAG.removeprefix("W/"), TAG, answer({"kind": "doc"}))
    assert strong == decision


def test_a_configured_meta_key_names_the_reply_block() -> None:
    decision = decide_after_body("read", POLICY, TAG, TAG, answer(), meta_key="io.example/cache")
    assert isinstance(decision, AnswerNotModified)
    assert list(decision.reply.meta) == ["io.example/cache"]


@pytest.mark.parametrize("requested", [None, TAG, OTHER])
@pytest.mark.parametrize("tag", [None, TAG])
def test_an_error_is_never_stamped_nor_not_modified(requested: str | None, tag: str | None) -> None:
    decision = decide_after_body("read", POLICY, requested, tag, answer({"kind": "doc"}, is_error=True))
    assert decision == SendAsIs("error results are never stamped")


def test_what_is_not_a_tool_answer_is_sent_as_is() -> None:
    assert isinstance(decide_after_body("read", POLICY, TAG, TAG, None), SendAsIs)


def test_a_request_without_a_tag_gets_the_stamped_answer() -> None:
    decision = decide_after_body("read", POLICY, None, TAG, answer())
    assert decision == Stamp(CacheBlock(ttl_ms=5000, cache_scope="public", etag=TAG), "stamped (no tag in the request)")


def test_another_tag_gets_the_stamped_answer() -> None:
    decision = decide_after_body("read", POLICY, OTHER, TAG, answer())
    assert isinstance(decision, Stamp)
    assert decision.block.etag == TAG
    assert "not the current one" in decision.reason


def test_a_tool_that_stamps_no_tag_never_answers_not_modified() -> None:
    untagged = CachePolicy(ttl_ms=5000, etag=False)
    # Even handed a tag equal to the request's, a tool declared etag=False stamps none.
    decision = decide_after_body("read", untagged, TAG, TAG, answer())
    assert isinstance(decision, Stamp)
    assert decision.block == CacheBlock(ttl_ms=5000)
    assert "stamps no tag" in decision.reason


def test_an_answer_without_a_canonical_form_is_stamped_without_a_tag() -> None:
    decision = decide_after_body("read", POLICY, TAG, None, answer())
    assert isinstance(decision, Stamp)
    assert decision.block.etag is None
    assert "no canonical form" in decision.reason


@pytest.mark.parametrize("malformed", MALFORMED, ids=repr)
def test_a_malformed_requested_tag_never_answers_not_modified(malformed: str) -> None:
    # Handed as is (a driver that forgot to parse) or through the request reader, it confirms nothing,
    # not even when the "current tag" is the same malformed string.
    for current in (TAG, malformed):
        assert not isinstance(decide_after_body("read", POLICY, malformed, current, answer()), AnswerNotModified)
    assert requested_etag(conditional_request_meta(malformed)) is None


@pytest.mark.parametrize(
    ("structured", "policy", "kind"),
    [
        ({"kind": "own", "x": 1}, POLICY, "own"),  # the answer's own string kind first
        ({"kind": 7}, POLICY, "declared"),  # not a string: the declared kind
        ({"x": 1}, POLICY, "declared"),
        ({"x": 1}, CachePolicy(), "read"),  # neither: the tool name
        ({"kind": ""}, CachePolicy(), "read"),  # an empty kind names nothing
        (None, POLICY, None),  # no structured content: none in the reply
    ],
    ids=["own", "non-string", "declared", "tool name", "empty", "unstructured"],
)
def test_the_kind_rule(structured: Any, policy: CachePolicy, kind: str | None) -> None:
    assert not_modified_kind("read", policy, structured) == kind
    decision = decide_after_body("read", policy, TAG, TAG, answer(structured))
    assert isinstance(decision, AnswerNotModified)
    wire = decision.reply.to_wire()
    if kind is None:
        assert "structuredContent" not in wire
    else:
        assert wire["structuredContent"] == {"kind": kind}


requests = st.sampled_from([None, TAG, TAG.removeprefix("W/"), OTHER, *MALFORMED])


@settings(deadline=None)
@given(
    requested=requests,
    tag=st.sampled_from([None, TAG, OTHER]),
    is_error=st.booleans(),
    etag=st.booleans(),
    structured=st.sampled_from([None, {"kind": "doc"}, {"x": 1}]),
)
def test_not_modified_exactly_when_a_good_answers_tag_matches_a_well_formed_request(
    requested: str | None, tag: str | None, is_error: bool, etag: bool, structured: Any
) -> None:
    policy = CachePolicy(ttl_ms=5, etag=etag)
    decision = decide_after_body("read", policy, requested, tag, answer(structured, is_error=is_error))
    matches = not is_error and etag and tag is not None and requested is not None and weak_equal(requested, tag)
    assert isinstance(decision, AnswerNotModified) is matches
    assert isinstance(decision, SendAsIs) is is_error
    if isinstance(decision, Stamp):
        assert decision.block.etag == (tag if etag else None)
        assert (decision.block.ttl_ms, decision.block.cache_scope) == (5, "private")
    assert decision.reason


def test_needs_content_tag() -> None:
    assert needs_content_tag(POLICY, None, answer())
    assert not needs_content_tag(POLICY, TAG, answer())  # the validator's tag stands
    assert not needs_content_tag(POLICY, None, answer(is_error=True))  # errors are never hashed
    assert not needs_content_tag(POLICY, None, None)
    assert not needs_content_tag(CachePolicy(etag=False), None, answer())


# --- before the body (validators) ------------------------------------------------------------------


VALIDATED = CachePolicy(ttl_ms=5000, kind="declared", validator=lambda args: 1)


@pytest.mark.parametrize(
    ("requested", "pre_tag", "structured"),
    [
        (TAG, None, True),  # no validator tag
        (None, TAG, True),  # no tag in the request
        (OTHER, TAG, True),  # another version
        (TAG, TAG, None),  # matches, but the reply's shape is not known yet
        *((bad, TAG, True) for bad in MALFORMED),
    ],
)
def test_the_body_runs_unless_the_validator_tag_matches(
    requested: str | None, pre_tag: str | None, structured: bool | None
) -> None:
    decision = decide_before_body("read", VALIDATED, requested, pre_tag, structured)
    assert isinstance(decision, RunBody)
    assert decision.reason


@pytest.mark.parametrize(
    ("structured", "own_kind", "kind"),
    [(True, "own", "own"), (True, None, "declared"), (False, "own", None)],
)
def test_a_validator_match_skips_the_body(structured: bool, own_kind: str | None, kind: str | None) -> None:
    decision = decide_before_body("read", VALIDATED, TAG.removeprefix("W/"), TAG, structured, own_kind=own_kind)
    assert isinstance(decision, SkipBody)
    assert decision.reply.structured_content == ({"kind": kind} if kind else None)
    assert decision.reply.meta == {META_KEY: {"ttlMs": 5000, "cacheScope": "private", "etag": TAG, "notModified": True}}


def test_a_validator_match_names_the_tool_when_nothing_else_is_known() -> None:
    decision = decide_before_body("read", CachePolicy(validator=lambda a: 1), TAG, TAG, True)
    assert isinstance(decision, SkipBody)
    assert decision.reply.structured_content == {"kind": "read"}


def test_decisions_are_frozen_values() -> None:
    decision = decide_after_body("read", POLICY, None, TAG, answer())
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.reason = "changed"  # type: ignore[misc]
    assert decision == decide_after_body("read", POLICY, None, TAG, answer())


# --- the driver, with a plain ToolCall ----------------------------------------------------------------


class Body:
    """A tool body: answers `structured` with `meta`, and counts its runs."""

    def __init__(self, structured: Any = None, meta: dict[str, Any] | None = None, is_error: bool = False) -> None:
        self.answer = answer(structured, is_error=is_error, meta=meta)
        self.runs = 0

    async def __call__(self) -> Answer:
        self.runs += 1
        return self.answer


@dataclasses.dataclass(frozen=True)
class Call:
    """The smallest `ToolCall`: the body is a function, the answer is the result itself, no memo, nothing
    below that tags, the tool's output schema unknown."""

    tool: str
    body: Body
    request_meta: object = None
    arguments: dict[str, Any] = dataclasses.field(default_factory=dict)
    structured: bool | None = None
    partition: Partition = ANONYMOUS
    policy: CachePolicy | None = None
    memo_inside: bool = False
    memo_outside: bool = False
    tags_below: bool = False

    async def run_body(self) -> Answer:
        return await self.body()

    async def run_body_tagged(self, tagging: BelowTagging) -> Answer:
        raise AssertionError("nothing below tags")

    def read_answer(self, result: Answer) -> Answer:
        return result

    async def has_structured_output(self) -> bool | None:
        return self.structured

    async def stub_check(self) -> StubCheck:
        return StubCheck.unknown("no schema in these tests")


async def test_the_driver_stamps_the_tag_of_the_answer_meta_included() -> None:
    revalidator = Revalidator(ToolPolicies({"read": POLICY}))
    body = Body({"kind": "doc"}, {"io.jupyter-mcp/cell_id": "c1"})
    outcome = await revalidator.run(Call("read", body))
    assert isinstance(outcome, Stamped)
    assert outcome.block.etag == content_tag(TEXT, {"kind": "doc"}, {"io.jupyter-mcp/cell_id": "c1"})
    assert outcome.block.etag != content_tag(TEXT, {"kind": "doc"})

    again = await revalidator.run(Call("read", body, conditional_request_meta(outcome.block.etag)))
    assert isinstance(again, NotModified)
    assert again.body_ran


async def test_the_driver_skips_the_body_on_a_validator_match_only() -> None:
    policy = CachePolicy(ttl_ms=5, validator=lambda args: args["v"])
    revalidator = Revalidator(ToolPolicies({"read": policy}))
    body = Body({"kind": "doc"})

    async def call(v: int, tag: str | None) -> Any:
        meta = conditional_request_meta(tag) if tag else None
        return await revalidator.run(Call("read", body, meta, {"v": v}, structured=True))

    tag = validator_tag("read", {"v": 1}, 1)
    skipped = await call(1, tag)
    assert isinstance(skipped, NotModified)
    assert not skipped.body_ran
    assert body.runs == 0
    changed = await call(2, tag)
    assert isinstance(changed, Stamped)
    assert changed.block.etag == validator_tag("read", {"v": 2}, 2)
    assert body.runs == 1


async def test_the_driver_passes_errors_and_undeclared_tools_through() -> None:
    revalidator = Revalidator(ToolPolicies({"read": POLICY}))
    failing = Body({"kind": "doc"}, is_error=True)
    outcome = await revalidator.run(Call("read", failing, conditional_request_meta(TAG)))
    assert outcome == PassThrough(failing.answer, "error results are never stamped")
    other = await revalidator.run(Call("other", Body()))
    assert isinstance(other, PassThrough)
    assert other.reason == "tool not declared"
