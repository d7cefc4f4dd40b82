"""The tool cache over a Redis that stops answering (SIGSTOP: the socket stays open, nothing comes back),
over one that is killed and over one that was never there: every call is answered, by the server, within
the store deadline plus a generous margin, and the cache works again once Redis does. What the user reads
meanwhile is one line when the store fails and one when it answers again: never a traceback, never a line
per call.

Bounds here are behaviour (the call did not hang on the store), not speed; the latencies are printed
(`pytest -s`) and measured reproducibly by benchmarks/redis_faults.py.
"""

from __future__ import annotations

import logging
import time

import anyio
import pytest
from support.redis_server import Frozen, RedisServer, free_port, redis_server_binary
from support.transports import MODERN, ServerTarget

from mcpcache.bench.common import percentile
from mcpcache.client import CacheSettings, ToolCache
from mcpcache.stores import RedisStore

from .harness import connect, live_clock
from .lab import Lab, build_lab

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

K = {"key": "k"}
DEADLINE_S = 1.0
MARGIN_S = 3.0
COOLDOWN_S = 1.0


def printed(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every line logged at WARNING or above, by any logger, as a handler prints it (tracebacks included)."""
    return caplog.text.splitlines()


def report(fault: str, samples: list[float]) -> None:
    print(
        f"\n{fault}: {len(samples)} calls, p50 {percentile(samples, 0.5) * 1000:.1f} ms, "
        f"max {max(samples) * 1000:.1f} ms"
    )


async def test_a_frozen_redis_costs_each_call_at_most_the_deadline(
    own_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    clock = live_clock()
    lab = Lab()
    async with RedisStore(own_redis_server.url, namespace="frozen", cooldown_s=COOLDOWN_S) as store:
        cache = ToolCache(store, CacheSettings(store_deadline_s=DEADLINE_S, store_cooldown_s=COOLDOWN_S), clock=clock)
        async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
            assert (await conn.call("read", K)).outcome.status == "miss"
            assert (await conn.call("read", K)).outcome.status == "fresh_hit"

            samples: list[float] = []
            with Frozen(own_redis_server):
                for _ in range(8):
                    started = time.monotonic()
                    call = await conn.call("read", K)
                    samples.append(time.monotonic() - started)
                    assert not call.result.is_error
                    assert call.result.structured_content["text"] == "k: first edition"
                    assert samples[-1] < DEADLINE_S + MARGIN_S
                assert cache.stats.store_failures >= 1
            report("tool cache, frozen Redis", samples)
            [failed] = printed(caplog)
            assert "tool cache store (RedisStore)" in failed
            assert "did not answer" in failed

            # Thawed: once both circuits' cool-downs pass, the cache stores and serves again.
            await anyio.sleep(COOLDOWN_S + 0.2)
            failures = cache.stats.store_failures
            for _ in range(50):  # behaviour with a generous bound: up to ~10 s for the store to answer again
                call = await conn.call("read", K)
                if call.outcome.status == "fresh_hit":
                    break
                await anyio.sleep(0.2)
            else:
                pytest.fail(f"the cache never served a hit after Redis thawed: {call.outcome}")
            assert cache.stats.store_failures == failures
            assert len(printed(caplog)) == 2
            assert "answers again" in printed(caplog)[1]


async def test_a_killed_redis_fails_fast_and_recovers_on_the_same_port(
    own_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    clock = live_clock()
    lab = Lab()
    async with RedisStore(own_redis_server.url, namespace="killed", cooldown_s=COOLDOWN_S) as store:
        cache = ToolCache(store, CacheSettings(store_deadline_s=DEADLINE_S, store_cooldown_s=COOLDOWN_S), clock=clock)
        async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
            assert (await conn.call("read", K)).outcome.status == "miss"
            own_redis_server.kill()
            samples: list[float] = []
            for _ in range(8):
                started = time.monotonic()
                call = await conn.call("read", K)
                samples.append(time.monotonic() - started)
                assert call.outcome.status == "miss"
                assert samples[-1] < DEADLINE_S + MARGIN_S
            assert cache.stats.store_failures >= 8  # refused at once: no circuit opens, every call asks
            assert not store.circuit_open
            report("tool cache, killed Redis", samples)

            [failed] = printed(caplog)
            assert "tool cache store (RedisStore): load failed (" in failed

            own_redis_server.start()
            failures = cache.stats.store_failures
            assert (await conn.call("read", K)).outcome.status == "miss"
            assert (await conn.call("read", K)).outcome.status == "fresh_hit"
            assert cache.stats.store_failures == failures
            assert len(printed(caplog)) == 2
            assert "tool cache store (RedisStore) answers again" in printed(caplog)[1]


async def test_a_redis_with_nothing_listening_is_one_line_per_outage_never_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`ToolCache(RedisStore(url))` before anyone listens on the port: five calls, each answered by the
    server; one line says why nothing is cached, one when Redis is there, one when it goes again."""
    caplog.set_level(logging.WARNING)
    server = RedisServer(redis_server_binary(), free_port())  # not started: nothing listens on its port
    lab = Lab()
    try:
        async with RedisStore(server.url, namespace="never") as store:
            cache = ToolCache(store, clock=live_clock())
            async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
                calls = [await conn.call("read", K) for _ in range(5)]
                assert [call.result.structured_content["text"] for call in calls] == ["k: first edition"] * 5
                assert [call.outcome.status for call in calls] == ["miss"] * 5
                assert cache.stats.store_failures == 10  # a lookup and a save per call, each counted
                assert all("the store failed (ConnectionError: " in call.outcome.reason for call in calls)
                [failed] = printed(caplog)
                assert failed.startswith("WARNING ")
                assert f"Error 111 connecting to 127.0.0.1:{server.port}" in failed
                assert "calls go on without the cache until it answers again" in failed

                server.start()
                assert (await conn.call("read", K)).outcome.status == "miss"
                assert (await conn.call("read", K)).outcome.status == "fresh_hit"
                assert len(printed(caplog)) == 2
                assert "answers again after 10 failed operations" in printed(caplog)[1]

                server.kill()
                await conn.call("read", {"key": "other"})
                assert len(printed(caplog)) == 3
                assert not any(record.exc_info for record in caplog.records)
    finally:
        server.stop()
