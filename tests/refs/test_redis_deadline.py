"""References call their store through the store fence (`mcpcache.stores.fence`), as the tool cache does: on
a frozen Redis (SIGSTOP) whose own socket timeout is far away, `for_model` hands the value over whole and
`resolve` refuses, each within the fence's deadline plus a generous margin; one line says the store failed,
one that it answers again, and both work again once Redis does.
"""

from __future__ import annotations

import logging
import time

import anyio
import pytest
from support.redis_server import Frozen, RedisServer

from mcpcache.bench.common import percentile
from mcpcache.refs import References
from mcpcache.stores import RedisStore
from mcpcache.stores.fence import FenceSettings

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

DEADLINE_S = 1.0
BOUND_S = DEADLINE_S + 3.0  # the fence's deadline, plus a generous margin
STORE_TIMEOUT_S = 60.0  # the store's own timeout: never reached while the fence keeps its deadline
COOLDOWN_S = 1.0
BIG = {"rows": [{"i": i, "text": "x" * 40} for i in range(400)]}


async def test_references_on_a_frozen_redis_answer_within_their_deadline(
    own_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    store = RedisStore(
        own_redis_server.url, namespace="refs-frozen", socket_timeout_s=STORE_TIMEOUT_S, cooldown_s=COOLDOWN_S
    )
    async with store:
        fence = FenceSettings(deadline_s=DEADLINE_S, cooldown_s=COOLDOWN_S)
        refs = References(store, conversation_id="conv-1", threshold_bytes=1000, fence=fence)
        stored = await refs.for_model(BIG, server="s", tool="t")
        assert stored.uri is not None
        uri = str(stored.uri)

        views: list[float] = []
        resolves: list[float] = []
        with Frozen(own_redis_server):
            for _ in range(2):
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
                [missing] = resolution.error["_missing_uris"]
                assert missing["detail"].startswith("the reference store did not answer within 1")
                assert resolves[-1] < BOUND_S
        for what, samples in (("for_model", views), ("resolve", resolves)):
            print(
                f"\nreferences {what}, frozen Redis: p50 {percentile(samples, 0.5) * 1000:.1f} ms, "
                f"max {max(samples) * 1000:.1f} ms"
            )
        [failed] = caplog.text.splitlines()
        assert "reference store (RedisStore): " in failed
        assert "did not answer within 1" in failed

        await anyio.sleep(COOLDOWN_S)
        for _ in range(50):
            resolution = await refs.resolve(tool="t", arguments={"data_uri": uri})
            if resolution.arguments is not None:
                break
            await anyio.sleep(0.2)
        else:
            pytest.fail(f"references never resolved after Redis thawed: {resolution.error}")
        assert resolution.arguments == {"data": BIG}
        assert len(caplog.text.splitlines()) == 2
        assert "reference store (RedisStore) answers again" in caplog.text.splitlines()[1]
