"""A second OS process sharing a store with the test, driven a command at a time on stdin.

`python stale_worker.py <sqlite|redis> <location> <namespace> <url> <server id>` opens a `ToolCache` on the
store (real clock), connects a `fastmcp.Client` to the server at `url` over streamable HTTP, prints
`{"ready": true}` and then answers each JSON line on stdin with one JSON line on stdout:
- `{"call": TOOL, "args": {...}}`: the call through the cache: its outcome's status and reason, whether the
  answer is an error, its text, or the error it raised;
- `{"flush": true}`: waits for the background revalidations, then prints the cache's stats;
- `{"quit": true}`: closes everything and exits.
Used by tests/client/test_stale_processes.py.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import fastmcp
from fastmcp.client.transports import StreamableHttpTransport

from mcpcache.client import ToolCache
from mcpcache.stores import RedisStore, SQLiteStore, Store


def open_store(kind: str, location: str, namespace: str) -> Store:
    if kind == "sqlite":
        return SQLiteStore(location, namespace=namespace, busy_timeout_s=10.0)
    return RedisStore(location, namespace=namespace, socket_timeout_s=10.0, connect_timeout_s=10.0)


def say(value: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


async def main(kind: str, location: str, namespace: str, url: str, server_id: str) -> None:
    store = open_store(kind, location, namespace)
    cache = ToolCache(store)
    try:
        async with fastmcp.Client(StreamableHttpTransport(url)) as client:
            view = cache.wrap(client, server_id=server_id)
            say({"ready": True})
            while True:
                line = await anyio.to_thread.run_sync(sys.stdin.readline)
                if not line:
                    return
                command = json.loads(line)
                if "quit" in command:
                    return
                if "flush" in command:
                    await cache.flush()
                    say(cache.stats.as_dict())
                    continue
                try:
                    call = await view.call_mcp(command["call"], command.get("args", {}))
                except Exception as exc:
                    say({"raised": f"{type(exc).__name__}: {exc}"})
                    continue
                structured = call.result.structured_content or {}
                say(
                    {
                        "status": call.outcome.status,
                        "reason": call.outcome.reason,
                        "is_error": call.result.is_error,
                        "text": structured.get("text"),
                    }
                )
    finally:
        await cache.close()
        await store.close()


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:6])
