"""The gateway's pure decisions: what an upstream answer becomes, store or not, partitions, handed-on ttl."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpcache.gateway.config import ToolSettings
from mcpcache.gateway.decisions import (
    ANONYMOUS_PARTITION,
    AskAgainWithoutTag,
    Direct,
    Principal,
    TagFromAnswer,
    TagFromUpstream,
    UpstreamNotModified,
    UseStore,
    client_ttl_ms,
    decide_store,
    effective_policy,
    forwarded_tag,
    partition_of,
    read_upstream,
)
from mcpcache.protocol import CacheBlock

TAG = 'W/"' + "a" * 32 + '"'
OTHER = 'W/"' + "b" * 32 + '"'


def block(**fields: object) -> CacheBlock:
    return CacheBlock.model_validate(fields)


def test_an_unstamped_answer_is_tagged_from_the_answer_with_the_configured_block() -> None:
    reading = read_upstream(ToolSettings(ttl_ms=5000, scope="public", kind="k"), None, None, is_error=False)
    assert isinstance(reading, TagFromAnswer)
    assert (reading.policy.ttl_ms, reading.policy.scope, reading.policy.kind, reading.policy.etag) == (
        5000,
        "public",
        "k",
        True,
    )


def test_an_upstream_tag_is_kept_and_either_side_may_narrow_the_scope() -> None:
    upstream = block(ttlMs=7000, cacheScope="private", etag=TAG)
    reading = read_upstream(ToolSettings(scope="public"), upstream, None, is_error=False)
    assert isinstance(reading, TagFromUpstream)
    assert reading.tag == TAG
    assert (reading.policy.ttl_ms, reading.policy.scope) == (7000, "private")
    # A configured ttl wins over the upstream's; a configured private scope narrows a public answer.
    public = block(ttlMs=7000, cacheScope="public", etag=TAG)
    assert effective_policy(ToolSettings(ttl_ms=10), public).ttl_ms == 10
    assert effective_policy(ToolSettings(), public).scope == "private"
    assert effective_policy(ToolSettings(scope="public"), public).scope == "public"
    # A block without ttl and no configured one: revalidate before every reuse.
    assert effective_policy(ToolSettings(), block(etag=TAG)).ttl_ms == 0


def test_an_upstream_not_modified_counts_only_for_the_tag_that_was_sent() -> None:
    confirmed = block(ttlMs=1, etag=TAG, notModified=True)
    assert isinstance(read_upstream(ToolSettings(), confirmed, TAG, is_error=False), UpstreamNotModified)
    for forwarded, is_error in [(None, False), (OTHER, False), (TAG, True)]:
        reading = read_upstream(ToolSettings(), confirmed, forwarded, is_error=is_error)
        assert isinstance(reading, AskAgainWithoutTag)
    untagged = ToolSettings(etag=False)
    assert isinstance(read_upstream(untagged, confirmed, TAG, is_error=False), AskAgainWithoutTag)


def test_a_tool_that_is_not_tagged_forwards_no_tag_and_stamps_none() -> None:
    settings = ToolSettings(ttl_ms=1000, etag=False)
    assert forwarded_tag(settings, TAG) is None
    assert forwarded_tag(ToolSettings(), TAG) == TAG
    reading = read_upstream(settings, block(ttlMs=5, etag=TAG), None, is_error=False)
    assert isinstance(reading, TagFromAnswer)
    assert not reading.policy.etag


@pytest.mark.parametrize(
    ("has_store", "partition", "scope", "expected"),
    [
        (False, "caller:x", "public", Direct),
        (True, "caller:x", "private", UseStore),
        (True, None, "private", Direct),
        (True, None, "public", UseStore),
    ],
)
def test_who_goes_through_the_store(has_store: bool, partition: str | None, scope: str, expected: type) -> None:
    plan = decide_store(has_store, partition, ToolSettings(scope=scope))  # type: ignore[arg-type]
    assert isinstance(plan, expected)
    if isinstance(plan, UseStore):
        assert plan.partition == (partition or ANONYMOUS_PARTITION)


principals = st.builds(
    Principal,
    token=st.text(min_size=1, max_size=20),
    client_id=st.text(max_size=10),
    subject=st.none() | st.text(max_size=10),
    issuer=st.none() | st.text(max_size=10),
    scopes=st.lists(st.text(max_size=5), max_size=3).map(tuple),
)


@given(principals, principals)
def test_partitions_are_equal_only_for_what_the_verifier_vouched_for_equally(a: Principal, b: Principal) -> None:
    by_principal = (a.issuer, a.subject, a.client_id, sorted(a.scopes)) == (
        b.issuer,
        b.subject,
        b.client_id,
        sorted(b.scopes),
    )
    assert (partition_of(a, "principal") == partition_of(b, "principal")) == by_principal
    assert (partition_of(a, "token") == partition_of(b, "token")) == (a.token == b.token)
    assert partition_of(a, "token") != partition_of(b, "principal")
    assert ANONYMOUS_PARTITION not in (partition_of(a, "principal"), partition_of(a, "token"))


def test_anonymous_callers_have_no_partition() -> None:
    assert partition_of(None, "principal") is None


def test_a_stored_answer_hands_on_what_is_left_of_its_freshness() -> None:
    assert client_ttl_ms(5000, None) == 5000
    assert client_ttl_ms(5000, 1200) == 1200
    assert client_ttl_ms(5000, 9000) == 5000
    assert client_ttl_ms(5000, -3) == 0
    assert client_ttl_ms(None, 100) is None


def test_an_upstream_whose_tags_are_not_trusted_is_sent_none_and_its_tags_and_confirmations_are_ignored() -> None:
    settings = ToolSettings(scope="public")
    assert forwarded_tag(settings, TAG, trust_tags=False) is None
    tagged = read_upstream(
        settings, block(ttlMs=7, cacheScope="public", etag=TAG), None, is_error=False, trust_tags=False
    )
    assert isinstance(tagged, TagFromAnswer)
    assert (tagged.policy.ttl_ms, tagged.policy.scope, tagged.policy.etag) == (7, "public", True)
    confirmed = block(ttlMs=1, etag=TAG, notModified=True)
    assert isinstance(read_upstream(settings, confirmed, TAG, is_error=False, trust_tags=False), AskAgainWithoutTag)
