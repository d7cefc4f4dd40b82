"""The client's stale decisions (`mcpcache.client.policy.decide_stale`), with the time passed in, and the stale
windows an entry keeps from the replies that stored or revalidated it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpcache.client.policy import (
    EntryMeta,
    NotStale,
    ServeStale,
    ServeStored,
    StaleWindow,
    StoreAnswer,
    decide_reply,
    decide_stale,
)
from mcpcache.protocol import CacheBlock

TAG = 'W/"0123456789abcdef0123456789abcdef"'
AT = 100.0
"""When the entry's request was sent and its answer received; with ttl 5000 ms it is fresh until 105.0."""


def entry(*, swr_ms: int = 30_000, sie_ms: int = 600_000, ttl_ms: int = 5000) -> EntryMeta:
    return EntryMeta(
        "read", "private", ttl_ms, TAG, AT, AT, 10, stale_while_revalidate_ms=swr_ms, stale_if_error_ms=sie_ms
    )


@pytest.mark.parametrize("window", ["stale_while_revalidate", "stale_if_error"])
def test_within_the_window_after_freshness_ends(window: StaleWindow) -> None:
    choice = decide_stale(window, entry(), 110.0, None)
    assert isinstance(choice, ServeStale)
    assert choice.window == window
    assert "stale for 5.0 s" in choice.reason


def test_past_the_window() -> None:
    assert isinstance(decide_stale("stale_while_revalidate", entry(), 135.0, None), ServeStale)  # at its very end
    late = decide_stale("stale_while_revalidate", entry(), 135.1, None)
    assert isinstance(late, NotStale)
    assert "past its 30000 ms" in late.reason
    assert isinstance(decide_stale("stale_if_error", entry(), 135.1, None), ServeStale)


@pytest.mark.parametrize("window", ["stale_while_revalidate", "stale_if_error"])
def test_no_window_no_stale(window: StaleWindow) -> None:
    choice = decide_stale(window, entry(swr_ms=0, sie_ms=0), 105.5, None)
    assert isinstance(choice, NotStale)
    assert "allows none" in choice.reason


@pytest.mark.parametrize("window", ["stale_while_revalidate", "stale_if_error"])
def test_a_write_after_the_request_wins_over_every_window(window: StaleWindow) -> None:
    choice = decide_stale(window, entry(), 110.0, 107.0)
    assert isinstance(choice, NotStale)
    assert "read-your-writes" in choice.reason
    # Even one that came while the entry was fresh, or at the very instant its request was sent.
    assert isinstance(decide_stale(window, entry(), 110.0, AT), NotStale)
    # A write before the request is what the answer already shows.
    assert isinstance(decide_stale(window, entry(), 110.0, AT - 1), ServeStale)


@given(
    now=st.floats(0, 1e6),
    ended=st.none() | st.floats(0, 1e6),
    swr=st.integers(0, 86_400_000),
    sie=st.integers(0, 86_400_000),
    window=st.sampled_from(["stale_while_revalidate", "stale_if_error"]),
)
def test_never_stale_after_a_write_or_past_the_window(
    now: float, ended: float | None, swr: int, sie: int, window: StaleWindow
) -> None:
    stored = entry(swr_ms=swr, sie_ms=sie)
    choice = decide_stale(window, stored, now, ended)
    limit_ms = swr if window == "stale_while_revalidate" else sie
    if isinstance(choice, ServeStale):
        assert ended is None or ended < stored.requested_at
        assert limit_ms > 0
        assert now - stored.fresh_until() <= limit_ms / 1000


def test_entries_keep_the_windows_of_what_stored_and_revalidated_them() -> None:
    block = CacheBlock.model_validate({"ttlMs": 5000, "etag": TAG, "staleWhileRevalidateMs": 30_000})
    stored = decide_reply(
        tool="read", sent_etag=None, entry=None, is_error=False, block=block, size=10,
        requested_at=AT, received_at=AT, store=True,
    )  # fmt: skip
    assert isinstance(stored, StoreAnswer)
    assert (stored.meta.stale_while_revalidate_ms, stored.meta.stale_if_error_ms) == (30_000, 0)
    # A not-modified reply carries the current windows: they replace what the entry had.
    confirmed = CacheBlock.model_validate({"ttlMs": 5000, "etag": TAG, "notModified": True, "staleIfErrorMs": 9})
    served = decide_reply(
        tool="read", sent_etag=TAG, entry=stored.meta, is_error=False, block=confirmed, size=10,
        requested_at=AT + 10, received_at=AT + 10, store=True,
    )  # fmt: skip
    assert isinstance(served, ServeStored)
    assert (served.meta.stale_while_revalidate_ms, served.meta.stale_if_error_ms) == (0, 9)


def test_windows_round_trip_through_the_stored_record_and_old_records_read_as_none() -> None:
    meta = entry()
    raw = meta.to_json()
    assert raw["staleWhileRevalidateMs"] == 30_000
    assert raw["staleIfErrorMs"] == 600_000
    assert EntryMeta.from_json(raw) == meta
    plain = entry(swr_ms=0, sie_ms=0).to_json()
    assert "staleWhileRevalidateMs" not in plain  # what an earlier version wrote, and reads back
    assert EntryMeta.from_json(plain) == entry(swr_ms=0, sie_ms=0)
    for bad in (-1, "30000", 1.5, True):
        assert EntryMeta.from_json({**raw, "staleIfErrorMs": bad}) is None
    assert meta.servable_stale_s() == 600.0
