"""One configuration's client and server, in a process of its own, driven one operation at a time.

`mcpcache bench` starts one worker process per configuration (`run_worker`) and keeps them all alive, so no
configuration's client warms another's caches and each has its own peak memory, yet the runner can
interleave them: each round it asks every worker for one read, in shuffled order, so noise on the machine
hits every configuration alike.

Workers, and the HTTP demo servers (`run_server`: the `mcpcache demo-server` command, run in-process), are
forked from a multiprocessing fork server that imported the libraries once, so starting fourteen processes
does not mean importing them fourteen times. Over stdio the client transport spawns
`python -m mcpcache demo-server` itself, as a user's client would.

A worker serves the configuration's own copy of the notebooks, lists the tools and reads a small notebook
once to warm both ends, then says it is ready and answers commands, one dict at a time over a pipe:

- `{"cmd": "begin", "notebook": N}`: start counting server CPU and cache statistics for N;
- `{"cmd": "read", "notebook": N}` / `{"cmd": "edit", "notebook": N}`: one timed operation, its bytes;
- `{"cmd": "end", "notebook": N}`: N's server CPU, the client's peak RSS so far, cache statistics;
- `{"cmd": "quit"}`: close and exit.

A failure is sent back as `{"error": ...}`, and the worker exits.

Only the call itself is timed; waiting for the next command is not. Every message is counted at the
client's transport and the server's CPU time is read from /proc.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp
import mcp_types as mt
from mcp.client import CacheConfig
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from mcpcache.bench.configs import BY_KEY, Config
from mcpcache.processes import accepts
from mcpcache.wire_count import CountingTransport, WireLog

HTTP_MAX_EVENT_BYTES = 1024 * 1024 * 1024
"""The SDK's HTTP client refuses SSE events over 1 MB by default; a notebook read is many times that."""

WARM_UP_NOTEBOOK = "warm-up.ipynb"
PRELOAD = (
    "mcpcache.bench.worker",
    "mcpcache.wire_count",
    "mcpcache.client",
    "mcpcache.stores",
    "mcpcache.cli",
    "mcpcache.demo.server",
    "uvicorn",
    # The first tool call imports these lazily: jsonschema (to check an answer against its output schema)
    # alone takes seconds, as it compiles dozens of grammars at import.
    "jsonschema",
    "fastmcp.server.context",
    "griffe",
)
"""What the fork server imports once, for every worker and HTTP server forked from it."""


@dataclass(frozen=True)
class RunSpec:
    config: str
    directory: str
    """This configuration's own copies of the notebooks (the runs edit them), plus the warm-up one."""
    transport: str
    port: int = 0
    """HTTP: the port of the demo server the runner started for this configuration."""
    server_pid: int = 0


def _children() -> list[int]:
    pids: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            pids.extend(int(p) for p in (task / "children").read_text().split())
    return pids


