"""The proxy-and-gateway scenario of `mcpcache bench --full`: a notebook read direct, through `mcpcache proxy`,
through `mcpcache gateway`, and through both, side by side.

The upstream is the demo server over streamable HTTP on 127.0.0.1, as users have it (`--no-revalidation`:
a server that never heard of mcpcache) or with mcpcache (ttl 0: every read revalidates). Configurations:

- `direct`: a stock `mcp.Client` reads from the server without mcpcache (the baseline: every read is full);
- `direct-mcpcache`: client and server both with mcpcache (what changing both sides gives);
- `proxy`: a stock host talks stdio to `mcpcache proxy`, which revalidates with the server with mcpcache;
- `gateway`: an mcpcache client reads through `mcpcache gateway --tool read_notebook=0` in front of the
  server without mcpcache (the upstream runs, the gateway answers not-modified);
- `proxy+gateway`: a stock host, `mcpcache proxy`, `mcpcache gateway`, the server without mcpcache: neither
  the host nor the server changed.

Every HTTP hop goes through a counting relay (mcpcache.bench.relay), so each link's JSON-RPC message bytes
are counted on the wire; the host's own link is counted at its transport (mcpcache.wire_count). The link
that would cross a network in a real deployment is named per configuration: the proxy sits by the host,
the gateway by the server. One read of each configuration per round, in a shuffled order, after one
warm-up read each; time ratios are taken per round against `direct`.
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread
import mcp
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from mcpcache.bench.common import percentile
from mcpcache.bench.relay import Traffic, counting_relay
from mcpcache.processes import free_port, stop_process, wait_until_listening
from mcpcache.wire_count import CountingTransport, WireLog

NOTEBOOK = "big.ipynb"
MAX_EVENT_BYTES = 1024 * 1024 * 1024
"""The SDK's HTTP client refuses SSE events over 1 MiB by default; a 5 MB notebook's answer is ten times that."""
START_WITHIN_S = 120.0

ServerKind = Literal["plain", "mcpcache"]
SERVER_OPTIONS: dict[ServerKind, tuple[str, ...]] = {
    "plain": ("--no-revalidation",),
    "mcpcache": ("--ttl-ms", "0"),
}


@dataclass(frozen=True)
class Route:
    """How one configuration reaches the demo server."""

    name: str
    client: Literal["stock", "mcpcache"]
    proxy: bool
    gateway: bool
    server: ServerKind
    network: str
    """The link that would cross a network in a real deployment (a key of the counted links)."""
    note: str


ROUTES: tuple[Route, ...] = (
    Route("direct", "stock", False, False, "plain", "client", "stock client, server without mcpcache"),
    Route("direct-mcpcache", "mcpcache", False, False, "mcpcache", "client", "both sides with mcpcache"),
    Route("proxy", "stock", True, False, "mcpcache", "server", "stock host -> proxy -> server with mcpcache"),
    Route("gateway", "mcpcache", False, True, "plain", "client", "mcpcache client -> gateway -> plain server"),
    Route("proxy+gateway", "stock", True, True, "plain", "gateway", "stock host -> proxy -> gateway -> plain server"),
)


@contextlib.contextmanager
def demo_servers(folder: Path, servers: Mapping[str, Sequence[str]]) -> Iterator[dict[str, int]]:
    """One `mcpcache demo-server --http` per entry (name -> its options) on free ports; stopped by PID."""
    started: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for name, options in servers.items():
            port = free_port()
            command = [sys.executable, "-m", "mcpcache", "demo-server", "--dir", str(folder), *options]
            started[name] = (_quiet([*command, "--http", str(port)]), port)
        for name, (process, port) in started.items():
            wait_until_listening(process, port, START_WITHIN_S, f"demo server ({name})")
        yield {name: port for name, (_, port) in started.items()}
    finally:
        for process, _ in started.values():
            stop_process(process)


TAGS_ONLY = ("--tool", "read_notebook=0")
"""The gateway stamps tags on `read_notebook` with ttl 0: every call reaches upstream, a match is not-modified."""


@contextlib.asynccontextmanager
async def gateway(upstream_url: str, *options: str) -> AsyncIterator[int]:
    """`mcpcache gateway --upstream URL OPTIONS` (default TAGS_ONLY) on a free port; yields the port, stopped by PID."""
    port = free_port()
    command = [sys.executable, "-m", "mcpcache", "gateway", "--upstream", upstream_url, *(options or TAGS_ONLY)]
    process = _quiet([*command, "--port", str(port)])
    try:
        # In a thread: the upstream may be a relay served by this very event loop.
        await anyio.to_thread.run_sync(wait_until_listening, process, port, START_WITHIN_S, "mcpcache gateway")
        yield port
    finally:
        stop_process(process)


def _quiet(command: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextlib.asynccontextmanager
async def host(url: str, log: WireLog, *, through_proxy: bool, store: Path) -> AsyncIterator[mcp.Client]:
    """A stock `mcp.Client` reading `url`: directly over HTTP, or over stdio through `mcpcache proxy --url`."""
    if through_proxy:
        args = ["-m", "mcpcache", "proxy", "--quiet", "--store", str(store), "--url", url]
        params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))
        # The proxy's log goes nowhere (it is --quiet); the SDK wants a file for the child's stderr.
        with open(os.devnull, "w") as quiet:  # noqa: ASYNC230 - opening /dev/null does not block
            async with mcp.Client(CountingTransport(stdio_client(params, quiet), log), mode="legacy") as client:
                yield client
    else:
        transport = streamable_http_client(url, max_sse_event_size=MAX_EVENT_BYTES)
        async with mcp.Client(CountingTransport(transport, log), mode="legacy") as client:
            yield client


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median and the 25th-75th percentile spread."""
    return {"median": statistics.median(values), "p25": percentile(values, 0.25), "p75": percentile(values, 0.75)}


