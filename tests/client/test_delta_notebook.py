"""The case deltas are for, end to end: a ToolCache client reads the demo server's 5 MB notebook over
streamable HTTP, edits one cell through the cache, and reads again. The second read is the edited notebook,
equal to a stock client's full read, and takes at most 4 KiB from the server (the full answer is about
9.7 MB: the notebook as JSON text and again as structured content).

The server is `mcpcache demo-server --http` in its own process; bytes are counted at the client's transport
(`mcpcache.wire_count`: each JSON-RPC message as serialised, HTTP and SSE framing left out)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import mcp
import pytest
from mcp.client.streamable_http import streamable_http_client
from support.transports import http_servers

from mcpcache.bench.worker import HTTP_MAX_EVENT_BYTES
from mcpcache.client import CacheSettings, ToolCache
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.stores import SQLiteStore
from mcpcache.wire_count import CountingTransport, WireLog

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NOTEBOOK = "notebook-5MB.ipynb"
READ = {"path": NOTEBOOK}
AT_MOST = 4096


@pytest.fixture(scope="module")
def demo_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The demo server over HTTP, with raw-value tags (its default) and with a validator, each on its own
    copy of the 5 MB notebook the benchmark reads (seed 42)."""
    modes = {"raw-value tags": [], "validator": ["--validator"]}
    commands = []
    for name, flags in modes.items():
        folder = tmp_path_factory.mktemp(name.replace(" ", "-"))
        generate_notebook_of_size(folder / NOTEBOOK, 5_000_000, seed=42)
        commands.append([sys.executable, "-m", "mcpcache", "demo-server", "--dir", str(folder), *flags, "--http"])
    log_path = tmp_path_factory.mktemp("logs") / "demo-servers.log"
    with log_path.open("wb") as log, http_servers(commands, log=log) as urls:
        yield dict(zip(modes, urls, strict=True))


@pytest.mark.parametrize("mode", ["raw-value tags", "validator"])
async def test_a_one_cell_edit_of_the_5_mb_notebook_is_read_back_in_a_few_hundred_bytes(
    demo_urls: dict[str, str], mode: str, tmp_path: Path
) -> None:
    url = demo_urls[mode]
    log = WireLog()
    cache = ToolCache(SQLiteStore(tmp_path / "tools.db"), CacheSettings(trusted=True))
    transport = CountingTransport(streamable_http_client(url, max_sse_event_size=HTTP_MAX_EVENT_BYTES), log)
    async with mcp.Client(transport) as client:
        cached = cache.wrap(client, server_id=url)
        first = await cached.call("read_notebook", READ)
        assert first.outcome.status == "miss"
        full_bytes = log.total("received")
        cells = first.result.structured_content["cells"]  # type: ignore[index]
        assert len(cells) > 300

        source = cells[150]["source"] + "\nprint('edited through the cache')"
        edited = await cached.call("edit_cell", {"path": NOTEBOOK, "index": 150, "source": source})
        assert not edited.result.is_error

        mark = log.mark()
        after = await cached.call("read_notebook", READ)
        received, sent = log.total("received", since=mark), log.total("sent", since=mark)
    async with mcp.Client(streamable_http_client(url, max_sse_event_size=HTTP_MAX_EVENT_BYTES)) as stock:
        expected = await stock.call_tool("read_notebook", READ)

    print(f"\n[{mode}] full read: {full_bytes:,} B from the server; after the edit: {received:,} B from, {sent:,} B to")
    assert after.outcome.status == "patched", after.outcome.reason
    assert after.result.structured_content == expected.structured_content
    assert after.result.content == expected.content
    assert after.result.structured_content["cells"][150]["source"] == source  # type: ignore[index]
    assert full_bytes > 9_000_000
    assert received <= AT_MOST
    assert (cache.stats.patched, cache.stats.deltas_unused) == (1, 0)
