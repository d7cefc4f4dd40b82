"""References keep the event loop running while they count the tokens of a large result (and shorten its view):
that work runs in a worker thread, in pieces between which the loop gets its turn; short texts are counted
inline. Asserted as behaviour: how often a heartbeat task on the same loop ran during the call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import pytest

from mcpcache.refs import References
from mcpcache.refs.view import envelope_of, json_bytes, shorten
from mcpcache.stores import MemoryStore
from mcpcache.tokens import OFF_LOOP_CHARS, count_tokens, count_tokens_async

pytestmark = pytest.mark.anyio

T = TypeVar("T")

BIG = {"cells": [{"index": i, "source": f"df_{i} = load('{i}.csv')\n" + "df.describe()\n" * 60} for i in range(1_500)]}
"""About 1.4 MB of JSON: counting it takes a good fraction of a second inline."""


async def with_heartbeat(work: Callable[[], Awaitable[T]]) -> tuple[T, int]:
    """What `work` returned, and how many times a task sleeping 1 ms at a time woke meanwhile."""
    beats = 0
    done = anyio.Event()

    async def beat() -> None:
        nonlocal beats
        while not done.is_set():
            await anyio.sleep(0.001)
            beats += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(beat)
        await anyio.lowlevel.checkpoint()
        beats = 0
        result = await work()
        done.set()
    return result, beats


# Counted inline, the heartbeat gets at most one turn (measured: 1); off the loop it gets one every few
# milliseconds of the 60-100 ms the count takes (measured: 9-16 on a quiet machine, hundreds under load).
# A handful separates the two without depending on how fast this machine counts.
LOOP_RAN = 3


@pytest.fixture(autouse=True)
def tokenizer_loaded() -> None:
    assert count_tokens("loaded").method == "o200k"


async def test_for_model_of_a_large_result_lets_the_loop_run_and_counts_exactly() -> None:
    refs = References(MemoryStore())
    view, beats = await with_heartbeat(lambda: refs.for_model(BIG, server="s", tool="t"))
    assert view.uri is not None
    assert view.tokens == count_tokens(json_bytes(BIG).decode())  # the same count as inline
    assert beats >= LOOP_RAN, f"the loop ran {beats} times while a {view.size_bytes:,}-byte result was measured"


async def test_a_shortened_view_of_a_large_result_lets_the_loop_run_and_is_the_same_view() -> None:
    refs = References(MemoryStore(), max_view_bytes=64 * 1024)
    view, beats = await with_heartbeat(lambda: refs.for_model(BIG, server="s", tool="t"))
    assert view.uri is not None
    assert view.shortened == ["/cells"]
    assert beats >= LOOP_RAN
    inline = shorten(BIG, envelope_of(BIG, view.uri), view.uri, 64 * 1024)
    assert (view.envelope, view.shortened) == inline


async def test_short_texts_are_counted_inline_and_long_ones_in_a_thread() -> None:
    # A cancelled scope cancels at the first checkpoint: counting inline has none, handing it to a thread does.
    short = "hello world " * (OFF_LOOP_CHARS // 24)
    counted: Any = None
    with anyio.CancelScope() as scope:
        scope.cancel()
        counted = await count_tokens_async(short)
    assert counted == count_tokens(short)
    counted = None
    long = short * 4
    with anyio.CancelScope() as scope:
        scope.cancel()
        counted = await count_tokens_async(long)
    assert counted is None
    assert scope.cancelled_caught
    assert await count_tokens_async(long.encode()) == count_tokens(long)