@dataclass
class _Reader:
    route: Route
    client: Any
    log: WireLog
    relays: dict[str, Traffic]
    seconds: list[float] = field(default_factory=list)
    links: dict[str, list[int]] = field(default_factory=dict)

    async def read(self) -> dict[str, int]:
        """One read; the message bytes it moved on each counted link."""
        mark, before = self.log.mark(), {name: t.snapshot() for name, t in self.relays.items()}
        started = time.perf_counter()
        if self.route.client == "mcpcache":
            result = (await self.client.call("read_notebook", {"path": NOTEBOOK})).result
        else:
            result = await self.client.call_tool("read_notebook", {"path": NOTEBOOK})
        elapsed = time.perf_counter() - started
        if result.is_error:
            raise RuntimeError(f"{self.route.name}: {result.content}")
        self.seconds.append(elapsed)
        moved = {"client": self.log.total(since=mark)}
        moved |= {name: t.since(before[name]).messages() for name, t in self.relays.items()}
        return moved


async def _connect(stack: contextlib.AsyncExitStack, route: Route, server_ports: dict[str, int], work: Path) -> _Reader:
    relays: dict[str, Traffic] = {}
    port, relays["server"] = await stack.enter_async_context(counting_relay(server_ports[route.server]))
    url = f"http://127.0.0.1:{port}/mcp"
    if route.gateway:
        port = await stack.enter_async_context(gateway(url))
        if route.proxy:  # the proxy's link to the gateway is counted too
            port, relays["gateway"] = await stack.enter_async_context(counting_relay(port))
        url = f"http://127.0.0.1:{port}/mcp"
    log = WireLog(deferred=True)
    store = work / f"{route.name}.proxy.db"
    client: Any = await stack.enter_async_context(host(url, log, through_proxy=route.proxy, store=store))
    if route.client == "mcpcache":
        from mcpcache.client import ToolCache
        from mcpcache.stores import MemoryStore

        client = ToolCache(MemoryStore()).wrap(client, server_id=url)
    return _Reader(route, client, log, relays)


async def run(size: int, rounds: int, seed: int = 7, routes: Sequence[Route] = ROUTES) -> dict[str, Any]:
    """Every route on one generated notebook of `size` bytes, `rounds` interleaved rounds after a warm-up."""
    from mcpcache.demo.notebooks import generate_notebook_of_size

    rng = random.Random(seed)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="mcpcache-bench-hops-") as tmp:
        work = Path(tmp)
        generate_notebook_of_size(work / NOTEBOOK, size, seed=seed)
        notebook_bytes = (work / NOTEBOOK).stat().st_size
        kinds = {route.server for route in routes}
        with demo_servers(work, {kind: SERVER_OPTIONS[kind] for kind in kinds}) as ports:
            async with contextlib.AsyncExitStack() as stack:
                readers = [await _connect(stack, route, ports, work) for route in routes]
                for reader in readers:
                    await reader.read()  # the warm-up: connections, tool lists, the caches filled
                    reader.seconds.clear()
                for _ in range(rounds):
                    for reader in rng.sample(readers, len(readers)):
                        for link, moved in (await reader.read()).items():
                            reader.links.setdefault(link, []).append(moved)
    return summarize(readers, notebook_bytes, rounds, load_before)


def summarize(
    readers: Sequence[_Reader], notebook_bytes: int, rounds: int, load_before: tuple[float, float, float]
) -> dict[str, Any]:
    base = readers[0].seconds
    rows = []
    for reader in readers:
        ratios = [mine / theirs for mine, theirs in zip(reader.seconds, base, strict=True)]
        links = {link: statistics.median(values) for link, values in reader.links.items()}
        rows.append(
            {
                "config": reader.route.name,
                "note": reader.route.note,
                "median_ms": statistics.median(reader.seconds) * 1000,
                "p95_ms": percentile(reader.seconds, 0.95) * 1000,
                "time_vs_direct": spread(ratios),
                "bytes_by_link": links,
                "network_link": reader.route.network,
                "network_bytes": links[reader.route.network],
                "seconds": reader.seconds,
            }
        )
    return {
        "notebook_bytes": notebook_bytes,
        "rounds": rounds,
        "transport": "streamable HTTP (127.0.0.1); host to proxy over stdio",
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "rows": rows,
    }
