"""Concurrent calls through three caches on one shared store agree with a model of what may be served.

Two `ToolCache`s of partition alice (two processes of one user would have two) and one of partition bob
share one store: a `MemoryStore` object, a real SQLite file (each cache opens its own store on it), or a
namespace on the real redis-server (likewise). They reach one in-process FastMCP server of versioned
documents (tests/client/versioned.py) over memory transports, through three client kinds. Reads run as
concurrent tasks (some with `cache_mode="refresh"`, some held at the server after the body read the
version, so answers land out of order), next to edits through the caches, edits behind their back,
clock moves and releases of held answers, in an order drawn from a seeded generator.

The model (`judge`). A read returning version v of a document is correct if either
- v was the server's version at some moment between the read's start and its return (it came from the
  server during the call), or
- some run of the read body, for this partition, answered v, the call that sent that request returned at
  most ttl before this read started (on the injected clock, which is also the caches' clock), and no edit
  through a cache of the same partition changed the document set after that run read v and returned
  before this read started (read-your-writes). Edits behind the back, and edits by the other partition,
  may be missed until the ttl runs out.
Every answer must also carry the version of its content in its `_meta`, and name the partition that
asked (answers are partition-specific: the arguments carry it).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
import mcp_types as mt
import pytest
from stores.backends import Backend, FakeClock
from support.transports import MODERN, ServerTarget

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.client.policy import CacheMode
from mcpcache.stores import Store

from .harness import Conn, ViewKind, connect
from .versioned import Versions, build_versioned, text_of

pytestmark = pytest.mark.anyio

TTL_MS = 3000
TTL_S = TTL_MS / 1000
SERVER_ID = "versioned"
DOCS = ("d1", "d2")
CACHES: tuple[tuple[str, str, ViewKind], ...] = (
    ("alice-1", "alice", "fastmcp"),
    ("alice-2", "alice", "mcp"),
    ("bob", "bob", "session"),
)
"""(cache name, partition, client kind it wraps)."""

ROUNDS = int(os.environ.get("MCPCACHE_CONCURRENT_ROUNDS", "10"))
"""Seeded random runs per store (each `OPS` operations); lower it on slow CI machines."""
OPS = 300
STEPS = (0.001, 0.5, 1.0, TTL_S - 0.001, TTL_S, TTL_S + 0.5)
"""How far the clock moves in one step: around the ttl edges, and within it."""


@dataclass
class Read:
    rid: str
    cache: str
    partition: str
    doc: str
    mode: CacheMode
    start_seq: int
    start_clock: float
    end_seq: int = 0
    end_clock: float = 0.0
    result: mt.CallToolResult | None = None
    status: str = ""
    coalesced: bool = False


@dataclass
class Edit:
    rid: str
    cache: str
    partition: str
    doc: str
    end_seq: int = 0


@dataclass
class Run:
    """The caches' connections, the server's state, and what every call did."""

    clock: FakeClock
    state: Versions
    conns: dict[str, tuple[Conn, str]]
    reads: list[Read] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)
    ended_at: dict[str, float] = field(default_factory=dict)
    """rid -> the injected clock when that call returned."""
    count: int = 0

    def rid(self) -> str:
        self.count += 1
        return f"r{self.count}"

    async def read(self, cache: str, doc: str, mode: CacheMode = "use", hold: str | None = None) -> Read:
        conn, partition = self.conns[cache]
        rid = hold if hold is not None else self.rid()
        if hold is not None:
            self.state.hold(rid)
        read = Read(rid, cache, partition, doc, mode, self.state.tick(), self.clock())
        self.reads.append(read)
        call = await conn.call("read", {"doc": doc, "who": partition}, meta={"rid": rid}, cache_mode=mode)
        read.end_seq, read.end_clock = self.state.tick(), self.clock()
        self.ended_at[rid] = read.end_clock
        read.result, read.status, read.coalesced = call.result, call.outcome.status, call.outcome.coalesced
        return read

    async def settle(self) -> None:
        """Let every cache's store writes land (a revalidation records itself after its answer is returned):
        what another process would see a moment later."""
        for conn, _ in self.conns.values():
            await conn.view.cache.flush()

    async def edit(self, cache: str, doc: str) -> None:
        conn, partition = self.conns[cache]
        rid = self.rid()
        edit = Edit(rid, cache, partition, doc)
        call = await conn.call("edit", {"doc": doc, "who": partition, "n": self.count}, meta={"rid": rid})
        assert not call.result.is_error, call.result
        edit.end_seq = self.state.tick()
        self.ended_at[rid] = self.clock()
        self.edits.append(edit)


def version_of(read: Read) -> int | None:
    assert read.result is not None
    structured = read.result.structured_content or {}
    version = structured.get("version")
    return version if isinstance(version, int) else None


def judge(run: Run) -> list[str]:
    """Why each wrong read is wrong (empty: every read is correct under the model)."""
    state = run.state
    held_from: dict[tuple[str, int], int] = {}
    held_until: dict[tuple[str, int], float] = {}
    for change in state.changes:
        held_from[(change.doc, change.version)] = change.seq
        held_until[(change.doc, change.version - 1)] = change.seq
    edited_at = {change.rid: change.seq for change in state.changes if change.rid is not None}
    wrong: list[str] = []
    for read in run.reads:
        why = _content_problem(read)
        if why is None:
            version = version_of(read)
            assert version is not None
            start, until = held_from.get((read.doc, version), 0), held_until.get((read.doc, version), math.inf)
            from_server = start <= read.end_seq and until > read.start_seq
            if not from_server and not _fresh_answer_exists(run, read, version, edited_at):
                why = f"v{version} was not current during the call, and no answer of it was still fresh"
        if why is not None:
            wrong.append(f"{read.cache} {read.mode} {read.doc} ({read.status}, coalesced={read.coalesced}): {why}")
    return wrong


def _content_problem(read: Read) -> str | None:
    result = read.result
    if result is None:
        return "no result"
    if result.is_error:
        return f"error result: {result.content}"
    version = version_of(read)
    structured = result.structured_content or {}
    if structured.get("doc") != read.doc or structured.get("who") != read.partition or version is None:
        return f"answer for another call or partition: {structured}"
    meta = result.meta or {}
    if meta.get("version") != version or meta.get("who") != read.partition:
        return f"_meta {meta} does not belong to the content {structured}"
    texts = [block.text for block in result.content if isinstance(block, mt.TextContent)]
    if texts != [text_of(read.doc, version, read.partition)]:
        return f"content {texts} does not belong to {structured}"
    return None


def _fresh_answer_exists(run: Run, read: Read, version: int, edited_at: dict[str, int]) -> bool:
    own_edits = [
        edited_at[edit.rid]
        for edit in run.edits
        if edit.partition == read.partition and edit.end_seq < read.start_seq and edit.rid in edited_at
    ]
    for answer in run.state.answers:
        if (answer.doc, answer.who, answer.version) != (read.doc, read.partition, version) or answer.rid is None:
            continue
        if answer.seq > read.end_seq or answer.rid not in run.ended_at:
            continue
        if read.start_clock >= run.ended_at[answer.rid] + TTL_S:
            continue  # expired before this read began
        if any(changed > answer.seq for changed in own_edits):
            continue  # this partition changed the server after that answer, and knew it before reading
        return True
    return False


def report(name: str, run: Run, seconds: float, wrong: list[str]) -> None:
    statuses = Counter(("coalesced" if r.coalesced else r.status) for r in run.reads)
    behind = sum(1 for change in run.state.changes if change.rid is None)
    print(
        f"\n[{name}] operations={len(run.reads) + len(run.edits) + behind} reads={len(run.reads)} "
        f"edits_through_caches={len(run.edits)} edits_behind={behind} outcomes={dict(statuses)} "
        f"wrong_reads={len(wrong)} seconds={seconds:.1f}"
    )
    for line in wrong[:20]:
        print("  WRONG", line)


# -- the store layouts --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def three_caches(backend: Backend, pad: str = "") -> AsyncIterator[Run]:
    """The three caches on one store (one object in memory; one store object per cache on a file or a
    Redis namespace, as separate processes would have), connected to a fresh server (`pad`: see
    `Versions.pad`; a long one has new versions sent as deltas)."""
    clock = backend.clock if backend.clock is not None else FakeClock(time.time())
    state = Versions(clock, pad=pad)
    target = ServerTarget.memory(build_versioned(state, TTL_MS))
    async with contextlib.AsyncExitStack() as stack:
        shared: Store | None = None
        if backend.name == "memory":
            shared = await stack.enter_async_context(backend.open())
        conns: dict[str, tuple[Conn, str]] = {}
        for name, partition, kind in CACHES:
            store = shared if shared is not None else await stack.enter_async_context(backend.open())
            cache = ToolCache(store, CacheSettings(trusted=True), partition=partition, clock=clock)
            conn = await stack.enter_async_context(connect(kind, target, MODERN, cache, server_id=SERVER_ID))
            conns[name] = (conn, partition)
        yield Run(clock, state, conns)
        # Skipped saves are allowed (a store write that cannot get SQLite's lock in time is skipped, never
        # waited for); what the model judges is that none of them leads to a wrong read.
        failures = sum(conn.view.cache.stats.store_failures for conn, _ in conns.values())
        if failures:
            print(f"[{backend.name}] store operations skipped or failed: {failures}")


# -- the scenario that must never come back ----------------------------------------------------------


@pytest.mark.parametrize("landing", ["old answer first", "not-modified first"])
@pytest.mark.parametrize("slow_call", ["other cache", "same cache, refresh"])
async def test_a_slow_answer_to_an_old_request_never_outlives_a_revalidation(
    backend: Backend, slow_call: str, landing: str
) -> None:
    """Cache B holds (T1, v1) and revalidates it while A's slow answer to a request sent before the change
    lands with (T0, v0): B serves v1, and every later read from any cache serves v1.

    The old bug: A's answer replaced B's entry, then B's not-modified reply freshened the entry it found
    in the store, which was now v0, and v0 was served as fresh from then on.
    """
    async with three_caches(backend) as run:
        a, b = ("alice-1", "alice-2") if slow_call == "other cache" else ("alice-1", "alice-1")
        mode: CacheMode = "use" if slow_call == "other cache" else "refresh"
        outcomes: dict[str, Read] = {}
        landed = {"slow": anyio.Event(), "revalidating": anyio.Event()}

        async def call(name: str, cache: str, call_mode: CacheMode, rid: str) -> None:
            outcomes[name] = await run.read(cache, "d1", call_mode, hold=rid)
            landed[name].set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "slow", a, mode, "slow")
            await run.state.wait_reached("slow")  # its body read v0 and waits
            run.state.change("d1")  # v1, behind every cache's back
            run.clock.advance(0.5)

            stored = await run.read(b, "d1")
            assert (version_of(stored), stored.status) == (1, "miss")
            run.clock.advance(TTL_S + 0.5)

            tg.start_soon(call, "revalidating", b, "use", "revalidating")
            await run.state.wait_reached("revalidating")  # B sent T1; the server holds v1 still
            first, second = ("slow", "revalidating") if landing == "old answer first" else ("revalidating", "slow")
            run.state.release(first)
            await landed[first].wait()
            run.state.release(second)

        assert version_of(outcomes["slow"]) == 0  # its own answer, from before the change: correct for it
        assert (version_of(outcomes["revalidating"]), outcomes["revalidating"].status) == (1, "revalidated")

        await run.settle()
        for cache, _, _ in CACHES:
            after = await run.read(cache, "d1")
            assert version_of(after) == 1, (cache, after.status)
            if cache in (a, b):
                assert after.status == "fresh_hit"  # the revalidation restarted v1's freshness
        run.clock.advance(TTL_S + 0.5)
        for cache, _, _ in CACHES:
            after = await run.read(cache, "d1")
            # The first alice cache to ask revalidates v1 and restarts its freshness for the other one.
            assert version_of(after) == 1, (cache, after.status)
            assert after.status in ("revalidated", "fresh_hit"), (cache, after.status)

        wrong = judge(run)
        report(f"{backend.name} / {slow_call} / {landing}", run, 0.0, wrong)
        assert wrong == []


@pytest.mark.parametrize("landing", ["old answer first", "not-modified first"])
async def test_a_not_modified_reply_freshens_only_the_copy_whose_tag_it_sent(backend: Backend, landing: str) -> None:
    """The same race with both requests sent at the same instant: equal stamps let A's old answer (T0, v0)
    replace B's (T1, v1) while B revalidates T1. B's not-modified reply confirms T1, not what the store
    holds now: it must not restart the freshness of v0 (or put T1 on it, which would later get v0
    confirmed by a not-modified reply to T1). v0 may be served while its own ttl lasts, never after."""
    async with three_caches(backend) as run:
        outcomes: dict[str, Read] = {}
        landed = {"slow": anyio.Event(), "revalidating": anyio.Event()}

        async def call(name: str, cache: str) -> None:
            outcomes[name] = await run.read(cache, "d1", hold=name)
            landed[name].set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "slow", "alice-1")
            await run.state.wait_reached("slow")
            run.state.change("d1")  # v1, behind every cache's back; the clock does not move
            assert version_of(await run.read("alice-2", "d1")) == 1
            run.clock.advance(TTL_S + 0.5)
            tg.start_soon(call, "revalidating", "alice-2")
            await run.state.wait_reached("revalidating")
            first, second = ("slow", "revalidating") if landing == "old answer first" else ("revalidating", "slow")
            run.state.release(first)
            await landed[first].wait()
            run.state.release(second)

        assert (version_of(outcomes["revalidating"]), outcomes["revalidating"].status) == (1, "revalidated")
        for cache in ("alice-1", "alice-2", "alice-1"):
            await run.read(cache, "d1")  # v0 or v1: the model judges
        run.clock.advance(TTL_S + 0.5)
        for cache in ("alice-1", "alice-2", "alice-1", "alice-2"):
            after = await run.read(cache, "d1")
            assert version_of(after) == 1, (cache, after.status)

        wrong = judge(run)
        report(f"{backend.name} / equal stamps / {landing}", run, 0.0, wrong)
        assert wrong == []


async def test_a_slow_patch_never_replaces_a_newer_answer(backend: Backend) -> None:
    """Two caches of alice hold v0, stale. alice-1's conditional request is held at the server after its body
    read v1; meanwhile the document moves to v2 and alice-2 gets v2 as a delta against v0 and stores it.
    alice-1's delta (v0 to v1) lands last and is patched onto its own copy of v0: it serves v1 (current
    during its call), and does not replace v2, whose request was sent later. Every read after serves v2."""
    async with three_caches(backend, DELTA_PAD) as run:
        assert version_of(await run.read("alice-1", "d1")) == 0
        assert (await run.read("alice-2", "d1")).status == "fresh_hit"
        run.state.change("d1")
        run.clock.advance(TTL_S + 0.5)
        outcomes: dict[str, Read] = {}

        async def slow() -> None:
            outcomes["slow"] = await run.read("alice-1", "d1", hold="slow")

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await run.state.wait_reached("slow")  # its body read v1 and waits
            run.state.change("d1")  # v2
            run.clock.advance(0.5)
            outcomes["newer"] = await run.read("alice-2", "d1")
            run.state.release("slow")

        slow_read, newer = outcomes["slow"], outcomes["newer"]
        assert (version_of(newer), newer.status) == (2, "patched")
        assert (version_of(slow_read), slow_read.status) == (1, "patched")
        conn, _ = run.conns["alice-1"]
        await conn.view.cache.flush()  # its patch is written after it is returned
        assert conn.view.cache.stats.stored == 1  # its first read; not the slow patch
        for cache in ("alice-1", "alice-2", "alice-1"):
            after = await run.read(cache, "d1")
            assert (version_of(after), after.status) == (2, "fresh_hit"), cache
        wrong = judge(run)
        report(f"{backend.name} / a slow patch", run, 0.0, wrong)
        assert wrong == []


@pytest.mark.parametrize("editor", ["alice-1", "alice-2"])
async def test_a_read_after_an_edit_never_shares_a_request_sent_before_it(backend: Backend, editor: str) -> None:
    """alice-1 has a read in flight that saw v0; an edit by alice (this cache or the other one) returns;
    alice-1's next identical read must not join the old request, and returns v1 or newer."""
    async with three_caches(backend) as run:
        reads: list[Read] = []
        done = anyio.Event()

        async def read_after() -> None:
            reads.append(await run.read("alice-1", "d1"))
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run.read, "alice-1", "d1", "use", "old")
            await run.state.wait_reached("old")
            await run.edit(editor, "d1")
            tg.start_soon(read_after)
            # A correct cache answers without the old request; a wrong one waits for it, and gets v0 once
            # it is released (the bound only keeps a wrong cache from hanging the test).
            with anyio.move_on_after(30):
                await done.wait()
            run.state.release("old")
        (after,) = reads
        assert (version_of(after), after.coalesced) == (1, False)
        wrong = judge(run)
        report(f"{backend.name} / read your writes / {editor}", run, 0.0, wrong)
        assert wrong == []


