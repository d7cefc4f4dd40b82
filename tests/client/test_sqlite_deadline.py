"""A tool cache over a real SQLite file while another OS process holds a lock or a read transaction on it.

Every call must come back within the store deadline plus a generous margin, no call may fail, fresh hits
must still be served while only writes are locked, and once the holder lets go the cache stores and hits
again. The latencies are printed per fault (run with -s) for the record; the assertions are behaviour.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
from stores.backends import FakeClock
from support.sqlite_lock import Hold
from support.transports import MODERN, ServerTarget

from mcpcache.client import ToolCache
from mcpcache.stores import SQLiteStore
from mcpcache.stores.fence import DEFAULT_STORE_DEADLINE_S

from .harness import connect
from .lab import Lab, build_lab

pytestmark = pytest.mark.anyio

HOLD_S = 5.0
"""How long the other process holds its transaction while calls go on."""
MARGIN_S = 3.0


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exclusive", "immediate", "read"])
async def test_calls_stay_within_the_deadline_while_another_process_holds_the_file(
    tmp_path: Path,
    hold: Hold,
    mode: str,
) -> None:
    clock = FakeClock()
    path = tmp_path / "tools.db"
    lab = Lab()
    async with SQLiteStore(path, clock=clock) as store:
        cache = ToolCache(store, clock=clock)
        async with connect("mcp", ServerTarget.memory(build_lab("fastmcp", lab)), MODERN, cache) as conn:
            assert (await conn.call("read", {"key": "k"})).outcome.status == "miss"
            holder = hold(path, mode)
            latencies: dict[str, list[float]] = {"hit": [], "new": []}
            statuses: dict[str, list[str]] = {"hit": [], "new": []}
            started = time.monotonic()
            i = 0
            try:
                while time.monotonic() - started < HOLD_S:
                    for kind, arguments in (("hit", {"key": "k"}), ("new", {"key": f"new{i}"})):
                        t0 = time.monotonic()
                        call = await conn.call("read", arguments)
                        latencies[kind].append(time.monotonic() - t0)
                        assert not call.result.is_error
                        assert call.result.structured_content["key"] == arguments["key"]
                        statuses[kind].append(call.outcome.status)
                    i += 1
            finally:
                holder.release()
            every = latencies["hit"] + latencies["new"]
            print(f"\n{mode} held {HOLD_S:g} s:")
            for kind, ms in (
                ("stored key (hit)", latencies["hit"]),
                ("new key (save)", latencies["new"]),
                ("all", every),
            ):
                print(
                    f"  {kind}: {len(ms)} calls, p50 {statistics.median(ms) * 1000:.1f} ms, max {max(ms) * 1000:.1f} ms"
                )
            assert max(every) < DEFAULT_STORE_DEADLINE_S + MARGIN_S
            # The stored entry is still served while writes are locked: reads never wait for the writer.
            assert set(statuses["hit"]) == {"fresh_hit"}, statuses["hit"]
            assert set(statuses["new"]) == {"miss"}
            # After the holder lets go, the cache stores and hits again.
            assert (await conn.call("read", {"key": "after"})).outcome.status == "miss"
            assert (await conn.call("read", {"key": "after"})).outcome.status == "fresh_hit"
