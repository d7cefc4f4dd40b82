"""A host process for the restart tests: `python host_process.py '<json spec>'` runs some steps and exits.

spec: {"store": {"kind": "sqlite", "path": ...} | {"kind": "redis", "url": ..., "namespace": ...},
"steps": [{"op": "mint" | "resolve" | "clear", "conversation": ..., "uri": ... (resolve)}, ...]}.
It prints one JSON list, a result per step. Each run is a fresh interpreter, so whatever it finds was kept
by the store, not by anything in memory.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import anyio

from mcpcache.refs import References
from mcpcache.stores import RedisStore, SQLiteStore, Store


def digest(rows: Any) -> str:
    """As servers.digest; repeated so this process does not import the servers (and their SDKs)."""
    canonical = json.dumps(rows, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def open_store(spec: dict[str, Any]) -> Store:
    if spec["kind"] == "sqlite":
        return SQLiteStore(spec["path"])
    return RedisStore(spec["url"], namespace=spec["namespace"])


async def step(store: Store, spec: dict[str, Any]) -> dict[str, Any]:
    refs = References(store, conversation_id=spec["conversation"])
    if spec["op"] == "mint":
        view = await refs.for_model(spec["payload"], server="query", tool="query", arguments={"station": "KSLC"})
        return {"uri": str(view.uri)}
    if spec["op"] == "clear":
        return {"cleared": await refs.clear_conversation()}
    resolution = await refs.resolve(tool="plot", arguments={"data_uri": spec["uri"], "title": "t"})
    if resolution.arguments is None:
        return {"ok": False, "error": resolution.error}
    data = resolution.arguments["data"]
    return {"ok": True, "rows": len(data), "digest": digest(data)}


async def run(spec: dict[str, Any]) -> list[dict[str, Any]]:
    store = open_store(spec["store"])
    try:
        return [await step(store, s) for s in spec["steps"]]
    finally:
        await store.close()


if __name__ == "__main__":
    print(json.dumps(anyio.run(run, json.loads(sys.argv[1]))))
