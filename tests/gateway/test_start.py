"""`mcpcache gateway` reaches every upstream before it serves: one that cannot start or answer stops it in one
line naming the upstream and its error, exit 2, before "serving" (it used to serve, and every call then
failed with `Unknown tool` while the cause was only in the log).

Run as a user runs it: the real command in a subprocess. The stdio upstream that cannot start is the
example's mistake: a `python` that does not have the module (here a module nobody has).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mcpcache.processes import free_port, stop_process, wait_until_listening

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
