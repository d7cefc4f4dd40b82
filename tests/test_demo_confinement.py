"""The demo server stays inside its folder while another process swaps symlinks under it.

The real `mcpcache demo-server --http` runs in a subprocess; a second subprocess flips a notebook
between a real file and a symlink to a notebook outside the folder, and a folder between a real
directory and a symlink to a directory outside, as fast as it can; a client meanwhile makes over a
thousand read_notebook and edit_cell calls on those two paths. Not one answer may carry the outside
notebooks' content, and not one edit may reach them or copy them into the folder.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest

from mcpcache.demo.notebooks import build_notebook, notebook_text
from mcpcache.processes import free_port, stop_process, wait_until_listening

pytestmark = pytest.mark.slow

MARK = "OUTSIDE-SECRET-5b1d"
CALLS = 1200
WORKERS = 8
# Safety bounds for a hung server or swapper, not a measurement.
CALLS_WITHIN_S = 60
STOP_WITHIN_S = 10

# Run as `python -c SWAPPER served outside stop_file`; prints {"flips": n, "copied_in": k} when the stop
# file appears. copied_in counts times a regular file inside the folder was seen holding the mark.
SWAPPER = r"""
import json, os, stat, sys

served, outside, stop = sys.argv[1], sys.argv[2], sys.argv[3]
mark = sys.argv[4].encode()
race = os.path.join(served, "race.ipynb")
inside_bytes = open(os.path.join(served, ".pristine", "race.ipynb"), "rb").read()
flips = copied_in = 0

def check_regular(path):
    global copied_in
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            data = b""
            while chunk := os.read(fd, 1 << 20):
                data += chunk
        finally:
            os.close(fd)
        if mark in data:
            copied_in += 1

while not os.path.exists(stop):
    # A notebook: real file -> symlink to the outside notebook -> real file, each by an atomic rename.
    check_regular(race)
    os.symlink(os.path.join(outside, "secret.ipynb"), os.path.join(served, ".link-tmp"))
    os.replace(os.path.join(served, ".link-tmp"), race)
    with open(os.path.join(served, ".file-tmp"), "wb") as handle:
        handle.write(inside_bytes)
    os.replace(os.path.join(served, ".file-tmp"), race)
    # A folder: real directory -> symlink to the outside directory -> real directory.
    os.rename(os.path.join(served, "dir"), os.path.join(served, ".dir-real"))
    os.symlink(os.path.join(outside, "dir"), os.path.join(served, "dir"))
    check_regular(os.path.join(served, ".dir-real", "x.ipynb"))
    os.unlink(os.path.join(served, "dir"))
    os.rename(os.path.join(served, ".dir-real"), os.path.join(served, "dir"))
    flips += 1
print(json.dumps({"flips": flips, "copied_in": copied_in}))
"""


def _notebook_bytes(seed: int, mark: str | None = None) -> bytes:
    notebook = build_notebook(4, seed=seed, images=False)
    if mark is not None:
        for cell in notebook["cells"]:
            cell["source"] = f"{mark} {cell['source']}"
        notebook["metadata"]["secret"] = mark
    return notebook_text(notebook).encode("utf-8")


def _tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every regular file under `root` (symlinks not followed): its bytes and mtime."""
    found: dict[str, tuple[bytes, int]] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            info = path.lstat()
            if stat.S_ISREG(info.st_mode):
                found[str(path.relative_to(root))] = (path.read_bytes(), info.st_mtime_ns)
    return found


