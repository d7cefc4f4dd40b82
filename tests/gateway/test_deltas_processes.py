"""The done criterion, with every part real and apart: `mcpcache demo-server --no-revalidation` serving a
~5 MB notebook over streamable HTTP, two `mcpcache gateway` processes in front of it sharing one
redis-server, and a caller over HTTP that asks for deltas and applies them.

Read the notebook, edit one cell, read again: the second read is a delta of at most 4 KiB on the wire, and
applying it gives exactly a full read. The base may have been sent by one replica and the delta by the other.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastmcp
import pytest
from fastmcp.client.transports import StreamableHttpTransport

from mcpcache.bench.wire import CountingFastMCPTransport
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.gateway.history import HISTORY_GROUP
from mcpcache.processes import free_port, stop_process, wait_until_listening
from mcpcache.stores import RedisStore
from mcpcache.wire_count import WireLog

from .deltas_support import ARGS, NOTEBOOK, READ, asking, delta_of, edit, patched, same_answer, tag_of

pytestmark = [pytest.mark.anyio, pytest.mark.redis, pytest.mark.slow]

TOKEN = "alice-" + "a" * 24
HISTORY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Replicas:
    gateways: tuple[str, str]
    redis_url: str
    namespace: str


def config(path: Path, upstream: str, redis_url: str, namespace: str) -> Path:
    path.write_text(
        f"""[store]
redis = "{redis_url}"
namespace = "{namespace}"
delta_history_bytes = {HISTORY_BYTES}

[auth]
kind = "static"

[[auth.tokens]]
token = "{TOKEN}"
client_id = "alice"

[upstreams.notebooks]
url = "{upstream}"

[upstreams.notebooks.tools.read_notebook]
ttl_ms = 0
kind = "notebook.read"
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module")
def replicas(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    folder = tmp_path_factory.mktemp("delta-replicas")
    generate_notebook_of_size(folder / NOTEBOOK, 5_000_000, seed=7)
    namespace = "gw-delta-" + secrets.token_hex(4)
    started: list[subprocess.Popen[bytes]] = []
    with (folder / "processes.log").open("wb") as log:
        try:
            demo_port = free_port()
            demo = [sys.executable, "-m", "mcpcache", "demo-server", "--dir", str(folder), "--no-revalidation"]
            started.append(
                subprocess.Popen([*demo, "--http", str(demo_port)], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            )
            upstream = f"http://127.0.0.1:{demo_port}/mcp"
            toml = config(folder / "gateway.toml", upstream, redis_url, namespace)
            # The upstream first: a gateway that cannot reach it at start exits (a loaded machine once made
            # the demo server slower to listen than the replicas' first look at it).
            wait_until_listening(started[0], demo_port, 120.0, "mcpcache demo-server")
            ports = [free_port(), free_port()]
            for port in ports:
                command = [sys.executable, "-m", "mcpcache", "gateway", "--config", str(toml), "--port", str(port)]
                started.append(subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log))
            for process, port in zip(started[1:], ports, strict=True):
                wait_until_listening(process, port, 120.0, "mcpcache gateway")
            one, two = (f"http://127.0.0.1:{port}/mcp" for port in ports)
            yield Replicas((one, two), redis_url, namespace)
        finally:
            for process in started:
                stop_process(process)


@asynccontextmanager
async def caller(url: str, log: WireLog | None = None) -> AsyncIterator[fastmcp.Client[Any]]:
    """A caller over streamable HTTP with alice's token, its messages counted at the transport."""
    transport = StreamableHttpTransport(url, auth=TOKEN, max_sse_event_size=None)
    async with fastmcp.Client(CountingFastMCPTransport(transport, log or WireLog()), timeout=120) as client:
        yield client


async def test_a_one_cell_edit_of_a_five_megabyte_notebook_is_a_delta_of_at_most_4_kib(replicas: Replicas) -> None:
    log = WireLog()
    async with caller(replicas.gateways[0], log) as client:
        start = log.mark()
        held = await client.call_tool_mcp(READ, ARGS)
        full_read = log.exchange("tools/call", since=start)[1].nbytes
        source = held.structured_content["cells"][40]["source"] + "\nprint('one cell edited')"
        await edit(client, 40, source)
        start = log.mark()
        reply = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
        delta_read = log.exchange("tools/call", since=start)[1].nbytes
        full = await client.call_tool_mcp(READ, ARGS)
    rebuilt = patched(held, reply)
    assert same_answer(rebuilt, full)
    assert rebuilt.structured_content["cells"][40]["source"] == source
    assert full_read > 9_000_000
    assert delta_read <= 4096, f"the read after the edit took {delta_read} bytes"
    async with RedisStore(replicas.redis_url, namespace=replicas.namespace) as store:
        usage = await store.usage(HISTORY_GROUP)
    assert 0 < usage.bytes <= HISTORY_BYTES
    print(f"\nfull read {full_read} B; read after a one-cell edit {delta_read} B; history {usage}")


async def test_a_base_sent_by_one_replica_gets_a_delta_from_the_other(replicas: Replicas) -> None:
    one, two = replicas.gateways
    async with caller(one) as first, caller(two) as second:
        held = await first.call_tool_mcp(READ, ARGS)
        await edit(first, 7, "print('edited through replica one')")
        reply = await second.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
        full = await second.call_tool_mcp(READ, ARGS)
    assert delta_of(reply) is not None
    assert same_answer(patched(held, reply), full)
