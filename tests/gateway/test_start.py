"""`mcpcache gateway` reaches every upstream before it serves: one that cannot start or answer stops it in one
line naming the upstream and its error, exit 2, before "serving" (it used to serve, and every call then
failed with `Unknown tool` while the cause was only in the log). A store that does not answer is said in one
line before "serving" (the gateway serves without it, or exits 2 when told to require it), then one line
per outage and one when it answers again, never a traceback (it used to print one of 81 lines per call).

Run as a user runs it: the real command in a subprocess. The stdio upstream that cannot start is the
example's mistake: a `python` that does not have the module (here a module nobody has).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import anyio
import mcp
import pytest
from support.redis_server import RedisServer, redis_server_binary

from mcpcache.processes import free_port, stop_process, wait_until_listening

from .conftest import served_in_thread
from .counting_server import build_counting_server

pytestmark = pytest.mark.slow  # subprocesses


def gateway(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpcache", "gateway", "--config", str(config), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=180,
    )


def assert_one_line(done: subprocess.CompletedProcess[str], *says: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "serving" not in done.stderr
    for text in says:
        assert text in done.stderr, done.stderr


def test_a_stdio_upstream_that_cannot_start_stops_the_gateway_in_one_line_with_its_error(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[upstreams.notebooks]\ncommand = ["{sys.executable}", "-m", "mcpcache_is_not_here", "demo-server"]\n'
        "[upstreams.notebooks.tools.read_notebook]\nttl_ms = 0\n"
    )
    done = gateway(config)
    assert_one_line(
        done,
        f"mcpcache gateway: upstream 'notebooks' ({sys.executable} -m mcpcache_is_not_here demo-server) ",
        "No module named mcpcache_is_not_here",
        f"give its interpreter by full path (mcpcache's is {sys.executable})",
    )


def test_an_http_upstream_that_does_not_answer_stops_the_gateway_in_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    config = tmp_path / "gateway.toml"
    config.write_text(f'[upstreams.api]\nurl = "{url}"\n')
    done = gateway(config)
    assert_one_line(done, f"mcpcache gateway: upstream 'api' ({url}) did not answer: ConnectError")


def test_a_stdio_upstream_that_starts_is_kept_and_its_stderr_comes_after_it_answered(tmp_path: Path) -> None:
    """The happy path: the upstream's own lines (held while it started) reach the gateway's stderr, and
    the process started to check it is the one that serves calls."""
    port = free_port()
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[upstreams.notebooks]\ncommand = ["{sys.executable}", "-m", "mcpcache", "demo-server", "--dir", '
        f'"{tmp_path}", "--no-revalidation", "--generate", "3"]\n'
    )
    log = tmp_path / "gateway.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "mcpcache", "gateway", "--config", str(config), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until_listening(process, port, 120, "mcpcache gateway")
        finally:
            stop_process(process)
    text = log.read_text()
    assert "mcpcache: wrote" in text, text  # the upstream's stderr, passed on
    assert text.index("mcpcache: wrote") < text.index("mcpcache gateway: serving"), text
    assert text.count("mcpcache: wrote") == 1, "the upstream was started twice"


def test_an_upstream_sent_the_callers_headers_is_left_to_the_first_caller(tmp_path: Path) -> None:
    """It may refuse anyone without a caller's credentials, so it is not asked at start (a down one then
    fails the calls that reach it, as before)."""
    port = free_port()
    config = tmp_path / "gateway.toml"
    config.write_text(f'[upstreams.api]\nurl = "http://127.0.0.1:{free_port()}/mcp"\nforward_headers = true\n')
    with (tmp_path / "gateway.log").open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "mcpcache", "gateway", "--config", str(config), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until_listening(process, port, 120, "mcpcache gateway")
        finally:
            stop_process(process)
    assert "mcpcache gateway: serving" in (tmp_path / "gateway.log").read_text()


# The store down: one line at start, one per outage and one when it is over, never a traceback -----------


def _gateway_args(upstream: str, redis_url: str, port: int, *more: str) -> list[str]:
    tool = "numbered_public=60000:public"  # kept in the store: every call asks it
    command = [sys.executable, "-m", "mcpcache", "gateway", "--upstream", upstream, "--tool", tool]
    return [*command, "--redis", redis_url, "--port", str(port), *more]


async def _calls(url: str, names: list[str]) -> None:
    async with mcp.Client(url) as client:
        for name in names:
            result = await client.call_tool("numbered_public", {"name": name})
            assert not result.is_error, result  # the store is down: a miss, never a failed call


def _wait_for(log: Path, text: str, count: int) -> str:
    deadline = time.monotonic() + 60  # generous: the gateway asks a store that is down every 5 s
    while (said := log.read_text()).count(text) < count:
        assert time.monotonic() < deadline, said
        time.sleep(0.2)
    return said


@pytest.mark.redis
def test_a_store_that_is_down_is_one_line_at_start_one_per_outage_and_never_a_traceback(tmp_path: Path) -> None:
    redis = RedisServer(redis_server_binary())  # its port, with nothing listening there yet
    port = free_port()
    log = tmp_path / "gateway.log"
    with served_in_thread(build_counting_server()) as upstream, log.open("w") as out:
        process = subprocess.Popen(_gateway_args(upstream, redis.url, port), stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            wait_until_listening(process, port, 120, "mcpcache gateway")
            anyio.run(_calls, url, ["a", "b", "a", "c", "a"])
            redis.start()
            _wait_for(log, "answers again", 1)
            anyio.run(_calls, url, ["a", "b", "a"])
            redis.kill()
            anyio.run(_calls, url, ["a", "d", "a"])
            _wait_for(log, "is unreachable", 2)
        finally:
            stop_process(process)
            redis.stop()
    said = log.read_text()
    assert "Traceback" not in said, said
    lines = [line for line in said.splitlines() if "store" in line]
    down = f"mcpcache gateway: the store {redis.url} is unreachable (ConnectionError: Error 111 connecting to"
    assert said.index(down) < said.index("mcpcache gateway: serving"), said  # said before it serves
    assert [line.split(" (")[0] for line in lines] == [
        f"mcpcache gateway: the store {redis.url} is unreachable",
        f"  store: {redis.url}; auth: none",
        f"mcpcache gateway: the store {redis.url} answers again",
        f"mcpcache gateway: the store {redis.url} is unreachable",
    ], said


def test_a_required_store_that_is_down_stops_the_gateway_in_one_line(tmp_path: Path) -> None:
    nothing = f"redis://127.0.0.1:{free_port()}/0"
    with served_in_thread(build_counting_server()) as upstream:
        args = _gateway_args(upstream, nothing, free_port(), "--require-store")
        done = subprocess.run(args, capture_output=True, text=True, timeout=180)
    assert_one_line(
        done, f"mcpcache gateway: the store {nothing} is unreachable (ConnectionError", "required: not starting"
    )


def test_the_store_is_shown_without_credentials_even_as_a_cluster_of_hosts() -> None:
    from mcpcache.cli.gateway import _shown_store

    assert _shown_store("redis+cluster://u:pw@127.0.0.1:1,127.0.0.1:2/0?password=x") == (
        "redis+cluster://127.0.0.1:1,127.0.0.1:2/0?…"
    )
    assert _shown_store("redis://:pw@127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert _shown_store("/var/cache/mcpcache.sqlite") == "/var/cache/mcpcache.sqlite"
