"""What every measurement here shares: the machine it ran on, percentiles, loopback ports, a redis-server.

One home for these so the `mcpcache bench` report and the scripts in benchmarks/ describe a machine the
same way and compute a p95 the same way.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import platform
import socket
import sqlite3
import ssl
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

DEFAULT_LIBRARIES = ("mcpcache", "mcp", "fastmcp", "pydantic", "pydantic-core", "orjson", "xxhash")


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        # The first processor's block is enough: the cores of one machine are alike.
        for line in Path("/proc/cpuinfo").read_text().split("\n\n", 1)[0].splitlines():
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    except OSError:
        pass
    return info


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine(libraries: Iterable[str] = DEFAULT_LIBRARIES) -> dict[str, str]:
    """The machine and software a figure was measured on, as strings for a report."""
    cpuinfo = _cpuinfo()
    cpu = platform.processor() or platform.machine()
    if "model name" in cpuinfo:
        cpu = f"{cpuinfo['model name']} (family {cpuinfo.get('cpu family', '?')}, model {cpuinfo.get('model', '?')})"
    flags = cpuinfo.get("flags", "").split()
    libc, libc_version = platform.libc_ver()
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "sha_extensions": "yes" if "sha_ni" in flags else "no" if flags else "unknown",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": platform.platform(),
        "libc": f"{libc} {libc_version}".strip() or "unknown",
        "sqlite": sqlite3.sqlite_version,
        "openssl": ssl.OPENSSL_VERSION,
        "libraries": ", ".join(f"{name} {_version(name)}" for name in libraries),
    }


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest rank: the smallest sample at or above the q-th fraction of them (NaN for no samples)."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


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
