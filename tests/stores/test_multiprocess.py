"""Several OS processes on one store: what the SQLite file and the Redis namespace are for.

Each process is a real `python` running a small script against the store, so the file locks, the WAL
and the Redis scripts are exercised exactly as two agents on one machine would exercise them.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from mcpcache.stores import SQLiteStore, StoreLimits

pytestmark = pytest.mark.slow

_OPEN_STORE = """
import asyncio, json, os, sys
from mcpcache.stores import Item, RedisStore, SQLiteStore, StoreLimits

def open_store(kind, location, namespace, max_bytes=None):
    limits = StoreLimits(max_bytes=max_bytes)
    if kind == "sqlite":
        return SQLiteStore(location, limits, namespace=namespace)
    return RedisStore(location, namespace=namespace, limits=limits)
"""

HAMMER = (
    _OPEN_STORE
    + """
async def main(path, name, other, rounds, max_bytes):
    wrong = 0
    async with open_store("sqlite", path, "mp", max_bytes) as store:
        for i in range(rounds):
            await store.save(f"{name}-{i}", Item({"by": name, "i": i}, os.urandom(2000), name, float(i)))
            for owner, index in ((name, i), (other, i), (other, i // 2)):
                got = await store.load(f"{owner}-{index}")  # may be evicted by now, never someone else's
                if got is not None and (got.meta["by"], got.meta["i"]) != (owner, index):
                    wrong += 1
            await store.update_meta(f"{name}-{i}", {"by": name, "i": i, "revalidated": True}, None)
            if i % 20 == 0:
                await store.trim_group(name, 40_000)
                await store.usage(name)
    print(json.dumps({"wrong": wrong}))

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
"""
)

SAVE_ONE = (
    _OPEN_STORE
    + """
async def main(kind, location, namespace):
    async with open_store(kind, location, namespace) as store:
        await store.save("handoff", Item({"from": os.getpid(), "note": "héllo"}, b"\\x00body\\xff", "conv:1", 12.5))
    print(os.getpid())

asyncio.run(main(*sys.argv[1:4]))
"""
)

LOAD_ONE = (
    _OPEN_STORE
    + """
async def main(kind, location, namespace):
    async with open_store(kind, location, namespace) as store:
        item = await store.load("handoff")
        usage = await store.usage("conv:1")
    print(json.dumps(None if item is None else {
        "meta": item.meta, "body": item.body.hex(), "group": item.group, "created_at": item.created_at,
        "items": usage.items,
    }))

asyncio.run(main(*sys.argv[1:4]))
"""
)


def run_script(script: str, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def test_two_processes_write_and_read_one_sqlite_file_without_lock_errors(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    max_bytes = 120_000  # far less than the two write, so both processes evict under each other's feet
    commands = [
        [sys.executable, "-c", HAMMER, path, name, other, "150", str(max_bytes)]
        for name, other in (("left", "right"), ("right", "left"))
    ]
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for command in commands
    ]
    outputs = [process.communicate(timeout=120) for process in processes]
    for process, (stdout, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr
        assert "locked" not in stderr.lower(), stderr
        assert json.loads(stdout) == {"wrong": 0}

    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        # The counters both processes maintained agree with a full recount.
        counted = conn.execute("SELECT items, bytes FROM ns_usage WHERE ns = 'mp'").fetchone()
        recounted = conn.execute("SELECT count(*), SUM(size) FROM items WHERE ns = 'mp'").fetchone()
        assert counted == recounted
        assert 0 < recounted[1] <= max_bytes
        orphans = conn.execute("SELECT count(*) FROM bodies WHERE item_id NOT IN (SELECT id FROM items)").fetchone()
        assert orphans[0] == 0


@pytest.mark.anyio
async def test_counters_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    run = run_script(HAMMER, str(path), "solo", "nobody", "30", "1000000")
    assert run.returncode == 0, run.stderr
    async with SQLiteStore(path, StoreLimits(), namespace="mp") as store:
        usage = await store.usage()
        assert usage == await store.usage("solo")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*), SUM(size) FROM items").fetchone() == (usage.items, usage.bytes)
    assert usage.items > 0


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def test_a_second_process_loads_what_the_first_saved(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    location = str(tmp_path / "handoff.db") if kind == "sqlite" else request.getfixturevalue("redis_url")
    namespace = f"mp-{uuid.uuid4().hex[:8]}"
    saved = run_script(SAVE_ONE, kind, location, namespace)
    assert saved.returncode == 0, saved.stderr
    loaded = run_script(LOAD_ONE, kind, location, namespace)
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout) == {
        "meta": {"from": int(saved.stdout), "note": "héllo"},
        "body": b"\x00body\xff".hex(),
        "group": "conv:1",
        "created_at": 12.5,
        "items": 1,
    }
