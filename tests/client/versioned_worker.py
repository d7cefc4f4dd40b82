"""One of the processes of tests/client/test_two_processes.py: a `ToolCache` of partition alice on a shared
SQLite file or Redis namespace, wrapping a stock client of the versioned server over streamable HTTP.

`python versioned_worker.py <sqlite|redis> <location> <namespace> <name> <mcp|fastmcp> <seconds> <seed> <log>`

It reads the server's URL from stdin (so it can start while the server does), connects, warms up on a
document no logged call touches, prints `ready`, waits for a line on stdin (so both workers start
together), then runs four concurrent loops of random calls for `seconds`: reads (some with
`cache_mode="refresh"`, some asking the server to delay its answer after reading the version, so answers
land out of order), edits through the cache, and edits on the stock client around it. Each call is
logged as a JSON line (written when the worker ends): when it was sent and when it returned
(`time.time()`), what it returned, and the cache's outcome. Every request names its call in `_meta`
(`rid`), which the server logs with its answer.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
import anyio.to_thread
import fastmcp
import mcp
import mcp_types as mt
from fastmcp.client.transports import StreamableHttpTransport

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.stores import RedisStore, SQLiteStore, Store

SERVER_ID = "versioned-http"
PARTITION = "alice"
DOCS = ("d1", "d2", "d3", "d4")
"""Named `<namespace>-<doc>` on the server, so runs on different stores can share one server."""
LOOPS = 4
STORE_DEADLINE_S = 30.0


def open_store(kind: str, location: str, namespace: str) -> Store:
    if kind == "sqlite":
        return SQLiteStore(location, namespace=namespace)
    return RedisStore(location, namespace=namespace)


def answer_of(result: mt.CallToolResult) -> dict[str, Any]:
    structured = result.structured_content or {}
    meta = result.meta or {}
    return {
        "version": structured.get("version"),
        "answered_doc": structured.get("doc"),
        "who": structured.get("who"),
        "meta_version": meta.get("version"),
        "meta_who": meta.get("who"),
        "texts": [block.text for block in result.content if isinstance(block, mt.TextContent)],
        "is_error": bool(result.is_error),
    }


async def main(
    kind: str, location: str, namespace: str, name: str, client_kind: str, seconds: float, seed: int
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    docs = [f"{namespace}-{doc}" for doc in DOCS]
    count = 0
    entries: list[dict[str, Any]] = []
    url = (await anyio.to_thread.run_sync(sys.stdin.readline)).strip()  # once the server listens
    async with open_store(kind, location, namespace) as store:
        # The deadline only keeps a stalled store from stalling the worker; on a busy machine a store round
        # trip may take over the default second, which would be a (correct) miss but not what is tested.
        cache = ToolCache(store, CacheSettings(trusted=True, store_deadline_s=STORE_DEADLINE_S), partition=PARTITION)
        client: Any = fastmcp.Client(StreamableHttpTransport(url)) if client_kind == "fastmcp" else mcp.Client(url)
        async with client:
            view = cache.wrap(client, server_id=SERVER_ID)

            async def call(tool: str, arguments: dict[str, Any], meta: dict[str, Any], mode: str = "use") -> Any:
                if client_kind == "fastmcp":
                    return await view.call_mcp(tool, arguments, meta=meta, cache_mode=mode)
                return await view.call(tool, arguments, meta=meta, cache_mode=mode)

            async def behind(arguments: dict[str, Any], meta: dict[str, Any]) -> bool:
                """An edit on the stock client, around the cache (as another part of the app would call)."""
                if client_kind == "fastmcp":
                    result = await client.call_tool_mcp("edit", arguments, meta=meta)
                else:
                    result = await client.call_tool("edit", arguments, meta=meta)
                return bool(result.is_error)

            async def loop(deadline: float) -> None:
                nonlocal count
                while time.time() < deadline:
                    count += 1
                    rid, doc = f"{name}-{count}", rng.choice(docs)
                    meta: dict[str, Any] = {"rid": rid}
                    roll = rng.random()
                    if roll < 0.065:
                        # Through the cache (it ends freshness), or behind every cache's back.
                        kind = "edit" if roll < 0.015 else "behind"
                        entry: dict[str, Any] = {"kind": kind, "rid": rid, "doc": doc, "sent": time.time()}
                        arguments = {"doc": doc, "who": PARTITION, "n": count}
                        if kind == "edit":
                            failed = bool((await call("edit", arguments, meta)).result.is_error)
                        else:
                            failed = await behind(arguments, meta)
                        entry.update(returned=time.time(), is_error=failed)
                    else:
                        mode = "refresh" if rng.random() < 0.03 else "use"
                        if rng.random() < 0.3:
                            meta["delayMs"] = rng.choice([5, 20, 60, 150])
                        entry = {"kind": "read", "rid": rid, "doc": doc, "mode": mode, "sent": time.time()}
                        done = await call("read", {"doc": doc, "who": PARTITION}, meta, mode)
                        entry["returned"] = time.time()
                        entry.update(answer_of(done.result))
                        entry.update(status=done.outcome.status, coalesced=done.outcome.coalesced)
                    entries.append(entry)
                    await anyio.sleep(rng.choice([0, 0, 0.002, 0.01, 0.03]))

            # Warm both ends up (the first call imports and builds what later calls reuse) on a document no
            # logged call touches, so that the timed run starts with calls, not with start-up work.
            await call("read", {"doc": f"{namespace}-warm", "who": PARTITION}, {"rid": f"{name}-warm-read"})
            warm_edit = {"doc": f"{namespace}-warm", "who": PARTITION, "n": 0}
            await call("edit", warm_edit, {"rid": f"{name}-warm-edit"})
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            deadline = time.time() + seconds
            async with anyio.create_task_group() as tg:
                for _ in range(LOOPS):
                    tg.start_soon(loop, deadline)
        print(json.dumps({"calls": count, "store_failures": cache.stats.store_failures}), flush=True)
    return entries


if __name__ == "__main__":
    kind, location, namespace, name, client_kind, seconds, seed, log = sys.argv[1:9]
    logged = anyio.run(main, kind, location, namespace, name, client_kind, float(seconds), int(seed))
    Path(log).write_text("".join(json.dumps(entry) + "\n" for entry in logged), encoding="utf-8")
