"""How a bench run shows that it moves, and how it stops when interrupted.

On a terminal, rich's bar. Anywhere else (a file, a pipe, CI) a bar is drawn once, at the end, so a run
of minutes looked hung: there, plain lines instead, one when the phase changes and one at each tenth of
the reads.

Ctrl-C at a terminal reaches the whole process group: the runner, its fork server and every worker and
server forked from it. The workers are the runner's to stop (it knows which of them is mid-read and which
server belongs to which), so the fork server starts with SIGINT blocked, which it and everything forked
from it inherit (an interrupted fork server printed a traceback of whatever it was importing), and the
runner holds Ctrl-C back while it starts or stops a process, so that none is left without a handle.
"""

from __future__ import annotations

import contextlib
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import signal
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class Reporter(Protocol):
    """What the runner asks of a progress display (the part of rich's `Progress` it uses)."""

    def __enter__(self) -> Reporter: ...

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None, /
    ) -> None: ...

    def add_task(self, description: str, *, total: float | None = ...) -> Any: ...

    def update(self, task: Any, /, *, description: str | None = ...) -> None: ...

    def advance(self, task: Any, advance: float = ..., /) -> None: ...


class PlainProgress:
    """Progress as plain lines: a line per phase, and one per tenth of the total (a log shows the run move)."""

    def __init__(self, console: Console, steps: int = 10) -> None:
        self.console = console
        self.steps = steps
        self.description = ""
        self.total = 0
        self.done = 0
        self.shown = -1
        self.started = time.monotonic()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        return None

    def add_task(self, description: str, *, total: float | None = None) -> int:
        self.description = description
        self.total = int(total or 0)
        return 0

    def _line(self) -> None:
        elapsed = int(time.monotonic() - self.started)
        self.console.print(
            f"{self.description}: {self.done}/{self.total} reads, {elapsed // 60}:{elapsed % 60:02d} elapsed",
            highlight=False,
            soft_wrap=True,
        )
        self.console.file.flush()  # a file or a pipe is block-buffered: a line nobody sees yet is no progress

    def update(self, task: Any, *, description: str | None = None) -> None:
        if description is not None and description != self.description:
            self.description = description
            self._line()

    def advance(self, task: Any, advance: float = 1) -> None:
        self.done += int(advance)
        tenth = self.done * self.steps // self.total if self.total else 0
        if tenth != self.shown:
            self.shown = tenth
            self._line()


def reporter(console: Console) -> Reporter:
    """rich's bar on a terminal, plain lines anywhere else."""
    if console.is_terminal:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        bar: Reporter = Progress(*columns, console=console, transient=False)
        return bar
    return PlainProgress(console)


@contextlib.contextmanager
def sigint_deferred() -> Iterator[list[int]]:
    """Ctrl-C held back until the block is done, then raised (main thread only; elsewhere the block just runs).
    The block gets a list that is no longer empty once a Ctrl-C came, to hurry what is left.

    Around starting a process (interrupted while it waits for the child's PID, `Process.start()` leaves a
    child nobody has a handle on: an HTTP server that listens for ever, and a fork server that cannot
    exit), and around stopping them (a second Ctrl-C must not leave one running)."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        if previous is signal.default_int_handler:
            raise KeyboardInterrupt
        if callable(previous):
            previous(signal.SIGINT, None)


def start_fork_server() -> None:
    """Start the fork server (if it is not running) with SIGINT blocked, for it and all it forks.

    A signal mask survives the exec and the interpreter's start (the standard library's resource tracker
    relies on it the same way), where a handler or SIG_IGN set around the spawn would also have to cover
    this process: a Ctrl-C in that moment was lost. Here this process only blocks SIGINT around the spawn,
    and holds back (`sigint_deferred`) one that arrives, raising it after."""
    # Started first, on its own: it blocks and unblocks SIGINT around its spawn, which would unblock ours.
    multiprocessing.resource_tracker.ensure_running()
    if threading.current_thread() is not threading.main_thread():
        multiprocessing.forkserver.ensure_running()
        return
    with sigint_deferred():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def stop_fork_server() -> None:
    """Stop the fork server and the resource tracker this process started, and wait for both.

    The standard library stops them only when this process exits (their pipes close); they then outlive
    the command as zombies until the system reaps them. Called once every worker and server is stopped:
    the fork server exits only when all it forked have. `_stop` is the standard library's own (its tests
    use it); where it is missing the helpers end as before."""
    fork_server: Any = getattr(multiprocessing.forkserver, "_forkserver", None)
    tracker: Any = getattr(multiprocessing.resource_tracker, "_resource_tracker", None)
    for helper in (fork_server, tracker):
        stop = getattr(helper, "_stop", None)
        if callable(stop):
            with contextlib.suppress(OSError, ChildProcessError):
                stop()
