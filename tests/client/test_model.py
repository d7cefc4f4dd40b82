"""The cache agrees with a simple model under random sequences of calls (Hypothesis).

Two partitions (alice and bob, both sharing public answers, both trusting the server) read a few keys
through three tools (private ttl 5 s, public ttl 5 s, private ttl 0), the documents change behind the
cache or through a mutating tool, and the clock moves. The model says what each read must return:

- an entry fresh for this partition: exactly the answer stored (or last revalidated) for it;
- otherwise: what the server holds right now;
- never an answer for another key, another tool, or (unless public and shared) another partition.

Freshness: fresh while `now < received + ttl`, and not ended by a mutating call of the same partition at
or after the request that produced (or last revalidated) the entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.client._memory import InMemoryTransport

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.stores import MemoryStore

from .harness import FakeClock
from .lab import POLICIES, Lab, build_lab

PARTITIONS = ("alice", "bob")
KEYS = ("a", "b", "c")
TOOLS = ("read", "read_public", "read_zero")

Read = tuple[str, str, str, str]  # ("read", partition, tool, key)
Write = tuple[str, str, str]  # ("write", key, text): behind the cache
Edit = tuple[str, str, str, str]  # ("edit", partition, key, text): a mutating call through the cache
Wait = tuple[str, float]

operations = st.one_of(
    st.tuples(st.just("read"), st.sampled_from(PARTITIONS), st.sampled_from(TOOLS), st.sampled_from(KEYS)),
    st.tuples(st.just("write"), st.sampled_from(KEYS), st.sampled_from(["x", "y", "z"])),
    st.tuples(st.just("edit"), st.sampled_from(PARTITIONS), st.sampled_from(KEYS), st.sampled_from(["p", "q"])),
    st.tuples(st.just("wait"), st.sampled_from([0.0, 0.001, 1.0, 4.999, 5.0, 6.0])),
)


@dataclass
class Entry:
    text: str
    requested_at: float
    fresh_until: float


@dataclass
class Model:
    server: dict[str, str] = field(default_factory=dict)
    entries: dict[tuple[str, str, str], Entry] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)

    def current(self, key: str) -> str:
        return self.server.get(key, f"{key}: first edition")

    def slot(self, partition: str, tool: str, key: str) -> tuple[str, str, str]:
        # Public answers live where every sharing partition looks.
        return ("*" if POLICIES[tool].scope == "public" else partition, tool, key)

    def expected(self, partition: str, tool: str, key: str, now: float) -> tuple[str, bool]:
        """(the text the read must return, whether it must be a fresh hit)."""
        entry = self.entries.get(self.slot(partition, tool, key))
        if entry is not None and now < entry.fresh_until and self.ended.get(partition, -1.0) < entry.requested_at:
            return entry.text, True
        return self.current(key), False

    def after_read(self, partition: str, tool: str, key: str, now: float, fresh: bool) -> None:
        if not fresh:
            ttl_s = POLICIES[tool].ttl_ms / 1000
            self.entries[self.slot(partition, tool, key)] = Entry(self.current(key), now, now + ttl_s)


async def run(ops: list[Any]) -> None:
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    lab = Lab()
    server = build_lab("sdk", lab)
    model = Model()
    caches = {
        p: ToolCache(store, CacheSettings(share_public=True, trusted=True), partition=p, clock=clock)
        for p in PARTITIONS
    }
    async with mcp.Client(InMemoryTransport(server)) as alice, mcp.Client(InMemoryTransport(server)) as bob:
        views = {p: caches[p].wrap(c, server_id="lab") for p, c in (("alice", alice), ("bob", bob))}
        for op in ops:
            if op[0] == "wait":
                clock.advance(op[1])
            elif op[0] == "write":
                _, key, text = op
                lab.docs.write(key, text)
                model.server[key] = text
            elif op[0] == "edit":
                _, partition, key, text = op
                await views[partition].call("edit", {"key": key, "text": text})
                model.server[key] = text
                model.ended[partition] = clock()
            else:
                _, partition, tool, key = op
                text, fresh = model.expected(partition, tool, key, clock())
                call = await views[partition].call(tool, {"key": key})
                got = call.result.structured_content
                assert not call.result.is_error, call.result
                assert (got["key"], got["text"]) == (key, text), (op, call.outcome)
                assert (call.outcome.status == "fresh_hit") is fresh, (op, call.outcome)
                model.after_read(partition, tool, key, clock(), fresh)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operations, min_size=1, max_size=30))
def test_the_cache_agrees_with_the_model(ops: list[Any]) -> None:
    anyio.run(run, ops)
