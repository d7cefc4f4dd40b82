"""What a read after an edit costs through `mcpcache gateway`, with and without a delta reply.

The upstream is `python -m mcpcache demo-server --no-revalidation` over streamable HTTP on 127.0.0.1 (a
server that never heard of mcpcache) serving a generated notebook; in front of it, `mcpcache gateway
--tool read_notebook=0:public --redis URL` (ttl 0: every read reaches upstream; a Redis store, so the
gateway keeps its delta history there). One stock `fastmcp.Client` over HTTP, its messages counted at
its transport (mcpcache.wire_count: JSON-RPC message bytes, HTTP framing not counted).

Each round edits one cell (through the gateway, which passes `edit_cell` through) and reads the notebook
twice, in an order that alternates from round to round:

- delta: a conditional read with the tag the client holds and `acceptDelta`, the reply applied to the
  client's copy and its digest checked (what mcpcache's client does);
- full: the same read without `acceptDelta` (what a client that cannot apply deltas gets).

Both reads follow the same edit, so both find a changed answer: the gateway fetches the whole notebook
from upstream and hashes it either way; they differ in what goes to the caller. The ratio delta / full
is taken per round and summarised as median and 25th-75th percentile spread. At the end, the history's
items and bytes in Redis.

Run:  python benchmarks/delta_gateway.py                      (5 MB notebook, 12 rounds)
      python benchmarks/delta_gateway.py --size 1MB --rounds 3  (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import fastmcp
import mcp_types as mt
from fastmcp.client.transports import StreamableHttpTransport

from mcpcache.bench.common import machine
from mcpcache.bench.hops import demo_servers, gateway, spread
from mcpcache.bench.runner import parse_size
from mcpcache.bench.wire import CountingFastMCPTransport
from mcpcache.delta import FORMAT, apply, document_of, result_of
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.etag import answer_digest
from mcpcache.gateway.history import HISTORY_GROUP
from mcpcache.processes import RedisServer
from mcpcache.protocol import META_KEY, DeltaBlock, conditional_request_meta, parse_cache_block
from mcpcache.stores import RedisStore
from mcpcache.wire_count import WireLog

NOTEBOOK = "bench.ipynb"
ARGS = {"path": NOTEBOOK}
NAMESPACE = "mcpcache-gateway"  # what `--redis` uses


def tag_of(result: mt.CallToolResult) -> str:
    block = parse_cache_block(result.meta)
    if block is None or block.etag is None:
        raise RuntimeError(f"no tag on {result.meta}")
    return block.etag


def patched(held: mt.CallToolResult, reply: mt.CallToolResult) -> mt.CallToolResult:
    block = parse_cache_block(reply.meta)
    if block is None or not isinstance(block.delta, DeltaBlock):
        raise RuntimeError(f"not a delta reply: {reply.meta}")
    rebuilt = result_of(apply(document_of(held), block.delta.ops))
    if answer_digest(rebuilt.content, rebuilt.structured_content, rebuilt.meta) != block.delta.digest:
        raise RuntimeError("the digest does not match")
    kept = {key: value for key, value in (reply.meta or {})[META_KEY].items() if key != "delta"}
    return rebuilt.model_copy(update={"meta": {**(rebuilt.meta or {}), META_KEY: kept}})


async def run(size: int, rounds: int) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="delta-gateway-"))
    generate_notebook_of_size(folder / NOTEBOOK, size, seed=7)
    redis_binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    with RedisServer(redis_binary) as redis, demo_servers(folder, {"upstream": ("--no-revalidation",)}) as ports:
        upstream = f"http://127.0.0.1:{ports['upstream']}/mcp"
        async with gateway(upstream, "--tool", "read_notebook=0:public", "--redis", redis.url) as port:
            log = WireLog()
            transport = StreamableHttpTransport(f"http://127.0.0.1:{port}/mcp", max_sse_event_size=None)
            async with fastmcp.Client(CountingFastMCPTransport(transport, log), timeout=300) as client:
                held = await client.call_tool_mcp("read_notebook", ARGS)
                cells = len(held.structured_content["cells"])
                seconds: dict[str, list[float]] = {"delta": [], "full": []}
                nbytes: dict[str, list[int]] = {"delta": [], "full": []}
                for number in range(rounds):
                    source = f"print('round {number}')"
                    order = ("delta", "full") if number % 2 == 0 else ("full", "delta")
                    for way in order:
                        edited = await client.call_tool_mcp(
                            "edit_cell", {"path": NOTEBOOK, "index": (7 * number) % cells, "source": source + way}
                        )
                        if edited.is_error:
                            raise RuntimeError(f"the edit failed: {edited.content}")
                        accept = [FORMAT] if way == "delta" else []
                        meta = conditional_request_meta(tag_of(held), accept_delta=accept)
                        mark = log.mark()
                        started = time.perf_counter()
                        reply = await client.call_tool_mcp("read_notebook", ARGS, meta=meta)
                        held = patched(held, reply) if way == "delta" else reply
                        seconds[way].append(time.perf_counter() - started)
                        nbytes[way].append(log.exchange("tools/call", since=mark)[1].nbytes)
            async with RedisStore(redis.url, namespace=NAMESPACE) as store:
                history = await store.usage(HISTORY_GROUP)
    shutil.rmtree(folder, ignore_errors=True)
    ratios = [d / f for d, f in zip(seconds["delta"], seconds["full"], strict=True)]
    return {
        "size": size,
        "rounds": rounds,
        "ms": {way: spread([s * 1000 for s in values]) for way, values in seconds.items()},
        "bytes": {way: statistics.median(values) for way, values in nbytes.items()},
        "time_delta_over_full": spread(ratios),
        "history": {"items": history.items, "bytes": history.bytes},
        "machine": machine(),
    }


def render(report: dict[str, Any]) -> str:
    ms, by, ratio = report["ms"], report["bytes"], report["time_delta_over_full"]
    lines = [
        f"{report['size']:,}-byte notebook, {report['rounds']} rounds, through `mcpcache gateway` with Redis",
        "",
        "| read after a one-cell edit | median ms [p25-p75] | bytes of the reply (median) |",
        "|---|---:|---:|",
    ]
    for way, label in (("full", "full answer (no acceptDelta)"), ("delta", "delta reply (acceptDelta)")):
        spread_ms = ms[way]
        lines.append(
            f"| {label} | {spread_ms['median']:.0f} [{spread_ms['p25']:.0f}-{spread_ms['p75']:.0f}] | {by[way]:,.0f} |"
        )
    lines += [
        "",
        f"time, delta / full per round: {ratio['median']:.2f} [{ratio['p25']:.2f}-{ratio['p75']:.2f}]",
        f"history in Redis after the run: {report['history']['items']} items, {report['history']['bytes']:,} bytes",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="5MB", help="notebook size on disk (default 5MB)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--json", type=Path, help="also write the report as JSON")
    options = parser.parse_args()
    report = anyio.run(run, parse_size(options.size), options.rounds)
    print(render(report))
    if options.json is not None:
        options.json.write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
