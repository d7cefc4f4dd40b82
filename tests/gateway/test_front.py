"""The replica's front tier (mcpcache.gateway.front): a fresh hit from the shared store is served again
without asking the store for up to `RECHECK_S`, never past the answer's freshness, and never to another
partition or another call.

A real redis-server (the session's, a namespace per test), the real gateway (FastMCP proxy and middleware)
over the counting upstream; the store counts its metadata looks, and the front tier reads a clock the test
moves.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import fastmcp
import mcp_types as mt
import pytest

from mcpcache.client.entries import TOOLS_GROUP
from mcpcache.client.outcomes import CallOutcome
from mcpcache.gateway.app import build_gateway, open_store
from mcpcache.gateway.config import GatewayConfig, ToolSettings, parse_config
from mcpcache.gateway.front import RECHECK_S, AskStore, FrontHit, FrontTier, front_key
from mcpcache.gateway.middleware import GatewayMiddleware
from mcpcache.protocol import META_KEY, conditional_request_meta
from mcpcache.stores import RedisStore
from mcpcache.stores.items import Item, Match

from .conftest import gateway_over
from .counting_server import build_counting_server
from .test_gateway import block_of
from .test_revalidation import served_here

pytestmark = pytest.mark.anyio

TTL_MS = 600_000


class LookingRedisStore(RedisStore):
    """A RedisStore that counts the metadata looks a partition's cache makes (one per call it serves)."""

    looks = 0

    async def peek_many(self, keys: Sequence[str]) -> list[Item | None]:
        self.looks += 1
        return await super().peek_many(keys)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[LookingRedisStore]:
    async with LookingRedisStore(redis_url, namespace="gw-front-" + secrets.token_hex(4)) as opened:
        yield opened


def with_clock(server: fastmcp.FastMCP[Any]) -> Clock:
    """The clock the gateway's front tier reads, moved by the test."""
    clock = Clock()
    (middleware,) = (mw for mw in server.middleware if isinstance(mw, GatewayMiddleware))
    assert middleware.caches is not None
    middleware.caches.clock = clock
    return clock


async def read(client: fastmcp.Client[Any], name: str = "a", meta: dict[str, Any] | None = None) -> mt.CallToolResult:
    result = await client.call_tool_mcp("numbered_public", {"name": name}, meta=meta)
    assert not result.is_error, result
    return result


@pytest.mark.redis
async def test_fresh_hits_within_the_recheck_are_served_without_asking_the_store(store: LookingRedisStore) -> None:
    gateway = gateway_over(
        build_counting_server(), {"numbered_public": ToolSettings(ttl_ms=TTL_MS, scope="public")}, store=store
    )
    clock = with_clock(gateway)
    async with fastmcp.Client(gateway) as client:
        first = await read(client)  # a miss: fetched and stored
        await read(client)  # a fresh hit through the store: held in the replica
        looks = store.looks
        clock.now += 0.25
        held = [await read(client) for _ in range(3)]
        assert store.looks == looks, "served from the replica, the store not asked"
        assert {r.structured_content["fetch"] for r in [first, *held]} == {1}
        # What is left of the freshness is handed on, as from the store.
        assert all(0 < block_of(r)["ttlMs"] <= TTL_MS - 250 for r in held)
        assert all(block_of(r)["etag"] == block_of(first)["etag"] for r in held)

        clock.now += RECHECK_S
        again = await read(client)
        assert store.looks == looks + 1, "checked against the store again after the recheck"
        assert again.structured_content["fetch"] == 1


@pytest.mark.redis
async def test_an_entry_cleared_from_the_store_stops_being_served_within_the_recheck(store: LookingRedisStore) -> None:
    gateway = gateway_over(
        build_counting_server(), {"numbered_public": ToolSettings(ttl_ms=TTL_MS, scope="public")}, store=store
    )
    clock = with_clock(gateway)
    async with fastmcp.Client(gateway) as client:
        await read(client)
        await read(client)
        removed = await store.remove_matching(Match(TOOLS_GROUP, None, None))  # what `mcpcache cache clear` does
        assert removed >= 1
        # Within the recheck the replica still serves what it confirmed a moment ago...
        assert (await read(client)).structured_content["fetch"] == 1
        # ...and after it, the store's word: the entry is gone, so the upstream is called.
        clock.now += RECHECK_S
        assert (await read(client)).structured_content["fetch"] == 2


