"""The proxy's closing line (`closing; cache totals: ...`) reaches the host's log however the host ends it.

A stock MCP SDK host closes the proxy's stdin, waits 2 s, then sends SIGTERM (and SIGKILL 2 s later). The
proxy printed its totals only after it had closed its own upstream, which the SDK lets take 2 s too, and
SIGTERM killed it outright: with an upstream slow to go, the totals never printed. Here the upstream
lingers after its stdin closes and ignores SIGTERM, so closing it takes the proxy 4 s: the totals must
come at the stdin's end, before the upstream is closed, and on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

import anyio
import anyio.to_thread
import mcp
import pytest
from mcp.client.stdio import stdio_client

from .hosts import PYTHON, proxy_args

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LINGERING = textwrap.dedent(
    """
    import signal, time
    from contextlib import asynccontextmanager
    from fastmcp import FastMCP

    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    @asynccontextmanager
    async def lifespan(server):
        yield
        time.sleep(30)  # slow to go once its stdin is closed; only SIGKILL ends it sooner

    server = FastMCP("lingering", lifespan=lifespan)

    @server.tool
    def echo(text: str) -> str:
        return text

    server.run(show_banner=False)
    """
)


def _host(tmp_path: Path) -> mcp.StdioServerParameters:
    script = tmp_path / "lingering.py"
    script.write_text(LINGERING)
    args = proxy_args("--store", str(tmp_path / "proxy.db"), upstream=[PYTHON, str(script)])
    return mcp.StdioServerParameters(command=PYTHON, args=args, env=dict(os.environ))


def _proxy_pid(store: Path) -> int:
    """The proxy this test's host started (a child of this process naming the test's store)."""
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        for pid in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"proxy" in cmdline and str(store).encode() in cmdline:
                return int(pid)
    raise AssertionError("the proxy process was not found")


def _appears(log: Path, text: str, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while text not in log.read_text():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def _two_calls(client: mcp.Client) -> None:
    for text in ("a", "b"):
        result = await client.call_tool("echo", {"text": text})
        assert not result.is_error


async def test_a_stock_sdk_host_that_closes_the_proxy_gets_its_totals(tmp_path: Path) -> None:
    log = tmp_path / "proxy.log"
    with log.open("w") as errlog:
        async with mcp.Client(stdio_client(_host(tmp_path), errlog=errlog), mode="legacy") as client:
            await _two_calls(client)
    text = log.read_text()
    assert "mcpcache proxy: closing; cache totals: calls 2" in text, text
    # The upstream stamps nothing, so nothing is stored: said on every call, and once what would stamp it.
    assert text.count("not stored: the answer has no cache block") == 2, text
    assert text.count("mcpcache gateway") == 1, text


async def test_a_host_that_sends_sigterm_gets_the_totals(tmp_path: Path) -> None:
    log = tmp_path / "proxy.log"
    with log.open("w") as errlog:
        async with mcp.Client(stdio_client(_host(tmp_path), errlog=errlog), mode="legacy") as client:
            await _two_calls(client)
            os.kill(_proxy_pid(tmp_path / "proxy.db"), signal.SIGTERM)
            # The closing line, while the host still holds the connection open.
            assert await anyio.to_thread.run_sync(_appears, log, "closing; cache totals", 60.0), log.read_text()
    text = log.read_text()
    assert "mcpcache proxy: closing; cache totals: calls 2" in text, text
    assert "Traceback" not in text, text
