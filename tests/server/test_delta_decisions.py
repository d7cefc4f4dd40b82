"""The delta decisions (`mcpcache.server.decisions`): pure functions, each answer with a reason a person
can read. Which request may get a delta (`plan_delta`), which reply goes after the work
(`decide_delta`), and whose history an answer belongs to (`history_partition`)."""

from __future__ import annotations

from typing import Any

import pytest

from mcpcache.delta import FORMAT
from mcpcache.protocol import CacheBlock, Conditions, DeltaBlock, parse_cache_block
from mcpcache.server.decisions import (
    SendDelta,
    SendFull,
    TryDelta,
    decide_delta,
    history_partition,
    plan_delta,
)
from mcpcache.server.history import ANONYMOUS, PUBLIC, UNKNOWN, Partition
from mcpcache.server.policies import CachePolicy

OLD = 'W/"00000000000000000000000000000001"'
NEW = 'W/"00000000000000000000000000000002"'
DIGEST = "sha256:" + "ab" * 32
OFFERED = (FORMAT,)
PRIVATE = CachePolicy(ttl_ms=5000, kind="notes")


def asks(*formats: str, etag: str | None = OLD) -> Conditions:
    return Conditions(etag=etag, accept_delta=formats)


@pytest.mark.parametrize(
    ("policy", "conditions", "tag", "offered", "kept", "reason"),
    [
        (PRIVATE, asks(), NEW, OFFERED, True, "the request accepts no delta"),
        (PRIVATE, asks(FORMAT), NEW, (), True, "the server keeps no history of answers (delta_history_bytes=0)"),
        (CachePolicy(deltas=False), asks(FORMAT), NEW, OFFERED, True, "deltas are off for this tool"),
        (PRIVATE, asks(FORMAT), None, OFFERED, True, "the answer has no tag"),
        (PRIVATE, asks(FORMAT, etag=None), NEW, OFFERED, True, "the request carries no tag to name a base"),
        (PRIVATE, asks(FORMAT, etag=NEW[2:]), NEW, OFFERED, True, "the request's tag is the current one"),
        (
            PRIVATE,
            asks("json-merge-patch/9"),
            NEW,
            OFFERED,
            True,
            f"the request accepts none of the formats this server sends ({FORMAT})",
        ),
        (
            PRIVATE,
            asks(FORMAT),
            NEW,
            OFFERED,
            False,
            "this call's answers are not kept (arguments with no canonical form, unreadable token)",
        ),
    ],
)
def test_when_no_delta_is_tried_the_reason_says_why(
    policy: CachePolicy, conditions: Conditions, tag: str | None, offered: tuple[str, ...], kept: bool, reason: str
) -> None:
    assert plan_delta(policy, conditions, tag, offered=offered, kept=kept) == SendFull(reason)


def test_the_caller_s_preference_picks_the_format_among_those_offered() -> None:
    plan = plan_delta(PRIVATE, asks("other/1", FORMAT, "third/2"), NEW, offered=("third/2", FORMAT), kept=True)
    assert plan == TryDelta(OLD, FORMAT, f"the request accepts {FORMAT} and its tag is not the current one")


def decide(**overrides: Any) -> SendDelta | SendFull:
    arguments: dict[str, Any] = {
        "base_held": True,
        "answer_size": 10_000,
        "ops": [{"op": "replace", "path": "/structuredContent/n", "value": 2}],
        "ops_size": 60,
        "digest": DIGEST,
    } | overrides
    block = CacheBlock(ttl_ms=5000, cache_scope="private", etag=NEW)
    plan = TryDelta(OLD, FORMAT, "asked")
    return decide_delta("read", PRIVATE, block, plan, {"n": 2}, **arguments)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (
            {"base_held": False, "ops": None, "digest": None},
            "base not held: the answer sent under the request's tag is not in this server's history "
            "(never sent by this process, evicted, or sent for other arguments or to another partition)",
        ),
        ({"answer_size": None, "ops": None, "digest": None}, "the answer has no JSON form to diff"),
        ({"ops": None, "digest": None}, "the delta would be larger than half the answer (5000 bytes)"),
        ({"digest": None}, "the answer has no digest form (RFC 8785: e.g. an integer beyond 2^53)"),
    ],
)
def test_after_the_work_the_full_answer_goes_with_a_reason(overrides: dict[str, Any], reason: str) -> None:
    assert decide(**overrides) == SendFull(reason)


def test_a_delta_reply_is_the_stub_with_the_new_block_and_the_delta() -> None:
    choice = decide()
    assert isinstance(choice, SendDelta)
    assert choice.size == 60
    assert choice.reason.startswith("delta of 1 op(s), 60 bytes")
    wire = choice.reply.to_wire()
    assert wire["content"] == []
    assert wire["isError"] is False
    assert wire["structuredContent"] == {"kind": "notes"}  # the declared kind: the answer has none
    block = parse_cache_block(wire["_meta"])
    assert block is not None
    assert (block.ttl_ms, block.cache_scope, block.etag, block.not_modified) == (5000, "private", NEW, False)
    ops = [{"op": "replace", "path": "/structuredContent/n", "value": 2}]
    assert block.delta == DeltaBlock(base=OLD, format=FORMAT, ops=ops, digest=DIGEST)


def test_a_stub_follows_the_kind_rule_and_is_absent_without_structured_content() -> None:
    block = CacheBlock(ttl_ms=0, etag=NEW)
    plan = TryDelta(OLD, FORMAT, "asked")
    common: dict[str, Any] = {"base_held": True, "answer_size": 100, "ops": [], "ops_size": 2, "digest": DIGEST}
    own = decide_delta("read", PRIVATE, block, plan, {"kind": "own"}, **common)
    none = decide_delta("read", PRIVATE, block, plan, None, **common)
    named = decide_delta("read", CachePolicy(), block, plan, {"n": 1}, **common)
    assert isinstance(own, SendDelta)
    assert own.reply.structured_content == {"kind": "own"}
    assert isinstance(none, SendDelta)
    assert "structuredContent" not in none.reply.to_wire()
    assert isinstance(named, SendDelta)
    assert named.reply.structured_content == {"kind": "read"}


def test_public_answers_share_one_history_and_private_ones_stay_with_their_caller() -> None:
    alice = Partition.caller("alice", None, None, [])
    assert history_partition(CachePolicy(scope="public"), alice) == PUBLIC
    assert history_partition(CachePolicy(scope="public"), UNKNOWN) == PUBLIC
    assert history_partition(PRIVATE, alice) == alice
    assert history_partition(PRIVATE, ANONYMOUS) == ANONYMOUS
    assert history_partition(PRIVATE, UNKNOWN) is None