@pytest.fixture
def race_folders(tmp_path: Path) -> tuple[Path, Path]:
    served, outside = tmp_path / "served", tmp_path / "outside"
    (served / "dir").mkdir(parents=True)
    (served / ".pristine").mkdir()
    (outside / "dir").mkdir(parents=True)
    inside = _notebook_bytes(seed=1)
    (served / "race.ipynb").write_bytes(inside)
    (served / ".pristine" / "race.ipynb").write_bytes(inside)
    (served / "dir" / "x.ipynb").write_bytes(_notebook_bytes(seed=2))
    (outside / "secret.ipynb").write_bytes(_notebook_bytes(seed=3, mark=MARK))
    (outside / "dir" / "x.ipynb").write_bytes(_notebook_bytes(seed=4, mark=MARK))
    # Old mtimes, so a write within the clock's granularity could not hide behind an unchanged one.
    for path in (outside / "secret.ipynb", outside / "dir" / "x.ipynb"):
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    return served, outside


@pytest.fixture
def demo_http(race_folders: tuple[Path, Path]) -> Iterator[str]:
    served, _outside = race_folders
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "mcpcache", "demo-server", "--dir", str(served), "--http", str(port), "--validator"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_listening(process, port, within_s=30, what="the demo server")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(process)


def _answer_text(result: Any) -> str:
    parts = [json.dumps(result.structured_content)] if result.structured_content is not None else []
    parts += [getattr(block, "text", "") for block in result.content]
    return "\n".join(parts)


async def _racing_calls(url: str) -> tuple[list[str], dict[str, int], list[str]]:
    """CALLS calls from WORKERS concurrent tasks, a mix of reads and edits of the two swapped paths."""
    calls: list[str] = []
    outside_reads: list[str] = []
    outcomes = {"ok": 0, "error": 0}
    plan: list[tuple[str, dict[str, Any]]] = [
        ("read_notebook", {"path": "race.ipynb"}),
        ("edit_cell", {"path": "race.ipynb", "index": 1, "source": "# edited"}),
        ("read_notebook", {"path": "dir/x.ipynb"}),
        ("edit_cell", {"path": "dir/x.ipynb", "index": 2, "source": "# edited"}),
    ]
    async with mcp.Client(url) as client:

        async def worker(offset: int) -> None:
            for n in range(offset, CALLS, WORKERS):
                tool, arguments = plan[n % len(plan)]
                result = await client.call_tool(tool, arguments)
                calls.append(tool)
                outcomes["error" if result.is_error else "ok"] += 1
                if MARK in _answer_text(result):
                    outside_reads.append(_answer_text(result)[:200])

        with anyio.fail_after(CALLS_WITHIN_S):
            async with anyio.create_task_group() as group:
                for offset in range(WORKERS):
                    group.start_soon(worker, offset)
    return calls, outcomes, outside_reads


def test_swapping_symlinks_never_reads_or_writes_outside(
    race_folders: tuple[Path, Path], demo_http: str, tmp_path: Path
) -> None:
    served, outside = race_folders
    outside_before = _tree(outside)
    stop_file = tmp_path / "stop-swapping"
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(served), str(outside), str(stop_file), MARK],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        calls, outcomes, outside_reads = anyio.run(_racing_calls, demo_http)
    finally:
        stop_file.touch()
        try:
            out, err = swapper.communicate(timeout=STOP_WITHIN_S)
        finally:
            stop_process(swapper)
    assert swapper.returncode == 0, err.decode()
    swaps = json.loads(out)

    assert len(calls) == CALLS
    assert calls.count("read_notebook") == calls.count("edit_cell") == CALLS // 2
    assert swaps["flips"] > 0
    # Both outcomes happen: the race really ran (some calls met a symlink, some a real notebook).
    assert outcomes["ok"] > 0
    assert outcomes["error"] > 0
    print(f"\n{len(calls)} calls ({outcomes}), {swaps['flips']} swap cycles, {len(outside_reads)} outside reads")

    assert outside_reads == [], f"{len(outside_reads)} answers carried the outside notebook: {outside_reads[:3]}"
    assert swaps["copied_in"] == 0, "an edit copied the outside notebook into the folder"
    assert _tree(outside) == outside_before, "an edit reached a file outside the folder"
    leaked = [name for name, (data, _mtime) in _tree(served).items() if MARK.encode() in data]
    assert leaked == [], f"files inside the folder hold the outside content: {leaked}"