@pytest.mark.redis
async def test_a_held_answer_is_never_served_past_its_freshness(store: LookingRedisStore) -> None:
    ttl_ms = 60_000
    gateway = gateway_over(
        build_counting_server(), {"numbered_public": ToolSettings(ttl_ms=ttl_ms, scope="public")}, store=store
    )
    clock = with_clock(gateway)
    async with fastmcp.Client(gateway) as client:
        await read(client)
        held = await read(client)
        looks = store.looks
        # The replica's clock says the answer's freshness is over (the store's clock does not): it asks.
        clock.now += held_ms(held) / 1000
        await read(client)
        assert store.looks == looks + 1


def held_ms(result: mt.CallToolResult) -> int:
    return int(block_of(result)["ttlMs"])


@pytest.mark.redis
async def test_a_caller_holding_the_current_tag_is_answered_not_modified_by_the_replica(
    store: LookingRedisStore,
) -> None:
    gateway = gateway_over(
        build_counting_server(), {"numbered_public": ToolSettings(ttl_ms=TTL_MS, scope="public")}, store=store
    )
    with_clock(gateway)
    async with fastmcp.Client(gateway) as client:
        tag = block_of(await read(client))["etag"]
        await read(client)
        looks = store.looks
        replies = [await read(client, meta=conditional_request_meta(tag)) for _ in range(2)]
        assert store.looks == looks
        for reply in replies:
            assert block_of(reply).get("notModified") is True
            assert reply.content == []
        other = await read(client, meta=conditional_request_meta('W/"' + "0" * 32 + '"'))
        assert other.structured_content["fetch"] == 1
        assert META_KEY in (other.meta or {})


CALLERS = {"alice": "alice-" + "a" * 24, "bob": "bob-" + "b" * 24}


def two_callers_config(upstream: str, redis_url: str) -> GatewayConfig:
    tokens = "".join(f'[[auth.tokens]]\ntoken = "{token}"\nclient_id = "{who}"\n\n' for who, token in CALLERS.items())
    return parse_config(
        f"""
[store]
redis = "{redis_url}"
namespace = "gw-front-{secrets.token_hex(4)}"

[auth]
kind = "static"

{tokens}
[upstreams.up]
url = "{upstream}"

[upstreams.up.tools.numbered_private]
ttl_ms = {TTL_MS}
"""
    )


@pytest.mark.redis
async def test_concurrent_callers_each_get_their_own_answers_from_the_front(redis_url: str) -> None:
    """Two callers (two partitions), three arguments each, forty calls at once, twice (the second wave served
    from the front tier): each caller's call always gets the one answer fetched for it."""
    async with served_here(build_counting_server()) as upstream:
        config = two_callers_config(upstream, redis_url)
        assert config.store is not None
        gateway = build_gateway(config, store=open_store(config.store))
        try:
            async with served_here(gateway.server) as url:
                fetched: dict[tuple[str, str], set[int]] = {}
                async with (
                    fastmcp.Client(url, auth=CALLERS["alice"]) as alice,
                    fastmcp.Client(url, auth=CALLERS["bob"]) as bob,
                ):
                    clients = {"alice": alice, "bob": bob}

                    async def one(who: str, name: str) -> None:
                        result = await clients[who].call_tool_mcp("numbered_private", {"name": name})
                        assert not result.is_error, result
                        assert result.structured_content["name"] == name
                        fetched.setdefault((who, name), set()).add(result.structured_content["fetch"])

                    for _ in range(2):
                        async with anyio.create_task_group() as group:
                            for index in range(40):
                                group.start_soon(one, ("alice", "bob")[index % 2], "xyz"[index % 3])
                assert len(fetched) == 6
                assert all(len(numbers) == 1 for numbers in fetched.values()), fetched
                assert len({number for numbers in fetched.values() for number in numbers}) == 6
        finally:
            await gateway.aclose()


