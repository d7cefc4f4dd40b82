"""The leaf hashes the client keeps beside a patched answer (`mcpcache.client.leaves`): a second delta is
verified from them (only the touched leaves hashed again), and they serve only the exact stored version
they were computed for."""

from __future__ import annotations

from typing import Any

import pytest
from support.transports import MODERN, ServerTarget

import mcpcache.client.cache as cache_module
from mcpcache.client import CacheSettings, ToolCache
from mcpcache.client.leaves import LeafMemo
from mcpcache.delta.tree import leaves_of
from mcpcache.stores import MemoryStore

from .harness import FakeClock, connect, plain
from .lab import Lab, build_lab

pytestmark = pytest.mark.anyio

KEY = {"key": "k"}
LONG = " ".join(f"line {n}: the quick brown fox jumps over the lazy dog" for n in range(150))


async def test_a_second_delta_is_verified_from_the_leaf_hashes_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[bool] = []
    original = cache_module.patch_answer

    def watched(*args: Any, **kwargs: Any) -> Any:
        given.append(kwargs.get("base_leaves") is not None)
        return original(*args, **kwargs)

    monkeypatch.setattr(cache_module, "patch_answer", watched)
    clock = FakeClock()
    cache = ToolCache(MemoryStore(), CacheSettings(trusted=True), clock=clock)
    lab = Lab()
    lab.docs.write("k", f"{LONG}\nedition 1")
    async with connect("mcp", ServerTarget.memory(build_lab("fastmcp", lab)), MODERN, cache, server_id="lab") as conn:
        await conn.call("read", KEY)
        for n in (2, 3):
            await conn.call("edit", {"key": "k", "text": f"{LONG}\nedition {n}"})
            clock.advance(0.001)
            patched = await conn.call("read", KEY)
            assert patched.outcome.status == "patched", patched.outcome.reason
            await cache.flush()
            assert plain(patched.result) == plain(await conn.direct("read", KEY))
    assert given == [False, True]  # the first from the answer read whole, the second from the kept hashes
    assert len(cache._leaves) == 1


def test_hashes_serve_only_the_version_they_were_computed_for() -> None:
    memo = LeafMemo(kept=2)
    leaves = leaves_of({"content": [{"type": "text", "text": "a"}]})
    memo.put("key", 'W/"1"', "sum", leaves)
    assert memo.get("key", 'W/"1"', "sum") is leaves
    assert memo.get("key", 'W/"1"', "another body under the same tag") is None
    assert memo.get("key", 'W/"2"', "sum") is None
    assert memo.get("other", 'W/"1"', "sum") is None
    memo.put("key", 'W/"2"', "sum2", leaves)  # a key keeps its newest version only
    assert memo.get("key", 'W/"1"', "sum") is None
    memo.put("b", 'W/"1"', "s", leaves)
    memo.put("c", 'W/"1"', "s", leaves)  # the oldest goes past the bound
    assert memo.get("key", 'W/"2"', "sum2") is None
    assert len(memo) == 2
