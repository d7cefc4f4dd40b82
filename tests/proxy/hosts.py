"""Stock hosts talking to `python -m mcpcache proxy ...` over stdio, the way a desktop host starts it.

The proxy runs from the repository root with this process's environment (it passes the environment on to
a stdio upstream, as it does for a host), so both run the code under test.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fastmcp
import mcp
from fastmcp.client.transports import StdioTransport
from mcp import StdioServerParameters

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
DEMO = (PYTHON, "-m", "mcpcache", "demo-server")


def proxy_args(*options: str, upstream: Sequence[str] = ()) -> list[str]:
    """`-m mcpcache proxy OPTIONS [-- UPSTREAM...]`, the arguments of the host's command."""
    args = ["-m", "mcpcache", "proxy", *options]
    if upstream:
        args += ["--", *upstream]
    return args


def mcp_host(args: Sequence[str], mode: str = "auto", **kwargs: Any) -> mcp.Client:
    """A stock `mcp.Client` that starts the proxy (`mode="auto"` negotiates 2026-07-28)."""
    params = StdioServerParameters(command=PYTHON, args=list(args), env=dict(os.environ), cwd=str(REPO))
    return mcp.Client(params, mode=mode, **kwargs)  # type: ignore[arg-type]


def fastmcp_host(args: Sequence[str], mode: str = "auto", **kwargs: Any) -> fastmcp.Client[StdioTransport]:
    """A stock `fastmcp.Client` that starts the proxy (`mode="legacy"`: the initialize handshake)."""
    transport = StdioTransport(PYTHON, list(args), env=dict(os.environ), cwd=str(REPO), keep_alive=False)
    return fastmcp.Client(transport, mode=mode, **kwargs)  # type: ignore[arg-type]