async def test_identical_concurrent_edits_each_reach_the_server(backend: Backend) -> None:
    """Two concurrent identical calls of a tool the trusted server annotated as not read-only are two
    writes: sharing one request performs one of them and tells both callers theirs was done."""
    async with three_caches(backend) as run:
        conn, partition = run.conns["alice-1"]
        arguments = {"doc": "d1", "who": partition, "n": 7}
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(conn.call, "edit", arguments)
        assert run.state.version("d1") == 3


# -- random interleavings ----------------------------------------------------------------------------


async def interleave(run: Run, rng: random.Random, ops: int) -> None:
    caches = [name for name, _, _ in CACHES]
    async with anyio.create_task_group() as tg:
        for _ in range(ops):
            roll = rng.random()
            if roll < 0.50:
                mode: CacheMode = "refresh" if rng.random() < 0.12 else "use"
                held = len(run.state.held()) < 6 and rng.random() < 0.3
                tg.start_soon(run.read, rng.choice(caches), rng.choice(DOCS), mode, run.rid() if held else None)
            elif roll < 0.58:
                tg.start_soon(run.edit, rng.choice(caches), rng.choice(DOCS))
            elif roll < 0.64:
                run.state.change(rng.choice(DOCS))
            elif roll < 0.76:
                run.clock.advance(rng.choice(STEPS))
            else:
                held = run.state.held()
                if held:
                    run.state.release(rng.choice(held))
            for _ in range(rng.randrange(4)):
                await anyio.lowlevel.checkpoint()
            if rng.random() < 0.1:
                await anyio.sleep(0.002)  # let store round trips (threads, sockets) complete
        while run.state.held():
            run.state.release(rng.choice(run.state.held()))
            await anyio.sleep(0.001)


