"""Another OS process holding a SQLite transaction on a file until released, for the lock and WAL tests.

"exclusive" or "immediate" hold the write lock; "read" holds a read transaction, which pins the
write-ahead log. `hold` is a fixture that starts holders and kills any the test did not release.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HOLD = """
import sqlite3, sys
path, mode = sys.argv[1], sys.argv[2]
conn = sqlite3.connect(path, isolation_level=None)
if mode == "read":
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM items").fetchall()  # the snapshot is taken: the log is pinned from here
else:
    conn.execute("BEGIN " + mode.upper())
    conn.execute("UPDATE items SET created_at = -1")  # uncommitted: never seen, rolled back
print("holding", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
conn.close()
"""


class Holder:
    """Another OS process holding a SQLite transaction on the file until released: "exclusive" or
    "immediate" (the write lock) or "read" (a read transaction, which pins the write-ahead log)."""

    def __init__(self, path: Path, mode: str) -> None:
        self.mode = mode
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(path), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.strip() == "holding", self.process.stderr.read() if self.process.stderr else line

    def release(self) -> None:
        if self.process.poll() is not None:
            return
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        _, stderr = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, stderr

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=30)


Hold = Callable[[Path, str], Holder]


@pytest.fixture
def hold() -> Iterator[Hold]:
    holders: list[Holder] = []

    def start(path: Path, mode: str) -> Holder:
        holder = Holder(path, mode)
        holders.append(holder)
        return holder

    yield start
    for holder in holders:
        holder.kill()
