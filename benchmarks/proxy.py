"""What `mcpcache proxy` costs and saves: bytes and time per read of a 5 MB notebook, direct and through it.

The upstream is `mcpcache demo-server` over streamable HTTP on 127.0.0.1, and every byte between a client
(or the proxy) and it is counted on the wire by a relay (mcpcache.bench.relay): the JSON-RPC message bytes,
and the TCP bytes with HTTP framing. The host is a stock `mcp.Client`; through the proxy it talks stdio to
`python -m mcpcache proxy --url ...`, and the message bytes of that pipe are counted at its transport.

Configurations, each a client of its own kept connected for the whole run:
- `direct`: the host talks to the demo server (with mcpcache) itself; every read is a full answer;
- `direct-stdio`: the same, the host starting the demo server and talking to it over stdio (through the
  proxy, the host reads every answer from a stdio pipe too);
- `direct-plain`: the same against the demo server without mcpcache (`--no-revalidation`);
- `proxy-revalidate`: through the proxy, to the demo server announcing ttlMs 0: every read is a stale read
  of an unchanged notebook, so the proxy revalidates and the upstream answers not-modified;
- `proxy-fresh`: through the proxy, ttlMs 10 minutes: every read after the first is a fresh hit;
- `proxy-plain`: through the proxy to the server without mcpcache: the proxy passes every answer through.

One read of each configuration per round, in a shuffled order, so noise hits them alike; the first read of
each is a warm-up and not counted. Reported per configuration: the median time per read and its ratio to
`direct` (median of the per-round ratios, with the 25th-75th percentile spread), and the median bytes per
read upstream and host side.

Run:  python benchmarks/proxy.py                 (5 MB, 15 rounds; a few minutes on 2 busy cores)
      python benchmarks/proxy.py --size 1000000 --rounds 5
      python benchmarks/proxy.py --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client

from mcpcache.bench.common import percentile
from mcpcache.bench.hops import demo_servers, host
from mcpcache.bench.relay import Traffic, counting_relay
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.wire_count import CountingTransport, WireLog

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = "big.ipynb"

SERVERS = {
    "revalidating": ["--ttl-ms", "0"],
    "fresh": ["--ttl-ms", "600000"],
    "plain": ["--no-revalidation"],
}
CONFIGS = {
    "direct": ("revalidating", False),
    "direct-stdio": ("revalidating", False),
    "direct-plain": ("plain", False),
    "proxy-revalidate": ("revalidating", True),
    "proxy-fresh": ("fresh", True),
    "proxy-plain": ("plain", True),
}


@dataclass
class Samples:
    seconds: list[float] = field(default_factory=list)
    upstream_messages: list[int] = field(default_factory=list)
    upstream_tcp: list[int] = field(default_factory=list)
    host_messages: list[int] = field(default_factory=list)


@contextlib.asynccontextmanager
async def client_for(
    config: str, relay_port: int, store: Path, log: WireLog, folder: Path
) -> AsyncIterator[mcp.Client]:
    server, through_proxy = CONFIGS[config]
    url = f"http://127.0.0.1:{relay_port}/mcp"
    if config == "direct-stdio":
        args = ["-m", "mcpcache", "demo-server", "--dir", str(folder), *SERVERS[server]]
        params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ), cwd=str(REPO))
        with open(os.devnull, "w") as quiet:  # noqa: ASYNC230 - opening /dev/null does not block
            async with mcp.Client(CountingTransport(stdio_client(params, quiet), log), mode="legacy") as client:
                yield client
    else:
        async with host(url, log, through_proxy=through_proxy, store=store) as client:
            yield client


async def run(size: int, rounds: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="mcpcache-proxy-bench-") as tmp:
        folder = Path(tmp) / "notebooks"
        folder.mkdir()
        generate_notebook_of_size(folder / NOTEBOOK, size, seed=seed)
        notebook_bytes = (folder / NOTEBOOK).stat().st_size
        with demo_servers(folder, SERVERS) as ports:
            async with contextlib.AsyncExitStack() as stack:
                relays: dict[str, Traffic] = {}
                clients: dict[str, tuple[mcp.Client, WireLog, Traffic]] = {}
                for config, (server, _) in CONFIGS.items():
                    # A relay per configuration: each one's upstream traffic is its own.
                    port, traffic = await stack.enter_async_context(counting_relay(ports[server]))
                    relays[config] = traffic
                    log = WireLog(deferred=True)
                    opened = client_for(config, port, Path(tmp) / f"{config}.db", log, folder)
                    client = await stack.enter_async_context(opened)
                    clients[config] = (client, log, traffic)
                samples = {config: Samples() for config in CONFIGS}
                order = list(CONFIGS)
                for round_no in range(rounds + 1):
                    rng.shuffle(order)
                    for config in order:
                        client, log, traffic = clients[config]
                        mark, before = log.mark(), traffic.snapshot()
                        started = time.perf_counter()
                        result = await client.call_tool("read_notebook", {"path": NOTEBOOK})
                        elapsed = time.perf_counter() - started
                        if result.is_error:
                            raise RuntimeError(f"{config}: {result.content}")
                        moved = traffic.since(before)
                        if round_no == 0:
                            continue  # the warm-up: first reads fill the proxies' stores
                        sample = samples[config]
                        sample.seconds.append(elapsed)
                        if config == "direct-stdio":  # the server is the host's own child: its pipe is the link
                            sample.upstream_messages.append(log.total(since=mark))
                            sample.upstream_tcp.append(0)
                        else:
                            sample.upstream_messages.append(moved.messages())
                            sample.upstream_tcp.append(moved.total())
                        sample.host_messages.append(log.total(since=mark) if CONFIGS[config][1] else 0)
    return summarize(samples, notebook_bytes, rounds)


def _spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), percentile(values, 0.25), percentile(values, 0.75)


def summarize(samples: dict[str, Samples], notebook_bytes: int, rounds: int) -> dict[str, Any]:
    base = samples["direct"].seconds
    rows = []
    for config, sample in samples.items():
        ratios = [mine / theirs for mine, theirs in zip(sample.seconds, base, strict=True)]
        median_ratio, low, high = _spread(ratios)
        rows.append(
            {
                "config": config,
                "median_ms": statistics.median(sample.seconds) * 1000,
                "p95_ms": percentile(sample.seconds, 0.95) * 1000,
                "ratio_to_direct": median_ratio,
                "ratio_p25": low,
                "ratio_p75": high,
                "upstream_message_bytes": statistics.median(sample.upstream_messages),
                "upstream_tcp_bytes": statistics.median(sample.upstream_tcp),
                "host_message_bytes": statistics.median(sample.host_messages),
            }
        )
    return {"notebook_bytes": notebook_bytes, "rounds": rounds, "load_average": os.getloadavg(), "rows": rows}


def render(report: dict[str, Any], say: Callable[[str], None] = print) -> None:
    say(f"read_notebook of a {report['notebook_bytes']:,} B notebook, {report['rounds']} interleaved rounds")
    say("")
    say(
        "| configuration | median per read | p95 | time vs direct (p25-p75) | upstream messages | upstream TCP "
        "| host-proxy messages |"
    )
    say("|---|---:|---:|---:|---:|---:|---:|")
    for row in report["rows"]:
        host = f"{row['host_message_bytes']:,.0f} B" if row["host_message_bytes"] else "-"
        tcp = f"{row['upstream_tcp_bytes']:,.0f} B" if row["config"] != "direct-stdio" else "(stdio)"
        say(
            f"| {row['config']} | {row['median_ms']:,.0f} ms | {row['p95_ms']:,.0f} ms | "
            f"{row['ratio_to_direct']:.2f}x ({row['ratio_p25']:.2f}-{row['ratio_p75']:.2f}) | "
            f"{row['upstream_message_bytes']:,.0f} B | {tcp} | {host} |"
        )
    load = report["load_average"]
    say("")
    say(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=5_000_000, help="notebook bytes (default 5 MB)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the report here")
    options = parser.parse_args()
    report = anyio.run(run, options.size, options.rounds, options.seed)
    render(report)
    if options.json:
        options.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
