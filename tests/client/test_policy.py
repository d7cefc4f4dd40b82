"""The client's pure decisions (mcpcache.client.policy), with the time passed in."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpcache.client.policy import (
    DELTA_FORMATS,
    ApplyDelta,
    EntryMeta,
    Fetch,
    RepeatWithoutTag,
    ReturnUnstored,
    Revalidate,
    ServeFresh,
    ServeStored,
    StoreAnswer,
    decide_lookup,
    decide_reply,
    delta_formats,
    ends_freshness,
    may_serve,
)
from mcpcache.protocol import CacheBlock

TAG = 'W/"0123456789abcdef0123456789abcdef"'
OTHER = 'W/"ffffffffffffffffffffffffffffffff"'


def entry(*, ttl_ms: int = 5000, etag: str | None = TAG, at: float = 100.0, scope: str = "private") -> EntryMeta:
    return EntryMeta("read", scope, ttl_ms, etag, requested_at=at, received_at=at, size=10)  # type: ignore[arg-type]


_DEFAULT = entry()


def reply(
    block: dict[str, object] | None,
    *,
    is_error: bool = False,
    sent: str | None = TAG,
    stored: EntryMeta | None = _DEFAULT,
    accepted: tuple[str, ...] = (),
    keep_private: bool = True,
) -> object:
    return decide_reply(
        tool="read",
        sent_etag=sent,
        entry=stored,
        is_error=is_error,
        block=CacheBlock.model_validate(block) if block is not None else None,
        size=10,
        requested_at=200.0,
        received_at=201.0,
        store=True,
        accepted=accepted,
        keep_private=keep_private,
    )


class TestLookup:
    def test_miss(self) -> None:
        assert isinstance(decide_lookup("use", None, 100.0, None), Fetch)

    def test_fresh_within_ttl(self) -> None:
        decision = decide_lookup("use", entry(), 104.0, None)
        assert isinstance(decision, ServeFresh)
        assert "1.0 s" in decision.reason

    def test_stale_with_tag_revalidates(self) -> None:
        decision = decide_lookup("use", entry(), 105.0, None)
        assert isinstance(decision, Revalidate)
        assert decision.etag == TAG
        assert "expired" in decision.reason

    def test_stale_without_tag_fetches(self) -> None:
        decision = decide_lookup("use", entry(etag=None), 106.0, None)
        assert isinstance(decision, Fetch)
        assert decision.store

    def test_ttl_zero_always_revalidates(self) -> None:
        assert isinstance(decide_lookup("use", entry(ttl_ms=0), 100.0, None), Revalidate)

    def test_freshness_ended_after_request(self) -> None:
        decision = decide_lookup("use", entry(), 101.0, 100.5)
        assert isinstance(decision, Revalidate)
        assert "freshness ended" in decision.reason

    def test_freshness_ended_before_request_keeps_it_fresh(self) -> None:
        assert isinstance(decide_lookup("use", entry(), 101.0, 99.0), ServeFresh)

    def test_modes(self) -> None:
        bypass = decide_lookup("bypass", entry(), 101.0, None)
        refresh = decide_lookup("refresh", entry(), 101.0, None)
        assert isinstance(bypass, Fetch)
        assert not bypass.store
        assert isinstance(refresh, Fetch)
        assert refresh.store

    @given(now=st.floats(0, 1e6), at=st.floats(0, 1e6), ttl=st.integers(0, 86_400_000))
    def test_never_fresh_after_ttl(self, now: float, at: float, ttl: int) -> None:
        decision = decide_lookup("use", entry(ttl_ms=ttl, at=at), now, None)
        if now >= at + ttl / 1000:
            assert not isinstance(decision, ServeFresh)


class TestReply:
    def test_full_cacheable_answer_is_stored(self) -> None:
        decision = reply({"ttlMs": 1000, "etag": TAG}, sent=None, stored=None)
        assert isinstance(decision, StoreAnswer)
        assert decision.meta.etag == TAG
        assert decision.meta.requested_at == 200.0

    def test_not_modified_matching_serves_stored(self) -> None:
        decision = reply({"ttlMs": 7000, "etag": TAG, "notModified": True, "cacheScope": "private"})
        assert isinstance(decision, ServeStored)
        assert decision.meta.ttl_ms == 7000
        assert decision.meta.received_at == 201.0

    @pytest.mark.parametrize(
        ("block", "kwargs"),
        [
            ({"etag": TAG, "notModified": True}, {"sent": None}),
            ({"etag": TAG, "notModified": True}, {"stored": None}),
            ({"etag": OTHER, "notModified": True}, {}),
            ({"notModified": True}, {}),
            ({"etag": TAG, "notModified": True}, {"is_error": True}),
            ({"etag": TAG, "notModified": True}, {"stored": entry(etag=OTHER)}),
        ],
        ids=["no-tag-sent", "no-entry", "other-tag", "no-tag-in-reply", "error", "entry-changed"],
    )
    def test_unmatched_not_modified_is_repeated(self, block: dict[str, object], kwargs: dict[str, object]) -> None:
        assert isinstance(reply(block, **kwargs), RepeatWithoutTag)

    def test_error_is_never_stored_and_keeps_the_entry(self) -> None:
        decision = reply({"ttlMs": 1000, "etag": TAG}, is_error=True)
        assert isinstance(decision, ReturnUnstored)
        assert not decision.drop_entry

    def test_answer_without_block_supersedes_the_entry(self) -> None:
        decision = reply(None, sent=None)
        assert isinstance(decision, ReturnUnstored)
        assert decision.drop_entry

    def test_block_without_ttl_or_tag_is_not_stored(self) -> None:
        assert isinstance(reply({"cacheScope": "public"}, sent=None), ReturnUnstored)


def test_public_arm_needs_public_scope_and_sharing() -> None:
    assert may_serve(entry(scope="private"), "private", False)
    assert not may_serve(entry(scope="private"), "public", True)
    assert not may_serve(entry(scope="public"), "public", False)
    assert may_serve(entry(scope="public"), "public", True)


@pytest.mark.parametrize(
    ("read_only", "trusted", "with_block", "ends"),
    [
        (True, True, False, False),
        (False, True, False, True),
        (None, True, False, True),
        (True, False, False, True),
        (False, False, True, False),
    ],
)
def test_ends_freshness(read_only: bool | None, trusted: bool, with_block: bool, ends: bool) -> None:
    assert ends_freshness(read_only=read_only, trusted=trusted, answered_with_block=with_block) is ends


def test_entry_meta_round_trip_and_corrupt_records() -> None:
    meta = entry()
    assert EntryMeta.from_json(meta.to_json()) == meta
    for corrupt in (None, [], {"tool": 1}, {**meta.to_json(), "ttlMs": -1}, {**meta.to_json(), "size": "x"}):
        assert EntryMeta.from_json(corrupt) is None


NEW = 'W/"11111111111111111111111111111111"'
DIGEST = "sha256:" + "0" * 64


def delta_block(**changes: object) -> dict[str, object]:
    delta = {"base": TAG, "format": DELTA_FORMATS[0], "ops": [], "digest": DIGEST}
    block: dict[str, object] = {"ttlMs": 7000, "cacheScope": "private", "etag": NEW, "delta": delta}
    for name, value in changes.items():
        if name in delta:
            delta[name] = value
        elif value is ...:
            block.pop(name)
        else:
            block[name] = value
    return block


class TestDeltaReply:
    def test_a_delta_to_the_tag_sent_is_applied_and_kept_as_the_new_answer(self) -> None:
        decision = reply(delta_block(), accepted=DELTA_FORMATS)
        assert isinstance(decision, ApplyDelta)
        assert decision.delta.ops == []
        assert isinstance(decision.then, StoreAnswer)
        assert (decision.then.meta.etag, decision.then.meta.ttl_ms) == (NEW, 7000)
        assert (decision.then.meta.requested_at, decision.then.meta.received_at) == (200.0, 201.0)

    def test_a_private_delta_in_a_partition_that_keeps_none_is_applied_not_kept(self) -> None:
        decision = reply(delta_block(), accepted=DELTA_FORMATS, keep_private=False)
        assert isinstance(decision, ApplyDelta)
        assert isinstance(decision.then, ReturnUnstored)

    @pytest.mark.parametrize(
        ("block", "kwargs", "why"),
        [
            (delta_block(), {}, "accepted none"),
            (delta_block(), {"sent": None}, "carried no tag"),
            (delta_block(format="other/1"), {}, "did not accept"),
            (delta_block(base=OTHER), {}, "base"),
            (delta_block(etag=...), {}, "no tag for the new answer"),
            (delta_block(notModified=True), {}, "not-modified"),
            (delta_block(), {"is_error": True}, "error"),
            (delta_block(), {"stored": None}, "gone"),
            (delta_block(ops=[{}] * 100_001), {}, "more than"),
            ({"etag": NEW, "delta": {"base": TAG}}, {}, "malformed"),
        ],
        ids=["unasked", "no-tag", "format", "base", "no-new-tag", "not-modified", "error", "no-entry", "ops", "fields"],
    )  # fmt: skip
    def test_a_delta_that_cannot_be_used_is_asked_again(
        self, block: dict[str, object], kwargs: dict[str, object], why: str
    ) -> None:
        accepted = () if "sent" not in kwargs and why == "accepted none" else DELTA_FORMATS
        decision = reply(block, accepted=accepted, **kwargs)  # type: ignore[arg-type]
        assert isinstance(decision, RepeatWithoutTag)
        assert decision.delta
        assert why in decision.reason

    def test_what_a_request_accepts(self) -> None:
        assert delta_formats(True) == DELTA_FORMATS == ("json-patch+splice/2", "json-patch+splice/1")
        assert delta_formats(False) == ()