def cpu_ns(pid: int) -> int | None:
    """Nanoseconds a live process has run on a CPU, all its threads (Linux schedstat: fine enough for one
    operation, where /proc/<pid>/stat counts in ticks of 10 ms); None where it cannot be read."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    for task in tasks:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a live process, from /proc (Linux)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_command(config: Config, directory: Path) -> list[str]:
    return [sys.executable, "-m", "mcpcache", "demo-server", "--dir", str(directory), *config.demo.flags()]


@contextlib.asynccontextmanager
async def _connect(spec: RunSpec, config: Config, log: WireLog, errlog: Any) -> AsyncIterator[tuple[mcp.Client, int]]:
    cache = CacheConfig() if config.client == "sdk-cache" else None
    if spec.transport == "stdio":
        command = _server_command(config, Path(spec.directory))
        params = mcp.StdioServerParameters(command=command[0], args=command[1:])
        async with mcp.Client(CountingTransport(stdio_client(params, errlog=errlog), log), cache=cache) as client:
            children = _children()
            yield client, children[0] if children else -1
        return
    deadline = time.monotonic() + 120
    while not accepts(spec.port):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the demo server did not listen on port {spec.port}")
        await anyio.sleep(0.05)
    transport = streamable_http_client(f"http://127.0.0.1:{spec.port}/mcp", max_sse_event_size=HTTP_MAX_EVENT_BYTES)
    async with mcp.Client(CountingTransport(transport, log), cache=cache) as client:
        yield client, spec.server_pid


def _text_of(result: mt.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, mt.TextContent))


async def _read(view: Any, cache: Any, name: str) -> tuple[mt.CallToolResult, str]:
    if cache is not None:
        call = await view.call("read_notebook", {"path": name})
        return call.result, call.outcome.status
    return await view.call_tool("read_notebook", {"path": name}), "full"


def _delta(before: dict[str, int] | None, after: dict[str, int]) -> dict[str, int]:
    return {key: value - (before or {}).get(key, 0) for key, value in after.items()}


def _operation(
    kind: str, status: str, elapsed: float, log: WireLog, mark: int, cpu: tuple[int | None, int | None]
) -> dict[str, Any]:
    before, after = cpu
    return {
        "op": kind,
        "status": status,
        "seconds": elapsed,
        "sent": log.total("sent", since=mark),
        "received": log.total("received", since=mark),
        "messages": len(log.since(mark)),
        # The server's CPU from the request's start to the reply's arrival (None: not readable here).
        "server_cpu_ms": None if before is None or after is None else (after - before) / 1e6,
    }


class Session:
    """The worker's state between commands."""

    def __init__(self, spec: RunSpec, view: Any, cache: Any, log: WireLog, server_pid: int) -> None:
        self.spec = spec
        self.view = view
        self.cache = cache
        self.log = log
        self.server_pid = server_pid
        self.edits = 0
        self.started: dict[str, tuple[float | None, dict[str, int] | None]] = {}

    def server_cpu(self) -> int | None:
        return cpu_ns(self.server_pid) if self.server_pid > 0 else None

    async def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        kind, name = command["cmd"], command.get("notebook", "")
        if kind == "begin":
            cpu = cpu_seconds(self.server_pid) if self.server_pid > 0 else None
            self.started[name] = (cpu, self.cache.stats.as_dict() if self.cache is not None else None)
            return {"ok": True}
        if kind == "end":
            cpu_start, stats_before = self.started.pop(name)
            cpu_end = cpu_seconds(self.server_pid) if self.server_pid > 0 else None
            return {
                "notebook": name,
                "notebook_bytes": (Path(self.spec.directory) / name).stat().st_size,
                "server_cpu_s": None if cpu_start is None or cpu_end is None else cpu_end - cpu_start,
                "client_peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "cache_stats": _delta(stats_before, self.cache.stats.as_dict()) if self.cache is not None else None,
            }
        if kind == "edit":
            self.edits += 1
            mark = self.log.mark()
            cpu = self.server_cpu()
            started = time.perf_counter()
            arguments = {"path": name, "index": 0, "source": f"x = {self.edits}"}
            result = await self.view.call_tool("edit_cell", arguments)
            elapsed = time.perf_counter() - started
            if result.is_error:
                raise RuntimeError(f"edit of {name} failed: {_text_of(result)[:500]}")
            return _operation("edit", "", elapsed, self.log, mark, (cpu, self.server_cpu()))
        if kind == "read":
            mark = self.log.mark()
            cpu = self.server_cpu()
            started = time.perf_counter()
            result, status = await _read(self.view, self.cache, name)
            elapsed = time.perf_counter() - started
            spent = self.server_cpu()
            if result.is_error or not isinstance(result.structured_content, dict):
                raise RuntimeError(f"read of {name} failed: {_text_of(result)[:500]}")
            return _operation("read", status, elapsed, self.log, mark, (cpu, spent))
        raise ValueError(f"unknown command {kind!r}")


async def serve(spec: RunSpec, conn: Connection) -> None:
    config = BY_KEY[spec.config]
    work = Path(spec.directory)
    log = WireLog(deferred=True)
    rss_at_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with (work / f"{spec.config}.server.log").open("a") as errlog:
        async with _connect(spec, config, log, errlog) as (client, server_pid):
            # The SDK lists tools before it validates a tool's first answer; do it outside the timed reads.
            await client.list_tools()
            view: Any = client
            cache = None
            if config.client == "mcpcache":
                from mcpcache.client import CacheSettings, ToolCache
                from mcpcache.stores import SQLiteStore

                settings = CacheSettings(trusted=True, deltas=config.deltas)
                cache = ToolCache(SQLiteStore(work / f"{spec.config}.tools.db"), settings)
                view = cache.wrap(client, server_id="mcpcache-bench")
            await _read(view, cache, WARM_UP_NOTEBOOK)
            session = Session(spec, view, cache, log, server_pid)
            conn.send({"ready": True, "client_rss_at_start_kib": rss_at_start, "server_pid": server_pid})
            while True:
                command: dict[str, Any] = await anyio.to_thread.run_sync(conn.recv)
                if command["cmd"] == "quit":
                    break
                try:
                    conn.send(await session.handle(command))
                except Exception as exc:  # reported to the runner, which stops the run
                    conn.send({"error": f"{type(exc).__name__}: {exc}"})
                    raise
    conn.send({"bye": True})


def _to_log(path: str) -> None:
    """Send this process's stdout and stderr to a file (a forked child shares the runner's terminal)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def run_worker(spec: RunSpec, conn: Connection, log_path: str) -> None:
    """A worker process's whole life (the target the runner forks)."""
    _to_log(log_path)
    anyio.run(serve, spec, conn)


def run_server(config_key: str, directory: str, port: int, log_path: str) -> None:
    """An HTTP demo server process (what `mcpcache demo-server --dir D <flags> --http PORT` serves)."""
    _to_log(log_path)
    server = BY_KEY[config_key].demo.build(directory)
    server.run(transport="http", host="127.0.0.1", port=port, show_banner=False, host_origin_protection="auto")
