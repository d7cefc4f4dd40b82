"""One configuration's benchmark runs, in a process of its own.

`mcpcache bench` starts `python -m mcpcache.bench.worker SPEC.json` once per configuration, so no
configuration's client warms another's caches and each has its own peak memory. The worker starts the
demo server on the configuration's own copy of the notebooks (stdio: the client transport spawns it;
HTTP: the worker does, on a free loopback port), reads a small notebook once to warm both ends, then runs
the scenario on each notebook from the smallest up: its peak RSS after a notebook is that notebook's
peak. Every message is counted at the client's transport, the server's CPU time is read from /proc, and
the measurements go to the JSON file the spec names.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp
import mcp_types as mt
from mcp.client import CacheConfig
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from mcpcache.bench.common import accepts, free_port, stop_process
from mcpcache.bench.configs import BY_KEY, Config
from mcpcache.bench.wire import CountingTransport, WireLog

HTTP_MAX_EVENT_BYTES = 1024 * 1024 * 1024
"""The SDK's HTTP client refuses SSE events over 1 MB by default; a notebook read is many times that."""


WARM_UP_NOTEBOOK = "warm-up.ipynb"


@dataclass(frozen=True)
class RunSpec:
    config: str
    directory: str
    """This configuration's own copies of the notebooks (the runs edit them), plus the warm-up one."""
    notebooks: list[str]
    """File names in `directory`, smallest first."""
    reads: int
    edit_every: int
    transport: str
    output: str


def _children() -> list[int]:
    pids: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            pids.extend(int(p) for p in (task / "children").read_text().split())
    return pids


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a live process, from /proc (Linux)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_command(config: Config, directory: Path) -> list[str]:
    return [sys.executable, "-m", "mcpcache", "demo-server", "--dir", str(directory), *config.server_flags]


@contextlib.asynccontextmanager
async def _connect(spec: RunSpec, config: Config, log: WireLog, errlog: Any) -> AsyncIterator[tuple[mcp.Client, int]]:
    command = _server_command(config, Path(spec.directory))
    cache = CacheConfig() if config.client == "sdk-cache" else None
    if spec.transport == "stdio":
        params = mcp.StdioServerParameters(command=command[0], args=command[1:])
        async with mcp.Client(CountingTransport(stdio_client(params, errlog=errlog), log), cache=cache) as client:
            children = _children()
            yield client, children[0] if children else -1
        return
    port = free_port()
    # Popen returns at once; only the teardown waits, when nothing else runs in this worker.
    process = subprocess.Popen([*command, "--http", str(port)], stdout=subprocess.DEVNULL, stderr=errlog)  # noqa: ASYNC220
    try:
        deadline = time.monotonic() + 30
        while not accepts(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the demo server did not start on port {port}")
            await anyio.sleep(0.05)
        transport = streamable_http_client(f"http://127.0.0.1:{port}/mcp", max_sse_event_size=HTTP_MAX_EVENT_BYTES)
        async with mcp.Client(CountingTransport(transport, log), cache=cache) as client:
            yield client, process.pid
    finally:
        stop_process(process)


def _text_of(result: mt.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, mt.TextContent))


async def _read(view: Any, cache: Any, name: str) -> tuple[mt.CallToolResult, str]:
    if cache is not None:
        call = await view.call("read_notebook", {"path": name})
        return call.result, call.outcome.status
    return await view.call_tool("read_notebook", {"path": name}), "full"


async def _scenario(
    spec: RunSpec, name: str, view: Any, cache: Any, log: WireLog, progress: bool
) -> list[dict[str, Any]]:
    """R reads of `name` with an edit every E reads: the operations measured."""
    operations: list[dict[str, Any]] = []
    edits = 0
    for index in range(spec.reads):
        if spec.edit_every and index and index % spec.edit_every == 0:
            edits += 1
            mark = log.mark()
            started = time.perf_counter()
            await view.call_tool("edit_cell", {"path": name, "index": 0, "source": f"x = {edits}"})
            operations.append(_operation("edit", "", time.perf_counter() - started, log, mark))
        mark = log.mark()
        started = time.perf_counter()
        result, status = await _read(view, cache, name)
        elapsed = time.perf_counter() - started
        if result.is_error or not isinstance(result.structured_content, dict):
            raise RuntimeError(f"read {index} of {name} failed: {_text_of(result)[:500]}")
        operations.append(_operation("read", status, elapsed, log, mark))
        if progress:
            print("progress", name, index + 1, flush=True)
    return operations


async def run(spec: RunSpec, progress: bool = False) -> dict[str, Any]:
    config = BY_KEY[spec.config]
    work = Path(spec.output).parent
    log = WireLog(deferred=True)
    rss_after_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    runs: list[dict[str, Any]] = []
    with (work / f"{spec.config}.server.log").open("w") as errlog:
        async with _connect(spec, config, log, errlog) as (client, server_pid):
            # The SDK lists tools before it validates a tool's first answer; do it outside the timed reads.
            await client.list_tools()
            view: Any = client
            cache = None
            if config.client == "mcpcache":
                from mcpcache.client import ToolCache
                from mcpcache.stores import SQLiteStore

                cache = ToolCache(SQLiteStore(work / f"{spec.config}.tools.db"), trusted=True)
                view = cache.wrap(client, server_id="mcpcache-bench")
            await _read(view, cache, WARM_UP_NOTEBOOK)
            for name in spec.notebooks:
                cpu_start = cpu_seconds(server_pid) if server_pid > 0 else None
                stats_before = cache.stats.as_dict() if cache is not None else None
                operations = await _scenario(spec, name, view, cache, log, progress)
                cpu_end = cpu_seconds(server_pid) if server_pid > 0 else None
                runs.append(
                    {
                        "notebook": name,
                        "notebook_bytes": (Path(spec.directory) / name).stat().st_size,
                        "operations": operations,
                        "server_cpu_s": None if cpu_start is None or cpu_end is None else cpu_end - cpu_start,
                        "client_peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                        "cache_stats": _delta(stats_before, cache.stats.as_dict()) if cache is not None else None,
                    }
                )
    return {
        "spec": asdict(spec),
        "config": spec.config,
        "client_rss_after_imports_kib": rss_after_imports,
        "runs": runs,
    }


def _delta(before: dict[str, int] | None, after: dict[str, int]) -> dict[str, int]:
    return {key: value - (before or {}).get(key, 0) for key, value in after.items()}


def _operation(kind: str, status: str, elapsed: float, log: WireLog, mark: int) -> dict[str, Any]:
    return {
        "op": kind,
        "status": status,
        "seconds": elapsed,
        "sent": log.total("sent", since=mark),
        "received": log.total("received", since=mark),
        "messages": len(log.since(mark)),
    }


def main() -> None:
    spec = RunSpec(**json.loads(Path(sys.argv[1]).read_text()))
    result = anyio.run(run, spec, "--progress" in sys.argv[2:])
    Path(spec.output).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
