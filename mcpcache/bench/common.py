"""What every measurement here shares: the machine it ran on, and percentiles.

One home for these so the `mcpcache bench` report and the scripts in benchmarks/ describe a machine the
same way and compute a p95 the same way. The processes they start (servers on loopback ports, a
redis-server) are `mcpcache.processes`'.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import platform
import sqlite3
import ssl
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
