"""Two `mcpcache gateway` processes sharing a real Redis Cluster (3 primaries; tests/conftest.py
`redis_cluster_url`), in front of the counting server, with four callers' bearer tokens: a randomized run of
many callers' calls through both replicas never hands one caller another's private answer, and the store
spares the upstream most fetches. (The exact fetch counts of test_replicas.py depend on every store operation
answering within its 0.5 s deadline, which a saturated machine does not keep: the bound here is loose.)
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

import anyio
import fastmcp
import pytest

from .conftest import TOKENS, Cluster
from .test_replicas import PRIVATE, PUBLIC

pytestmark = [pytest.mark.redis, pytest.mark.anyio, pytest.mark.slow]

NAMES = [f"doc-{n}" for n in range(6)]
CALLS = 240
AT_ONCE = 8


async def test_a_randomized_multi_user_run_through_replicas_on_a_redis_cluster_never_crosses_callers(
    cluster_on_redis_cluster: Cluster,
) -> None:
    """Random callers, replicas, tools and arguments, 8 calls at a time. The counting server numbers every
    answer it gives: a private answer's number, once one caller got it, is never another caller's."""
    gateways = cluster_on_redis_cluster.gateways
    rng = random.Random(32)
    plan = [
        (rng.choice(list(TOKENS)), rng.choice(gateways), rng.choice((PRIVATE, PUBLIC)), rng.choice(NAMES))
        for _ in range(CALLS)
    ]
    owner: dict[int, str] = {}
    """Private answer number -> the caller who got it first."""
    crossed: list[str] = []
    wrong: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[tuple[str, str], fastmcp.Client[Any]] = {
            (who, gateway): await stack.enter_async_context(fastmcp.Client(gateway, auth=token))
            for who, token in TOKENS.items()
            for gateway in gateways
        }
        for start in range(0, CALLS, AT_ONCE):

            async def call(who: str, gateway: str, tool: str, name: str) -> None:
                result = await clients[who, gateway].call_tool_mcp(tool, {"name": name})
                assert not result.is_error, result
                answer = result.structured_content
                assert answer is not None
                if answer["name"] != name:
                    wrong.append(f"{who} asked {tool}({name}) and got {answer}")
                if tool == PRIVATE and owner.setdefault(answer["fetch"], who) != who:
                    crossed.append(f"{who} got {owner[answer['fetch']]}'s private answer {answer} via {gateway}")

            async with anyio.create_task_group() as batch:
                for step in plan[start : start + AT_ONCE]:
                    batch.start_soon(call, *step)
    assert wrong == []
    assert crossed == []
    # The store did its work: each caller's private answer is fetched about once (twice when first asked at
    # both replicas at once, more only when a store operation missed its deadline), not once per call.
    private_calls = sum(1 for _, _, tool, _ in plan if tool == PRIVATE)
    assert len(owner) < private_calls / 2
