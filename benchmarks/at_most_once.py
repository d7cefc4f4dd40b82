"""At most once under resets: how many times each call ran on the server, when a TCP relay loses requests.

A FastMCP server on 127.0.0.1 whose tools count their runs per call id (`write`: no hints; `put`: idempotent;
`look`: read-only), behind the relay of tests/support/relay.py losing a share of requests (`--rate`) at
random points from a seeded generator: reset unread, reset inside the request, reset once the server
answered (a proxy whose upstream link dropped), closed before the answer, reset inside the answer.
Concurrent callers share one session; a session that stops answering (`--dead-after` failures in a row,
or its client raising on the way out) is counted dead and replaced by a new one.

Configurations, interleaved in rounds in one run:
- stock: the MCP SDK's `Client` alone, nothing of mcpcache;
- cache: the same, wrapped by `ToolCache(MemoryStore())` (annotations not trusted);
- trusted: wrapped by `ToolCache(MemoryStore(), trusted=True)` (read-only and idempotent tools may be resent).

Prints, per configuration, the calls, how many calls of each tool ran 0, 1, 2... times, failed calls and dead
sessions. To compare with another version of mcpcache, run it with that version first on the path:
    python benchmarks/at_most_once.py --calls 3000
    PYTHONPATH=/path/to/other/checkout python benchmarks/at_most_once.py --calls 3000
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp
import mcp_types as mt
import uvicorn
from fastmcp import FastMCP
from mcp.shared.exceptions import MCPError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.relay import Relay  # the tests' relay: one home for the losses it makes

import mcpcache
from mcpcache.client import CacheSettings, ToolCache
from mcpcache.processes import free_port
from mcpcache.stores import MemoryStore

TOOLS = ("write", "put", "look")
CONFIGS = ("stock", "cache", "trusted")


def build_server(runs: Counter[str]) -> FastMCP[Any]:
    server: FastMCP[Any] = FastMCP("at-most-once")

    @server.tool
    def write(call: str) -> str:
        runs[call] += 1
        return call

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=False, idempotent_hint=True))
    def put(call: str) -> str:
        runs[call] += 1
        return call

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=True))
    def look(call: str) -> str:
        runs[call] += 1
        return call

    return server


def serve_in_thread(server: FastMCP[Any]) -> tuple[str, uvicorn.Server]:
    port = free_port()
    config = uvicorn.Config(server.http_app(path="/mcp"), host="127.0.0.1", port=port, log_level="critical")
    runner = uvicorn.Server(config)
    threading.Thread(target=runner.run, daemon=True).start()
    while not runner.started:
        time.sleep(0.02)
    return f"http://127.0.0.1:{port}/mcp", runner


@dataclass
class Tally:
    sent: dict[str, str] = field(default_factory=dict)
    answered: int = 0
    dead: int = 0
    sessions: int = 0


async def run_config(config: str, url: str, calls: int, concurrency: int, dead_after: int, tag: str) -> Tally:
    tally = Tally()
    left = calls
    while left > 0:
        tally.sessions += 1
        in_a_row = 0
        dead = False
        try:
            async with mcp.Client(url) as client:
                view: Any = None
                if config != "stock":
                    view = ToolCache(MemoryStore(), CacheSettings(trusted=config == "trusted")).wrap(
                        client, server_id=f"bench-{tag}"
                    )

                async def caller(client: mcp.Client, view: Any) -> None:
                    nonlocal left, in_a_row, dead
                    while left > 0 and not dead:
                        left -= 1
                        tool = TOOLS[left % len(TOOLS)]
                        call_id = f"{tag}-{left}"
                        tally.sent[call_id] = tool
                        try:
                            if view is not None:
                                await view.call(tool, {"call": call_id})
                            else:
                                await client.call_tool(tool, {"call": call_id})
                            in_a_row = 0
                            tally.answered += 1
                        except (MCPError, anyio.ClosedResourceError, anyio.BrokenResourceError):
                            in_a_row += 1
                            dead = dead or in_a_row >= dead_after

                async with anyio.create_task_group() as tg:
                    for _ in range(concurrency):
                        tg.start_soon(caller, client, view)
        except Exception:
            dead = True  # the client raised the transport's error on its way out
        tally.dead += dead
    return tally


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000, help="calls per configuration and round")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--rate", type=float, default=0.1, help="share of requests lost")
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dead-after", type=int, default=5, help="failures in a row that count a session dead")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    args = parser.parse_args()
    logging.getLogger("mcpcache").setLevel(logging.ERROR)  # the dropped-notification warnings, hundreds of them
    runs: Counter[str] = Counter()
    url, runner = serve_in_thread(build_server(runs))
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    relay = Relay("127.0.0.1", port)
    print(f"mcpcache from {Path(mcpcache.__file__).parent}; {args.calls} calls, rate {args.rate}, seed {args.seed}")
    try:
        async with relay.running() as base:
            for round_ in range(args.rounds):
                for config in args.configs.split(","):
                    relay.chaos(args.rate, args.seed + round_)
                    lost_before = len(relay.lost)
                    started = time.perf_counter()
                    tally = await run_config(
                        config, f"{base}/mcp", args.calls, args.concurrency, args.dead_after, f"{config}{round_}"
                    )
                    relay.chaos(0, 0)
                    seconds = time.perf_counter() - started
                    ran = {tool: Counter(runs[c] for c, t in tally.sent.items() if t == tool) for tool in TOOLS}
                    twice = sum(n for k, n in ran["write"].items() if k >= 2)
                    print(
                        f"round {round_} {config:8s} calls={len(tally.sent)} lost={len(relay.lost) - lost_before} "
                        f"failed={len(tally.sent) - tally.answered} dead_sessions={tally.dead} "
                        f"write_ran_twice_or_more={twice} "
                        f"runs_per_call={ {t: dict(sorted(c.items())) for t, c in ran.items()} } seconds={seconds:.1f}"
                    )
    finally:
        runner.should_exit = True


if __name__ == "__main__":
    anyio.run(main)
