"""Reaching the upstreams before the gateway serves: each one connected and its tools listed, as a caller's
first call would, so that an upstream that cannot start or answer stops the gateway in one line naming it
and its error (otherwise every call fails later with `Unknown tool`, the cause only in the log).

A stdio upstream's error is what it wrote on stderr before it exited ("No module named mcpcache" when the
command's `python` is not the one mcpcache is installed in). Its stderr therefore goes through a relay
that holds the lines until the upstream has answered, then passes them on to the gateway's stderr, and
keeps the last of them for the message.
"""

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
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from mcpcache.gateway.app import Upstream

__all__ = ["UPSTREAM_START_S", "StderrRelay", "reach_upstreams"]

UPSTREAM_START_S = 120.0
"""How long an upstream has to connect and list its tools at start (a stdio server's first start in a
fresh environment can take half a minute on a loaded machine)."""


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


def _why(exc: BaseException) -> str:
    """The innermost cause that says something, as `Type: message` (an exception group's first)."""
    while True:
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        elif exc.__cause__ is not None:
            exc = exc.__cause__
        else:
            break
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _reach(upstream: Upstream) -> None:
    client = upstream.client_factory()
    async with client:
        await client.list_tools()


async def reach_upstreams(
    upstreams: Sequence[Upstream], *, within_s: float = UPSTREAM_START_S
) -> list[tuple[Upstream, str]]:
    """Connect to each upstream and list its tools, side by side, in this event loop (where the gateway then
    serves: a stdio upstream's process and session are kept for the calls). Returns (upstream, why) for
    each that failed, with the reason in words; a stdio upstream's last line on stderr is part of it."""
    failed: list[tuple[Upstream, str]] = []

    async def one(upstream: Upstream) -> None:
        try:
            with anyio.fail_after(within_s):
                await _reach(upstream)
        except TimeoutError:
            failed.append((upstream, f"did not answer within {within_s:g} s"))
        except Exception as exc:  # whatever the upstream did, the gateway says it in one line
            relay = upstream.stderr
            said = ""
            if relay is not None:
                # The child wrote its error, then exited; the relay's thread may not have read it yet.
                await anyio.to_thread.run_sync(relay.drain, 2.0)
                said = relay.last_words()
            why = f"closed the connection before answering: {said}" if said else f"did not answer: {_why(exc)}"
            failed.append((upstream, why))
        else:
            if upstream.stderr is not None:
                upstream.stderr.release()

    async with anyio.create_task_group() as group:
        for upstream in upstreams:
            group.start_soon(one, upstream)
    return sorted(failed, key=lambda pair: pair[0].name)