DELTA_PAD = "notes " * 700
"""Large enough that every new version of a read is sent as a delta reply and patched."""


@pytest.mark.slow
@pytest.mark.parametrize("answers", ["small", "sent as deltas"])
async def test_random_interleavings_agree_with_the_model(backend: Backend, answers: str) -> None:
    """With "sent as deltas", reads that find a stale copy get most new versions as delta replies: caches
    patch their copies while the others read, write, revalidate and patch the same entries."""
    started = time.monotonic()
    total: list[str] = []
    reads = edits = behind = 0
    statuses: Counter[str] = Counter()
    pad = DELTA_PAD if answers == "sent as deltas" else ""
    for seed in range(ROUNDS):
        async with three_caches(backend, pad) as run:
            await interleave(run, random.Random(seed), OPS)
            wrong = judge(run)
            if wrong:
                report(f"{backend.name} seed {seed}", run, time.monotonic() - started, wrong)
            total += [f"seed {seed}: {line}" for line in wrong]
            reads, edits = reads + len(run.reads), edits + len(run.edits)
            behind += sum(1 for change in run.state.changes if change.rid is None)
            statuses.update(("coalesced" if r.coalesced else r.status) for r in run.reads)
        # Each round starts on clean storage: a new namespace, or the same file emptied.
        async with backend.open() as store:
            await store.remove_all()
    print(
        f"\n[{backend.name}] rounds={ROUNDS} operations={reads + edits + behind} reads={reads} "
        f"edits_through_caches={edits} edits_behind={behind} outcomes={dict(statuses)} "
        f"wrong_reads={len(total)} seconds={time.monotonic() - started:.1f}"
    )
    assert total == []
    if pad:
        assert statuses["patched"] > 0, statuses
