"""One run of the memory part of benchmarks/client_overhead.py, in a process of its own.

    python benchmarks/client_overhead_memory.py {bare|store|toolcache} [--total-bytes N] [--max-bytes N]

Prints one JSON object: the RSS after imports, the peak RSS (`ru_maxrss`), and what passed through.
It runs in a fresh process so that the peak is this workload's and nothing else's; client_overhead.py
starts it with and without MALLOC_MMAP_THRESHOLD_ in the environment.

- bare: the interpreter alone (stdlib only), for scale.
- store: `MemoryStore.save` directly, with bodies as bytes. This isolates the store: its bound, its
  LRU eviction and whether an evicted body's memory comes back.
- toolcache: the client's own path. A stub `Connection` answers each call with a fresh
  `CallToolResult` (one text block, a cache block with a tag and a 60 s ttl), and `ToolCache.execute`
  encodes and saves it as it would a server's answer; a quarter of the calls ask again for one of the
  last eight results, which is a fresh hit (decoded from the stored bytes) when it is still held.

--variant tries a remedy for glibc heap fragmentation in the child only, mcpcache unchanged:
- mallopt: `mallopt(M_MMAP_THRESHOLD, 128 KiB)` at start, what MALLOC_MMAP_THRESHOLD_=131072 does from
  the environment, done by the program (a library could do it);
- trim: `malloc_trim(0)` after every save of a body of 1 MiB or more.

Both workloads draw the same sizes from one seed: sizes from six classes (2 KB .. 16 MB), each
scaled by a factor between 0.5 and 1.5, until the total reaches --total-bytes.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SIZE_CLASSES = (2_000, 20_000, 200_000, 1_000_000, 4_000_000, 16_000_000)
SEED = 7
TTL_MS = 60_000


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def rss_kib() -> int:
    """The current resident set, from /proc (ru_maxrss only knows the peak)."""
    return _status_kib("VmRSS")


def sizes(total: int) -> list[int]:
    rng = random.Random(SEED)
    out: list[int] = []
    while sum(out) < total:
        out.append(int(rng.choice(SIZE_CLASSES) * rng.uniform(0.5, 1.5)))
    return out


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL("libc.so.6")


def apply_variant(variant: str) -> None:
    """Try a remedy in this process without changing mcpcache (see the module docstring)."""
    if variant == "mallopt":
        # M_MMAP_THRESHOLD is -3 in glibc's malloc.h; setting it also turns the dynamic threshold off,
        # which is what MALLOC_MMAP_THRESHOLD_ does from the environment.
        if _libc().mallopt(-3, 128 * 1024) != 1:
            raise RuntimeError("mallopt(M_MMAP_THRESHOLD) failed")
    elif variant == "trim":
        from mcpcache.stores.memory import MemoryStore

        libc = _libc()
        save = MemoryStore.save

        async def save_then_trim(self: MemoryStore, key: str, item: Any) -> None:
            await save(self, key, item)
            if len(item.body) >= 1024 * 1024:
                libc.malloc_trim(0)  # hand free heap pages back, holes in the middle included

        MemoryStore.save = save_then_trim  # type: ignore[method-assign]


def peak_kib() -> int:
    """ru_maxrss, KiB on Linux. Linux carries the peak of the address space a process replaced by exec
    into it, so a child started straight from a large process reports at least the parent's size:
    client_overhead.py starts this script through /bin/sh, a small process that forks it."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def peak_fields() -> dict[str, int]:
    # VmHWM is the peak of this address space alone: a cross-check of ru_maxrss.
    return {"peak_rss_kib": peak_kib(), "vm_hwm_kib": _status_kib("VmHWM")}


def run_bare() -> dict[str, Any]:
    return {"mode": "bare", "rss_after_imports_kib": rss_kib(), **peak_fields()}


