"""Ctrl-C during `mcpcache bench`: one line, "interrupted", exit 130, no traceback, and no process of the run
left behind (no worker, no HTTP server, no fork server, not even as a zombie).

The interrupt is sent as a terminal sends it, to the whole process group (the command runs in a session of
its own), at three moments: while the fork server imports what the workers need (an interrupted fork server
printed a traceback of the import), while the workers read (the progress line on a pipe says when), and
once the last read is in, as the runner closes the workers (where a Ctrl-C left all but the first running;
the run may also end first, which is no failure).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _children(pid: int) -> list[int]:
    pids: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return pids
    for task in tasks:
        with contextlib.suppress(OSError):
            pids.extend(int(p) for p in (task / "children").read_text().split())
    return pids


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in _children(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _started(pid: int) -> str | None:
    """When the process with this PID started (None: no such process); a PID with the same start time is
    the same process, running or a zombie (a zombie is what the issue saw left behind)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()[19]


def _fork_server_importing(pid: int, lines: list[str]) -> bool:
    # The fork server is up and has forked nothing yet: it is still importing PRELOAD.
    servers = [p for p in _descendants(pid) if "multiprocessing.forkserver" in _cmdline(p)]
    return bool(servers) and not any(_children(server) for server in servers)


def _workers_reading(pid: int, lines: list[str]) -> bool:
    return any(re.search(r"100 KB: [1-9]\d*/\d+ reads", line) for line in lines)


def _reads_done(pid: int, lines: list[str]) -> bool:
    # The last read is in: the runner ends each notebook and closes the workers one by one (a Ctrl-C raised
    # inside that loop left the workers after the first running).
    return any("100 KB: 12/12 reads" in line for line in lines)


@pytest.mark.parametrize(
    ("moment", "reads"),
    [(_fork_server_importing, 400), (_workers_reading, 400), (_reads_done, 6)],
    ids=["fork-server-importing", "workers-reading", "workers-closing"],
)
def test_ctrl_c_stops_the_run_in_one_line_and_leaves_no_process(
    tmp_path: Path, moment: Callable[[int, list[str]], bool], reads: int
) -> None:
    bench = subprocess.Popen(
        [sys.executable, "-m", "mcpcache", "bench", "--quick", "--reads", str(reads), "--no-extras",
         "--configs", "baseline,mcpcache", "--out", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(bench.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    seen: dict[int, str | None] = {}

    def look() -> None:
        for pid in _descendants(bench.pid) - set(seen):
            seen[pid] = _started(pid)

    try:
        deadline = time.monotonic() + 240
        while not moment(bench.pid, lines):
            assert bench.poll() is None, f"the run ended before the moment: {lines}"
            assert time.monotonic() < deadline, f"the moment never came: {lines}"
            look()
            time.sleep(0.02)
        look()
        os.killpg(bench.pid, signal.SIGINT)
        code = bench.wait(timeout=120)
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
    reader.join(10)
    err = bench.stderr.read()  # type: ignore[union-attr]
    if moment is _reads_done and code == 0:  # the run ended before the Ctrl-C came: nothing to interrupt
        assert "a quick run is a smoke test" in "".join(lines)
    else:
        assert code == 130, err
        assert err == "mcpcache bench: interrupted\n", err
    assert "Traceback" not in "".join(lines)
    assert seen, "no process of the run was seen"
    left = [pid for pid, started in seen.items() if started is not None and _started(pid) == started]
    assert left == [], [_cmdline(pid) for pid in left]
    # The workers' own logs carry no KeyboardInterrupt either: they never saw the Ctrl-C.
    for log in tmp_path.rglob("*.log"):
        assert "KeyboardInterrupt" not in log.read_text(errors="replace"), log
