"""A stdio upstream's stderr, relayed to the gateway's: held until the upstream has answered (so that one
that cannot start is reported in one line, `mcpcache.gateway.reach`), then passed on line by line, the
last few kept for that message."""

from __future__ import annotations

import array
import collections
import contextlib
import fcntl
import os
import sys
import termios
import threading
import time
from typing import TextIO

__all__ = ["StderrRelay"]


class StderrRelay:
    """A pipe for a child's stderr, written on to this process's stderr as lines come; the last few are kept
    for a message. `held=True`: the lines are held (up to `hold`) until `release()`."""

    def __init__(self, *, held: bool = False, keep: int = 20, hold: int = 10_000) -> None:
        self._read_fd, write_fd = os.pipe()
        self.writer: TextIO = open(write_fd, "w")  # noqa: SIM115 (open for the child's whole life)
        self._lock = threading.Lock()
        self._held: collections.deque[bytes] = collections.deque(maxlen=hold)
        self._released = not held
        self._last: collections.deque[bytes] = collections.deque(maxlen=keep)
        self._partial = b""
        self._busy = False
        self._thread = threading.Thread(target=self._pump, name="upstream-stderr", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self._read_fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self._busy = True
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            for line in lines:
                self._take(line + b"\n")
            with self._lock:
                self._busy = False

    def _take(self, line: bytes) -> None:
        with self._lock:
            self._last.append(line)
            if not self._released:
                self._held.append(line)
                return
        self._write(line)

    @staticmethod
    def _write(line: bytes) -> None:
        with contextlib.suppress(OSError, ValueError):
            stream = sys.stderr
            stream.write(line.decode(errors="replace"))
            stream.flush()

    def release(self) -> None:
        """From now on, pass the lines on (the ones held first)."""
        with self._lock:
            held, self._released = list(self._held), True
            self._held.clear()
        for line in held:
            self._write(line)

    def drain(self, within_s: float) -> None:
        """Wait (at most `within_s`) until every byte written so far is read (a child that has exited has
        written all it will)."""
        deadline = time.monotonic() + within_s
        quiet = 0
        while time.monotonic() < deadline and quiet < 2:
            # Twice in a row, 10 ms apart: the pipe empty and the pump not handling a chunk (between its read
            # and marking itself busy there are only a few instructions).
            waiting = array.array("i", [0])
            with contextlib.suppress(OSError):
                fcntl.ioctl(self._read_fd, termios.FIONREAD, waiting)
            with self._lock:
                quiet = quiet + 1 if waiting[0] == 0 and not self._busy else 0
            time.sleep(0.01)

    def last_words(self) -> str:
        """The last line the child wrote that says something (a traceback's last line is its error)."""
        with self._lock:
            lines = [line.decode(errors="replace").strip() for line in self._last]
        said = [line for line in lines if line]
        return said[-1] if said else ""

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.writer.close()
