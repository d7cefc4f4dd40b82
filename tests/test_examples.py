"""Every file in examples/ runs as written, against real servers on free ports of 127.0.0.1.

Each example is started the way its opening comment says (a subprocess of this interpreter); the only
change is the port, given where the example takes one (an argument, `--port`, or $MCPCACHE_EXAMPLE_URL), and
the full path of `mcpcache` in the proxy's host configuration, which becomes this interpreter's `-m mcpcache`.
The default store goes to a temporary folder ($MCPCACHE_DIR), never the user's cache.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastmcp import Client as FastMCPClient
from fastmcp.client.transports import PythonStdioTransport, StdioTransport
from mcp import Client

from mcpcache import ToolCache
from mcpcache.processes import free_port, stop_process, wait_until_listening
from mcpcache.stores import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

pytestmark = pytest.mark.slow  # subprocesses: servers, a gateway, a proxy

Serving = tuple[Callable[[list[str]], None], int]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """This interpreter's environment, importing this tree, with `python` on PATH being this interpreter."""
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), environ.get("PATH", "")])
    environ["MCPCACHE_DIR"] = str(tmp_path / "cache")
    return environ


def run_example(name: str, args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """`python examples/NAME ARGS` in this process (as __main__, with its own sys.argv): the same code path,
    without paying an interpreter's start and the imports again on a loaded machine."""
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / name), *args])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    return capsys.readouterr().out


@pytest.fixture
def serving(env: dict[str, str], tmp_path: Path) -> Iterator[Serving]:
    """A free port, and a function that starts a server command on it; stopped by its PID after the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start(args: list[str]) -> None:
        process = subprocess.Popen(
            [sys.executable, *args], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        started.append(process)
        wait_until_listening(process, port, 90, " ".join(args))

    port = free_port()
    yield start, port
    for process in started:
        stop_process(process)


def test_client_example_reads_the_demo_notebook_three_times_and_says_what_each_read_cost(
    serving: Serving, env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    start, port = serving
    # The README's demo server, with a 15 s ttl where the README has 30 s (the example waits the ttl out):
    # that still holds the promised order on a loaded machine (with 5 s, the time to store the first read
    # once let the second one find it stale).
    start(["-m", "mcpcache", "demo-server", "--http", str(port), "--generate", "200", "--ttl-ms", "15000"])
    monkeypatch.setenv("MCPCACHE_DIR", env["MCPCACHE_DIR"])
    monkeypatch.setenv("MCPCACHE_EXAMPLE_URL", f"http://127.0.0.1:{port}/mcp")
    out = run_example("client.py", [], capsys, monkeypatch)
    lines = out.splitlines()
    assert lines[0].startswith("read 1: miss: the whole notebook came over the wire, because nothing was cached")
    assert "It is now cached" in lines[0]
    reads = [line for line in lines if line.startswith("read ")]
    # The order the README promises.
    assert [line.split(":")[1].strip() for line in reads] == ["miss", "fresh hit", "revalidated"], out
    assert "(waiting " in out
    assert all("MB not transferred" in line for line in reads[1:]), out
    assert lines[-1].startswith("in all: 3 reads")


def test_client_example_says_how_to_start_the_server_when_nothing_answers(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SystemExit) as exited:
        run_example("client.py", [f"http://127.0.0.1:{free_port()}/mcp"], capsys, monkeypatch)
    assert str(exited.value.code).endswith(
        "Start the demo server first: mcpcache demo-server --http 8765 --generate 200 --ttl-ms 30000"
    )


@pytest.mark.anyio
async def test_server_example_declares_its_tools_and_answers_a_cache_over_stdio(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("three small words")
    transport = PythonStdioTransport(str(EXAMPLES / "server.py"), args=["--dir", str(tmp_path)], env=env)
    async with FastMCPClient(transport) as client:
        declared = {
            tool.name: (tool.meta or {}).get("io.modelcontextprotocol/cache") for tool in await client.list_tools()
        }
        assert declared == {
            "read_file": {"ttlMs": 5000, "cacheScope": "private", "kind": "file.read"},
            "word_count": {"ttlMs": 86_400_000, "cacheScope": "public"},
            "write_file": None,
        }
        cached = ToolCache(MemoryStore()).wrap(client)
        first = await cached.call("read_file", {"path": "notes.txt"})
        assert first.outcome.status == "miss"
        assert first.outcome.stored
        again = await cached.call("read_file", {"path": "notes.txt"}, cache_mode="refresh")
        assert (
            again.result.data
            == first.result.data
            == {"kind": "file.read", "path": "notes.txt", "text": "three small words"}
        )
        refused = await client.call_tool("read_file", {"path": "../outside.txt"}, raise_on_error=False)
        assert refused.is_error


def test_references_example_shows_a_short_view_resolves_a_pointer_and_refuses_a_made_up_uri(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = run_example("references.py", [], capsys, monkeypatch)
    assert "the answer is 88,917 bytes; the model sees" in out
    assert "<elided list of 2000 items" in out
    assert "plot is called with data = 2,000 rows, resolved from mcp+cache://conv-42/" in out
    assert "a made-up reference is refused before the call:" in out
    assert "data_uri (unknown)" in out


@pytest.mark.anyio
async def test_gateway_example_stamps_the_plain_demo_server_and_answers_not_modified(
    serving: Serving,
) -> None:
    start, port = serving
    start(["-m", "mcpcache", "gateway", "--config", str(EXAMPLES / "gateway.toml"), "--port", str(port)])
    async with Client(f"http://127.0.0.1:{port}/mcp") as client:
        cached = ToolCache(MemoryStore()).wrap(client)
        first = await cached.call("read_notebook", {"path": "demo-50.ipynb"})
        second = await cached.call("read_notebook", {"path": "demo-50.ipynb"})
    assert (first.outcome.status, first.outcome.stored) == ("miss", True)
    assert second.outcome.status == "revalidated"
    assert second.outcome.bytes_saved > 100_000


@pytest.mark.anyio
async def test_proxy_example_is_a_host_configuration_whose_server_answers_through_the_cache(
    env: dict[str, str], tmp_path: Path
) -> None:
    config = json.loads((EXAMPLES / "mcp-servers.json").read_text())
    server = config["mcpServers"]["notebooks"]
    # A host runs `command` with `args`; here the full path of `mcpcache` the file asks for is this
    # interpreter's `-m mcpcache`, in both places, as its note says.
    placeholder = "/full/path/to/mcpcache"
    assert server["command"] == placeholder
    assert server["args"].count(placeholder) == 1
    assert "in both places" in config["//"]
    command = [sys.executable, "-m", "mcpcache"]
    args = [part for word in server["args"] for part in (command if word == placeholder else [word])]
    log = tmp_path / "proxy.log"
    transport = StdioTransport(command[0], [*command[1:], *args], env=env, cwd=str(tmp_path), log_file=log)
    async with FastMCPClient(transport) as client:  # a stock client, as a host is: it never sends a tag
        first = await client.call_tool("read_notebook", {"path": "demo-50.ipynb"})
        second = await client.call_tool("read_notebook", {"path": "demo-50.ipynb"})
    assert second.structured_content == first.structured_content
    lines = log.read_text()
    assert "mcpcache proxy: read_notebook: miss" in lines
    assert "mcpcache proxy: read_notebook: fresh_hit" in lines
