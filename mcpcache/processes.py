"""Local processes and loopback ports: a free port, waiting for a server to listen, stopping a process this
program started (by its PID, never by name), and a redis-server of its own.

Shared by the commands that start servers (`mcpcache gateway --port 0`, `mcpcache bench`), the scripts in
benchmarks/ and the tests, so that each starts and stops processes one way.
"""

from __future__ import annotations

import socket
import subprocess
import time

__all__ = ["RedisServer", "accepts", "answers_ping", "free_port", "stop_process", "wait_until_listening"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def accepts(port: int) -> bool:
    """Whether something listens on 127.0.0.1:port (a readiness probe, not a timing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_until_listening(process: subprocess.Popen[bytes], port: int, within_s: float, what: str) -> None:
    """Poll until `process` listens on `port`; RuntimeError if it exits or does not within `within_s`."""
    deadline = time.monotonic() + within_s
    while not accepts(port):
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before listening on port {port}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not listen on port {port} within {within_s:g} s")
        time.sleep(0.05)


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """End a process this program started, by its PID: SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)


def answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server without persistence on a loopback port; `kill` and `start` again keep the port.

    Only this process's own server is ever stopped, by its PID.
    """

    def __init__(self, binary: str, port: int | None = None) -> None:
        self.binary = binary
        self.port = port if port is not None else free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def version(self) -> str:
        return subprocess.run([self.binary, "--version"], capture_output=True, text=True).stdout.strip()

    def start(self, timeout_s: float = 10.0) -> None:
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(f"redis-server on port {self.port} is already running (pid {self.process.pid})")
        self.process = subprocess.Popen(
            [self.binary, "--save", "", "--appendonly", "no", "--port", str(self.port), "--bind", "127.0.0.1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout_s
        while not answers_ping(self.port):
            if self.process.poll() is not None:
                stderr = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {stderr.strip()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not answer PING on port {self.port} within {timeout_s} s")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown, clients see their connections drop."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None:
            return
        stop_process(self.process)
        if self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None

    def restart(self) -> None:
        """A crash and a start on the same port: what a client sees when its server dies and comes back."""
        self.kill()
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None
        self.start()
