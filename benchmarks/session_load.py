"""Sessions under load: many concurrent tool calls over streamable HTTP, counting sessions that die.

A session is dead when it ends the run unable to answer: its last call failed (with the MCP SDK 2.3.0 alone,
a session whose transport failed once answers every later call with `Connection closed` or the transport's
`ReadError`). The driver counts calls, failed calls and dead sessions, and prints the first traceback of
each kind of failure.

Targets, all on 127.0.0.1, with a redis-server of the driver's own (every process it starts is stopped by PID):
- direct: a FastMCP server stamped by mcpcache (tools with ttl 0 and a tag, a 50 ms ttl, public with a
  200 ms ttl, and one never stamped), called by the client processes, whose `ToolCache`s share one Redis
  namespace;
- gateway: the same tools on a FastMCP server that never heard of mcpcache, behind two `mcpcache gateway`
  replicas sharing one Redis store, called by the same client processes (sessions alternate replicas);
- control: the direct server, called by stock clients without a cache (nothing of mcpcache in the client).

Each client process holds its share of the sessions, alternately a `fastmcp.Client` and an `mcp.Client`,
and runs `--concurrency` callers per session until the process has made its share of `--calls`, in one of
two patterns:
- steady: each caller calls, now and then (`--think`) pausing for up to 8 s;
- bursts: the session's callers make a few calls each at once, then the session pauses through the last
  quarter second before its httpx pool retires idle connections, which is when uvicorn's default
  keep-alive (the same 5 s) closes them: the pattern that meets the keep-alive race of
  mcpcache/client/transport_guard.py within a minute instead of once in some thousands of calls.

Run:  python benchmarks/session_load.py direct --calls 5000 --sessions 8
      python benchmarks/session_load.py gateway --calls 5000 --sessions 8 --pattern bursts
      python benchmarks/session_load.py control --calls 5000 --sessions 8 --pattern bursts
      python benchmarks/session_load.py direct --calls 5000 --sessions 8 --pattern bursts --untrusted
(`--untrusted`: the caches believe no annotation, so a call that meets the keep-alive race fails, once,
instead of being sent again: at most once, docs/client.md "Idempotent tools".)
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
import anyio.to_thread

from mcpcache.processes import RedisServer, free_port, stop_process, wait_until_listening

HERE = Path(__file__).resolve()
TOOLS = ("ttl0", "short", "public", "plain")
TTLS = {"ttl0": 0, "short": 50, "public": 200}
NAMES = 12
"""Distinct arguments per tool: enough for misses, few enough for hits, revalidations and single flight."""
THINK_MAX_S = 8.0
BURST_CALLS = 4
"""Calls each caller makes in a burst."""


# The servers ------------------------------------------------------------------------------------------


def build_server(stamped: bool) -> Any:
    import mcp_types as mt
    from fastmcp import FastMCP

    server: Any = FastMCP("session-load")
    read_only = mt.ToolAnnotations(read_only_hint=True)
    versions: dict[str, int] = {}

    async def answer(tool: str, name: str, delay_ms: int) -> dict[str, Any]:
        if delay_ms:
            await anyio.sleep(delay_ms / 1000)
        # A version that moves now and then, so revalidations meet both changed and unchanged answers.
        if random.random() < 0.05:
            versions[name] = versions.get(name, 0) + 1
        return {"kind": tool, "name": name, "version": versions.get(name, 0), "body": "x" * 256}

    for tool in TOOLS:

        async def body(name: str, delay_ms: int = 0, _tool: str = tool) -> dict[str, Any]:
            return await answer(_tool, name, delay_ms)

        server.tool(body, name=tool, annotations=read_only)

    if stamped:
        from mcpcache.server.fastmcp import install
        from mcpcache.server.policies import CachePolicy, ToolPolicies

        policies = {"ttl0": CachePolicy(ttl_ms=0), "short": CachePolicy(ttl_ms=TTLS["short"])}
        policies["public"] = CachePolicy(ttl_ms=TTLS["public"], scope="public")
        install(server, ToolPolicies(policies))
    return server


def serve(port: int, stamped: bool) -> None:
    # FastMCP's own way of serving over HTTP, with its defaults (uvicorn's 5 s keep-alive among them).
    build_server(stamped).run(transport="http", host="127.0.0.1", port=port, show_banner=False, log_level="warning")


def gateway_config(path: Path, upstream: str, redis_url: str, namespace: str) -> Path:
    public = 'scope = "public"\n'
    tools = "".join(
        f"[upstreams.up.tools.{tool}]\nttl_ms = {ttl}\n{public if tool == 'public' else ''}\n"
        for tool, ttl in TTLS.items()
    )
    text = f'[store]\nredis = "{redis_url}"\nnamespace = "{namespace}"\n\n[upstreams.up]\nurl = "{upstream}"\n\n'
    path.write_text(text + tools, encoding="utf-8")
    return path


# The client processes ---------------------------------------------------------------------------------


@dataclass
class SessionLog:
    name: str
    calls: int = 0
    failed: int = 0
    last_ok: bool = True
    first_failure_at: int | None = None
    kinds: Counter[str] = field(default_factory=Counter)


def kind_of(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "group(" + ",".join(kind_of(inner) for inner in exc.exceptions) + ")"
    text = str(exc).splitlines()[0][:80] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


@dataclass(frozen=True)
class WorkerArgs:
    urls: list[str]
    redis_url: str
    namespace: str
    sessions: int
    calls: int
    concurrency: int
    seed: int
    cached: bool
    pattern: str
    think: float
    trusted: bool = True


async def worker(args: WorkerArgs) -> dict[str, Any]:
    import fastmcp
    import httpx2
    import mcp
    from fastmcp.client.transports import StreamableHttpTransport

    from mcpcache.client import CacheSettings, ToolCache
    from mcpcache.stores import RedisStore

    rng = random.Random(args.seed)
    logs: list[SessionLog] = []
    tracebacks: dict[str, str] = {}
    budget = {"left": args.calls}
    expiry = httpx2.Limits().keepalive_expiry or 5.0

    def failed(log: SessionLog, what: str, exc: BaseException) -> None:
        log.failed += 1
        log.last_ok = False
        log.kinds[what] += 1
        if log.first_failure_at is None:
            log.first_failure_at = log.calls
        tracebacks.setdefault(what, "".join(traceback.format_exception(exc)))

    async with RedisStore(args.redis_url, namespace=args.namespace) as store:
        cache = ToolCache(store, CacheSettings(share_public=True, trusted=args.trusted), partition="load")

        async def one_session(index: int) -> None:
            url = args.urls[index % len(args.urls)]
            kind = "fastmcp" if index % 2 == 0 else "mcp"
            log = SessionLog(f"{args.seed}/{index}/{kind}")
            logs.append(log)
            client: Any = fastmcp.Client(StreamableHttpTransport(url)) if kind == "fastmcp" else mcp.Client(url)
            try:
                async with client:
                    view: Any = cache.wrap(client, server_id="session-load") if args.cached else None

                    async def call(tool: str, arguments: dict[str, Any]) -> Any:
                        if view is not None:
                            if kind == "fastmcp":
                                return (await view.call_mcp(tool, arguments)).result
                            return (await view.call(tool, arguments)).result
                        if kind == "fastmcp":
                            return await client.call_tool_mcp(tool, arguments)
                        return await client.call_tool(tool, arguments)

                    async def one_call() -> None:
                        budget["left"] -= 1
                        tool = rng.choice(TOOLS)
                        arguments = {"name": f"n{rng.randrange(NAMES)}", "delay_ms": rng.choice([0, 0, 0, 1, 5])}
                        log.calls += 1
                        try:
                            result = await call(tool, arguments)
                            if result.is_error:
                                raise RuntimeError(f"error result: {result.content}")
                            log.last_ok = True
                        except Exception as exc:
                            failed(log, kind_of(exc), exc)

                    async def steady_caller() -> None:
                        while budget["left"] > 0:
                            await one_call()
                            roll = rng.random()
                            if roll < args.think:
                                await anyio.sleep(rng.uniform(0, THINK_MAX_S))
                            elif roll < 0.2:
                                await anyio.sleep(rng.choice([0.001, 0.005]))

                    async def burst_caller() -> None:
                        for _ in range(BURST_CALLS):
                            if budget["left"] > 0:
                                await one_call()

                    if args.pattern == "steady":
                        async with anyio.create_task_group() as tg:
                            for _ in range(args.concurrency):
                                tg.start_soon(steady_caller)
                    else:
                        while budget["left"] > 0:
                            async with anyio.create_task_group() as tg:
                                for _ in range(args.concurrency):
                                    tg.start_soon(burst_caller)
                            await anyio.sleep(expiry - rng.uniform(0.03, 0.25))
                    # One more call decides whether the session is alive at the end.
                    try:
                        await call("plain", {"name": "probe"})
                        log.last_ok = True
                    except Exception as exc:
                        log.last_ok = False
                        log.kinds["final probe: " + kind_of(exc)] += 1
            except Exception as exc:
                # A transport that died takes its error out of `async with client` (both clients re-raise it).
                log.last_ok = False
                what = "on closing: " + kind_of(exc)
                log.kinds[what] += 1
                tracebacks.setdefault(what, "".join(traceback.format_exception(exc)))

        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        async with anyio.create_task_group() as tg:
            for index in range(args.sessions):
                tg.start_soon(one_session, index)
        return {
            "calls": sum(log.calls for log in logs),
            "failed": sum(log.failed for log in logs),
            "sessions": len(logs),
            "dead": [log.name for log in logs if not log.last_ok],
            "per_session": [
                {
                    "name": log.name,
                    "calls": log.calls,
                    "failed": log.failed,
                    "first_failure_at": log.first_failure_at,
                    "kinds": dict(log.kinds),
                }
                for log in logs
            ],
            "tracebacks": tracebacks,
            "store_failures": cache.stats.store_failures,
        }


# The driver -------------------------------------------------------------------------------------------


def start(command: list[str], log: TextIO | Any, **kwargs: Any) -> subprocess.Popen[Any]:
    return subprocess.Popen(command, stdout=log, stderr=log, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", choices=["direct", "gateway", "control"])
    parser.add_argument("--calls", type=int, default=5000, help="calls in all (split between the processes)")
    parser.add_argument("--sessions", type=int, default=8, help="sessions in all (split between the processes)")
    parser.add_argument("--concurrency", type=int, default=4, help="concurrent callers per session")
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--pattern", choices=["steady", "bursts"], default="steady")
    parser.add_argument("--think", type=float, default=0.02, help="steady: how often a caller pauses (up to 8 s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--untrusted",
        action="store_true",
        help="caches that do not believe the tools' read-only annotations: a call that loses its exchange "
        "(the keep-alive race) fails instead of being sent once more",
    )
    args = parser.parse_args()

    started: list[subprocess.Popen[Any]] = []
    folder = Path(tempfile.mkdtemp(prefix="session-load-"))
    began = time.monotonic()
    reports = []
    try:
        with RedisServer(_redis_binary()) as redis, (folder / "servers.log").open("wb") as log:
            port = free_port()
            stamped = args.target != "gateway"
            upstream = start([sys.executable, str(HERE), "_serve", str(port), "1" if stamped else "0"], log)
            started.append(upstream)
            wait_until_listening(upstream, port, 120, "the upstream")
            urls = [f"http://127.0.0.1:{port}/mcp"]
            if args.target == "gateway":
                config = gateway_config(folder / "gateway.toml", urls[0], redis.url, "load-gw")
                ports = [free_port(), free_port()]
                for gw_port in ports:
                    command = [sys.executable, "-m", "mcpcache", "gateway", "--config", str(config)]
                    started.append(start([*command, "--port", str(gw_port)], log, stdin=subprocess.DEVNULL))
                for process, gw_port in zip(started[1:], ports, strict=True):
                    wait_until_listening(process, gw_port, 120, "mcpcache gateway")
                urls = [f"http://127.0.0.1:{gw_port}/mcp" for gw_port in ports]
            workers = []
            for n in range(args.processes):
                spec = WorkerArgs(
                    urls,
                    redis.url,
                    "load-client",
                    args.sessions // args.processes,
                    args.calls // args.processes,
                    args.concurrency,
                    args.seed * 100 + n,
                    args.target != "control",
                    args.pattern,
                    args.think,
                    not args.untrusted,
                )
                command = [sys.executable, str(HERE), "_worker", json.dumps(spec.__dict__)]
                err = (folder / f"worker{n}.log").open("w")
                process = subprocess.Popen(
                    command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True
                )
                started.append(process)
                workers.append(process)
            for process in workers:
                assert process.stdout is not None
                if process.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"a worker did not start; see {folder}")
            for process in workers:
                assert process.stdin is not None
                process.stdin.write("go\n")
                process.stdin.flush()
            for process in workers:
                stdout, _ = process.communicate(timeout=3600)
                if process.returncode != 0:
                    raise RuntimeError(f"a worker failed; see {folder}")
                reports.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for process in reversed(started):
            stop_process(process)
    report(args, reports, time.monotonic() - began, folder)


def report(args: argparse.Namespace, reports: list[dict[str, Any]], seconds: float, folder: Path) -> None:
    calls = sum(r["calls"] for r in reports)
    failed = sum(r["failed"] for r in reports)
    dead = [name for r in reports for name in r["dead"]]
    sessions = sum(r["sessions"] for r in reports)
    label = f"{args.target}/{args.pattern}{'/untrusted' if args.untrusted else ''}"
    print(
        f"[{label}] calls={calls} sessions={sessions} dead_sessions={len(dead)} "
        f"failed_calls={failed} store_failures={[r['store_failures'] for r in reports]} seconds={seconds:.1f} "
        f"logs={folder}"
    )
    for r in reports:
        for s in r["per_session"]:
            if s["failed"] or s["kinds"]:
                print(
                    f"  session {s['name']}: calls={s['calls']} failed={s['failed']} "
                    f"first_failure_at={s['first_failure_at']} {s['kinds']}"
                )
    shown: set[str] = set()
    for r in reports:
        for what, text in r["tracebacks"].items():
            if what not in shown:
                shown.add(what)
                print(f"\n--- first {what}\n{text}")


def _redis_binary() -> str:
    import shutil

    return shutil.which("redis-server") or "/usr/bin/redis-server"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_serve":
        serve(int(sys.argv[2]), sys.argv[3] == "1")
    elif len(sys.argv) > 1 and sys.argv[1] == "_worker":
        result = anyio.run(worker, WorkerArgs(**json.loads(sys.argv[2])))
        print(json.dumps(result), flush=True)
    else:
        main()
