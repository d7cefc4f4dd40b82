"""Throughput of 1, 2 and 3 `mcpcache gateway` replicas on one machine, sharing one Redis Cluster.

A Redis Cluster of 3 primaries (real redis-server processes, `mcpcache.processes.RedisCluster`) holds the
gateways' shared store (`redis+cluster://`); the upstream is the bare FastMCP server of
benchmarks/gateway.py --scale (one tool answering a constant 1 KB, ttl 10 minutes, so every measured call
is a fresh hit served from the store). Callers speak streamable HTTP by hand over keep-alive connections
(benchmarks/gateway.py's `RawSession`), caller i talking to replica i mod N. Configurations (1, 2, 3
replicas) are interleaved in shuffled rounds; each makes `--calls` calls. Per configuration: calls/s
(median, 10th-90th percentile over rounds), and per round the ratio to 1 replica in that round (median and
spread). Everything runs on this machine: replicas, cluster, upstream and load generator share its cores,
so the ratio says how far replicas help on one node, not on many.

Run:  python benchmarks/cluster_replicas.py                    (5 rounds of 600 calls: a few minutes)
      python benchmarks/cluster_replicas.py --rounds 2 --calls 200   (a smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import gateway as scale  # benchmarks/gateway.py: the floor server, the raw callers, the gateway's config

from mcpcache.bench.common import percentile
from mcpcache.processes import RedisCluster, free_port, stop_process, wait_until_listening

REPLICAS = (1, 2, 3)


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "p10": percentile(values, 0.1), "p90": percentile(values, 0.9)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    folder = Path(tempfile.mkdtemp(prefix="mcpcache-cluster-replicas-"))
    started: list[subprocess.Popen[bytes]] = []
    sessions: list[scale.RawSession] = []

    def launch(command: list[str], port: int, what: str) -> None:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        started.append(process)
        wait_until_listening(process, port, 120, what)

    rates: dict[int, list[float]] = {n: [] for n in REPLICAS}
    ratios: dict[int, list[float]] = {n: [] for n in REPLICAS}
    try:
        with RedisCluster(binary, folder / "cluster", primaries=3) as cluster:
            upstream_port = free_port()
            launch([sys.executable, scale.__file__, "--serve-floor", str(upstream_port)], upstream_port, "upstream")
            upstream = f"http://127.0.0.1:{upstream_port}/mcp"
            config = scale.gateway_config(folder, upstream, cluster.url, json_response=False)
            ports = []
            for _ in REPLICAS:
                port = free_port()
                launch(
                    [sys.executable, "-m", "mcpcache", "gateway", "--config", str(config), "--port", str(port)],
                    port,
                    "gateway",
                )
                ports.append(port)
            pools: list[list[scale.RawSession]] = []
            for index, port in enumerate(ports):
                pool = [scale.RawSession(port, "modern") for _ in range(-(-args.clients // (index + 1)))]
                for session in pool:
                    await session.open()
                    await session.call()  # warm: the first call fills the store
                pools.append(pool)
                sessions += pool
            for round_index in range(args.rounds):
                order = list(REPLICAS)
                random.Random(round_index).shuffle(order)
                this_round: dict[int, float] = {}
                for replicas in order:
                    chosen = [pools[i % replicas][i // replicas] for i in range(args.clients)]
                    wall = await scale.drive(chosen, args.calls, [])
                    this_round[replicas] = args.calls / wall
                for replicas, rate in this_round.items():
                    rates[replicas].append(rate)
                    ratios[replicas].append(rate / this_round[1])
                print(
                    f"round {round_index + 1}/{args.rounds}: "
                    + ", ".join(f"{n} x {this_round[n]:.0f}/s" for n in REPLICAS),
                    file=sys.stderr,
                )
    finally:
        for session in sessions:
            await session.close()
        for process in started:
            stop_process(process)
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "calls_per_round": args.calls,
        "clients": args.clients,
        "rounds": args.rounds,
        "calls_per_s": {n: _spread(rates[n]) for n in REPLICAS},
        "vs_one_replica": {n: _spread(ratios[n]) for n in REPLICAS},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--clients", type=int, default=24, help="concurrent callers, spread over the replicas")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    document = asyncio.run(run(args))
    for n in REPLICAS:
        rate, ratio = document["calls_per_s"][n], document["vs_one_replica"][n]
        print(
            f"{n} replica(s): {rate['median']:.0f} calls/s [{rate['p10']:.0f}-{rate['p90']:.0f}], "
            f"x{ratio['median']:.2f} [{ratio['p10']:.2f}-{ratio['p90']:.2f}] vs 1 replica"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