async def run_store(total: int, max_bytes: int) -> dict[str, Any]:
    from mcpcache.stores import Item, MemoryStore, StoreLimits

    after_imports = rss_kib()
    store = MemoryStore(StoreLimits(max_bytes=max_bytes))
    rng = random.Random(SEED + 1)
    plan = sizes(total)
    hits = 0
    start = time.perf_counter()
    for i, size in enumerate(plan):
        now = time.time()
        body = rng.randbytes(size)  # a new object per result, as bytes read off a transport would be
        item = Item(
            meta={"i": i, "etag": f'W/"{i:032x}"'}, body=body, group="tools", created_at=now, expires_at=now + 60
        )
        await store.save(f"t:{i}", item)
        del body, item
        if rng.random() < 0.25 and i:
            got = await store.load(f"t:{rng.randint(max(0, i - 8), i - 1)}")
            hits += got is not None
            del got
    seconds = time.perf_counter() - start
    usage = await store.usage()
    return {
        "mode": "store",
        "rss_after_imports_kib": after_imports,
        **peak_fields(),
        "rss_end_kib": rss_kib(),
        "results": len(plan),
        "largest": max(plan),
        "passed_bytes": sum(plan),
        "store_bytes": usage.bytes,
        "store_items": usage.items,
        "fresh_hits": hits,
        "seconds": seconds,
    }


async def run_toolcache(total: int, max_bytes: int) -> dict[str, Any]:
    from mcp_types import CallToolResult, TextContent

    from mcpcache.client import ToolCache
    from mcpcache.protocol import META_KEY
    from mcpcache.stores import MemoryStore, StoreLimits

    after_imports = rss_kib()
    rng = random.Random(SEED + 1)
    plan = sizes(total)

    class StubConnection:
        """A server that answers every call at once with a result of the planned size."""

        server_id = "bench:memory"
        era = "2026-07-28"
        timeout_s = None

        def __init__(self) -> None:
            self.size = 0

        async def send(
            self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None, timeout_s: float | None
        ) -> Any:
            return await self.send_plain(name, arguments, meta)

        async def send_plain(self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None) -> Any:
            text = rng.randbytes(self.size // 2).hex()  # a new str per answer, as a parsed reply would be
            block = {"ttlMs": TTL_MS, "cacheScope": "private", "etag": f'W/"{arguments["i"]:032x}"'}
            return CallToolResult(content=[TextContent(type="text", text=text)], _meta={META_KEY: block})

        async def validate(self, name: str, result: Any) -> None:
            return None

        async def read_only(self, name: str) -> bool | None:
            return True

        async def idempotent(self, name: str) -> bool | None:
            return True

        async def declarations(self) -> Mapping[str, Any] | None:
            return None

    cache = ToolCache(MemoryStore(StoreLimits(max_bytes=max_bytes)))
    conn = StubConnection()
    start = time.perf_counter()
    stored = 0
    for i, size in enumerate(plan):
        conn.size = size
        result, outcome = await cache.execute(conn, "read", {"i": i})
        stored += outcome.stored
        del result, outcome
        if rng.random() < 0.25 and i:
            conn.size = 0
            again, _ = await cache.execute(conn, "read", {"i": rng.randint(max(0, i - 8), i - 1)})
            del again
    seconds = time.perf_counter() - start
    usage = await cache.store.usage()
    return {
        "mode": "toolcache",
        "rss_after_imports_kib": after_imports,
        **peak_fields(),
        "rss_end_kib": rss_kib(),
        "results": len(plan),
        "largest": max(plan),
        "passed_bytes": sum(plan),
        "stored": stored,
        "store_bytes": usage.bytes,
        "store_items": usage.items,
        "fresh_hits": cache.stats.fresh_hits,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", choices=("bare", "store", "toolcache"))
    parser.add_argument("--total-bytes", type=int, default=2 * 1024**3)
    parser.add_argument("--max-bytes", type=int, default=256 * 1024**2)
    parser.add_argument("--variant", choices=("as-is", "mallopt", "trim"), default="as-is")
    args = parser.parse_args()
    apply_variant(args.variant)
    if args.mode == "bare":
        result = run_bare()
    else:
        import anyio

        workload = run_store if args.mode == "store" else run_toolcache
        result = anyio.run(workload, args.total_bytes, args.max_bytes)
    result["variant"] = args.variant
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
