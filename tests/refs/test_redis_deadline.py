"""References call their store without the tool cache's fence: on a frozen Redis (SIGSTOP) they rely on
the store's own socket timeout and circuit. `for_model` hands the value over whole and `resolve` refuses,
each within the store's timeout plus a generous margin, and both work again once Redis answers.
"""

from __future__ import annotations

import time

import anyio
import pytest
from support.redis_server import Frozen, RedisServer

from mcpcache.bench.common import percentile
from mcpcache.refs import References
from mcpcache.stores import RedisStore

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

BOUND_S = 1.0 + 3.0  # what the tool cache allows a store operation, plus a generous margin
COOLDOWN_S = 1.0
BIG = {"rows": [{"i": i, "text": "x" * 40} for i in range(400)]}


async def test_references_on_a_frozen_redis_answer_promptly(own_redis_server: RedisServer) -> None:
    async with RedisStore(own_redis_server.url, namespace="refs-frozen", cooldown_s=COOLDOWN_S) as store:
        refs = References(store, conversation_id="conv-1", threshold_bytes=1000)
        stored = await refs.for_model(BIG, server="s", tool="t")
        assert stored.uri is not None
        uri = str(stored.uri)

        views: list[float] = []
        resolves: list[float] = []
        with Frozen(own_redis_server):
            for _ in range(4):
                started = time.monotonic()
                view = await refs.for_model(BIG, server="s", tool="t")
                views.append(time.monotonic() - started)
                assert view.uri is None  # the store failed: the model gets the value whole
                assert view.envelope == BIG
                assert views[-1] < BOUND_S

                started = time.monotonic()
                resolution = await refs.resolve(tool="t", arguments={"data_uri": uri})
                resolves.append(time.monotonic() - started)
                assert resolution.arguments is None  # refused: never dispatched with a hole in it
                assert resolution.error is not None
                assert resolves[-1] < BOUND_S
        for what, samples in (("for_model", views), ("resolve", resolves)):
            print(
                f"\nreferences {what}, frozen Redis: p50 {percentile(samples, 0.5) * 1000:.1f} ms, "
                f"max {max(samples) * 1000:.1f} ms"
            )

        await anyio.sleep(COOLDOWN_S + 0.2)
        for _ in range(50):
            resolution = await refs.resolve(tool="t", arguments={"data_uri": uri})
            if resolution.arguments is not None:
                break
            await anyio.sleep(0.2)
        else:
            pytest.fail(f"references never resolved after Redis thawed: {resolution.error}")
        assert resolution.arguments == {"data": BIG}
