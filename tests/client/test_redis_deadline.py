"""The tool cache over a Redis that stops answering (SIGSTOP: the socket stays open, nothing comes back)
and over one that is killed: every call is answered, by the server, within the store deadline plus a
generous margin, and the cache works again once Redis does.

Bounds here are behaviour (the call did not hang on the store), not speed; the latencies are printed
(`pytest -s`) and measured reproducibly by benchmarks/redis_faults.py.
"""

from __future__ import annotations

import time

import anyio
import pytest
from support.redis_server import Frozen, RedisServer
from support.transports import MODERN, ServerTarget

from mcpcache.bench.common import percentile
from mcpcache.client import ToolCache
from mcpcache.stores import RedisStore

from .harness import connect, live_clock
from .lab import Lab, build_lab

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

K = {"key": "k"}
DEADLINE_S = 1.0
MARGIN_S = 3.0
COOLDOWN_S = 1.0


def report(fault: str, samples: list[float]) -> None:
    print(
        f"\n{fault}: {len(samples)} calls, p50 {percentile(samples, 0.5) * 1000:.1f} ms, "
        f"max {max(samples) * 1000:.1f} ms"
    )


async def test_a_frozen_redis_costs_each_call_at_most_the_deadline(own_redis_server: RedisServer) -> None:
    clock = live_clock()
    lab = Lab()
    async with RedisStore(own_redis_server.url, namespace="frozen", cooldown_s=COOLDOWN_S) as store:
        cache = ToolCache(store, clock=clock, store_deadline_s=DEADLINE_S, store_cooldown_s=COOLDOWN_S)
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


async def test_a_killed_redis_fails_fast_and_recovers_on_the_same_port(own_redis_server: RedisServer) -> None:
    clock = live_clock()
    lab = Lab()
    async with RedisStore(own_redis_server.url, namespace="killed", cooldown_s=COOLDOWN_S) as store:
        cache = ToolCache(store, clock=clock, store_deadline_s=DEADLINE_S, store_cooldown_s=COOLDOWN_S)
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

            own_redis_server.start()
            failures = cache.stats.store_failures
            assert (await conn.call("read", K)).outcome.status == "miss"
            assert (await conn.call("read", K)).outcome.status == "fresh_hit"
            assert cache.stats.store_failures == failures