# The front tier alone ---------------------------------------------------------------------------------


def outcome(status: str = "fresh_hit", fresh_for_ms: int | None = 10_000, saved: int = 1_000) -> CallOutcome:
    return CallOutcome(status, False, "fresh", saved, fresh_for_ms=fresh_for_ms)  # type: ignore[arg-type]


ANSWER = mt.CallToolResult(content=[], structured_content={"kind": "doc"})


def test_only_fresh_hits_of_answers_within_the_budget_are_held() -> None:
    front = FrontTier(16_000)
    key = front_key("p", "s", "era", "t", {"a": 1})
    assert key is not None
    for kept, why in (
        (outcome(status="miss", fresh_for_ms=None), "a miss"),
        (outcome(status="revalidated", fresh_for_ms=None), "a revalidation"),
        (outcome(saved=1_001), "larger than a sixteenth of the budget"),
        (outcome(saved=0), "of unknown size"),
    ):
        front.record(key, ANSWER, kept, 0.0)
        assert isinstance(front.get(key, 0.0), AskStore), why
    error = mt.CallToolResult(content=[], is_error=True)
    front.record(key, error, outcome(), 0.0)
    assert isinstance(front.get(key, 0.0), AskStore)
    # FastMCP rewrites a Prefab payload's tool references in place after the middleware: never shared.
    prefab = mt.CallToolResult(content=[], structured_content={"_meta": {"fastmcp": {"toolNames": {"a": "b"}}}})
    front.record(key, prefab, outcome(), 0.0)
    assert isinstance(front.get(key, 0.0), AskStore)
    front.record(key, ANSWER, outcome(), 0.0)
    hit = front.get(key, 0.5)
    assert isinstance(hit, FrontHit)
    assert hit.result is ANSWER
    assert hit.fresh_for_ms == 9_500


def test_a_held_answer_goes_at_the_recheck_or_the_end_of_its_freshness_whichever_is_first() -> None:
    front = FrontTier(16_000)
    key = front_key("p", "s", "era", "t", {})
    assert key is not None
    front.record(key, ANSWER, outcome(fresh_for_ms=400), 0.0)
    assert isinstance(front.get(key, 0.399), FrontHit)
    assert isinstance(front.get(key, 0.4), AskStore)
    front.record(key, ANSWER, outcome(fresh_for_ms=60_000), 10.0)
    assert isinstance(front.get(key, 10.0 + RECHECK_S - 0.001), FrontHit)
    assert isinstance(front.get(key, 10.0 + RECHECK_S), AskStore)
    assert len(front) == 0


def test_calls_are_held_apart_by_partition_server_era_tool_and_arguments() -> None:
    keys = {
        front_key("p", "s", "e", "t", {"a": 1, "b": 2}),
        front_key("q", "s", "e", "t", {"a": 1, "b": 2}),
        front_key("p", "r", "e", "t", {"a": 1, "b": 2}),
        front_key("p", "s", "f", "t", {"a": 1, "b": 2}),
        front_key("p", "s", "e", "u", {"a": 1, "b": 2}),
        front_key("p", "s", "e", "t", {"a": 1, "b": 3}),
    }
    assert len(keys) == 6
    assert front_key("p", "s", "e", "t", {"b": 2, "a": 1}) in keys, "argument order is not part of a call"
    assert front_key("p", "s", "e", "t", {"a": float("nan")}) is None


def test_the_budget_drops_the_least_recently_used() -> None:
    front = FrontTier(16_000)
    keys = [front_key("p", "s", "e", "t", {"n": n}) for n in range(20)]
    for key in keys:
        assert key is not None
        front.record(key, ANSWER, outcome(saved=1_000), 0.0)
    assert len(front) == 16
    assert isinstance(front.get(keys[0], 0.0), AskStore)  # type: ignore[arg-type]
    assert isinstance(front.get(keys[-1], 0.0), FrontHit)  # type: ignore[arg-type]
