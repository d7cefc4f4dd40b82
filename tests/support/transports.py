"""Connect a stock MCP client to a server over a real transport, in a chosen protocol era.

A `ServerTarget` says where a server is: an in-process object (memory streams), a command the client
transport starts (stdio), or a URL (streamable HTTP; `http_server` runs one in a subprocess).
`stock_client(client_kind, target, era)` yields a connected, unmodified `mcp.Client` or
`fastmcp.Client`, and refuses to yield one that negotiated another era than the one asked for. Given a
`log` (`mcpcache.wire_count.WireLog`), every message of the connection is recorded at the transport;
other keyword arguments go to the client's constructor (e.g. `message_handler=`).

Era is forced the same way for both clients: `mode="auto"` negotiates 2026-07-28 through
`server/discover`; `mode="legacy"` forces the 2025-11-25 `initialize` handshake.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, TypeAlias

import fastmcp
import mcp
from fastmcp.client.transports import FastMCPTransport, PythonStdioTransport, StreamableHttpTransport
from mcp.client._memory import InMemoryTransport
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer

from mcpcache.bench.wire import CountingFastMCPTransport
from mcpcache.processes import accepts, free_port, stop_process
from mcpcache.wire_count import CountingTransport, WireLog

ServerKind = Literal["fastmcp", "sdk"]
ClientKind = Literal["mcp", "fastmcp"]
TransportKind = Literal["memory", "stdio", "http"]
Era = Literal["2026-07-28", "2025-11-25"]

MODERN: Era = "2026-07-28"
LEGACY: Era = "2025-11-25"
ERAS: tuple[Era, ...] = (MODERN, LEGACY)
CLIENT_KINDS: tuple[ClientKind, ...] = ("mcp", "fastmcp")
TRANSPORTS: tuple[TransportKind, ...] = ("memory", "stdio", "http")

SERVE_SCRIPT = Path(__file__).resolve().parent.parent / "fixture_servers" / "serve.py"
"""`python serve.py <fastmcp|sdk> <stdio|http> [port]` runs the catalogue server (tests/fixture_servers)."""

StockClient: TypeAlias = "mcp.Client | fastmcp.Client[Any]"

_MODE: dict[Era, Literal["auto", "legacy"]] = {MODERN: "auto", LEGACY: "legacy"}


@dataclass(frozen=True)
class ServerTarget:
    """Where a server can be reached. Build one with `memory`, `stdio` or `http`."""

    kind: ServerKind
    transport: TransportKind
    server: fastmcp.FastMCP[Any] | MCPServer | None = None
    command: tuple[str, ...] = ()
    """stdio: the Python script and its arguments (run with this interpreter)."""
    url: str | None = None

    @classmethod
    def memory(cls, server: fastmcp.FastMCP[Any] | MCPServer) -> ServerTarget:
        kind: ServerKind = "sdk" if isinstance(server, MCPServer) else "fastmcp"
        return cls(kind=kind, transport="memory", server=server)

    @classmethod
    def stdio(cls, kind: ServerKind, script: Path = SERVE_SCRIPT, *args: str) -> ServerTarget:
        """The catalogue server by default: `serve.py <kind> stdio`."""
        command = (str(script), *args) if args else (str(script), kind, "stdio")
        return cls(kind=kind, transport="stdio", command=command)

    @classmethod
    def http(cls, kind: ServerKind, url: str) -> ServerTarget:
        return cls(kind=kind, transport="http", url=url)


def _mcp_transport(target: ServerTarget, log: WireLog | None = None) -> Any:
    if log is not None:
        return CountingTransport(_mcp_streams(target), log)
    if target.transport == "memory":
        assert target.server is not None
        # InMemoryTransport takes an MCPServer or a low-level Server; FastMCP's is the private _mcp_server.
        lowlevel = target.server if isinstance(target.server, MCPServer) else target.server._mcp_server
        return InMemoryTransport(lowlevel)
    if target.transport == "stdio":
        script, *args = target.command
        return mcp.StdioServerParameters(command=sys.executable, args=[script, *args])
    assert target.url is not None
    return target.url


def _mcp_streams(target: ServerTarget) -> Any:
    """The target as an `mcp.client.Transport` (streams that can be counted)."""
    transport = _mcp_transport(target)
    if isinstance(transport, mcp.StdioServerParameters):
        return stdio_client(transport)
    if isinstance(transport, str):
        return streamable_http_client(transport)
    return transport


def _fastmcp_transport(target: ServerTarget, log: WireLog | None = None) -> Any:
    if log is not None:
        inner = _fastmcp_transport(target)
        if not isinstance(inner, PythonStdioTransport | StreamableHttpTransport):
            inner = FastMCPTransport(inner)
        return CountingFastMCPTransport(inner, log)
    if target.transport == "memory":
        return target.server  # FastMCPTransport, for FastMCP and SDK MCPServer alike
    if target.transport == "stdio":
        script, *args = target.command
        return PythonStdioTransport(script, args=args, keep_alive=False)
    assert target.url is not None
    return StreamableHttpTransport(target.url)


@contextlib.asynccontextmanager
async def mcp_client(
    target: ServerTarget, era: Era, *, log: WireLog | None = None, **kwargs: Any
) -> AsyncIterator[mcp.Client]:
    """A connected stock `mcp.Client` (its defaults, response cache included)."""
    async with mcp.Client(_mcp_transport(target, log), mode=_MODE[era], **kwargs) as client:
        _check_era(client.protocol_version, era)
        yield client


@contextlib.asynccontextmanager
async def fastmcp_client(
    target: ServerTarget, era: Era, *, log: WireLog | None = None, **kwargs: Any
) -> AsyncIterator[fastmcp.Client[Any]]:
    """A connected stock `fastmcp.Client`."""
    async with fastmcp.Client(_fastmcp_transport(target, log), mode=_MODE[era], **kwargs) as client:
        _check_era(client.protocol_version, era)
        yield client


@contextlib.asynccontextmanager
async def stock_client(
    client_kind: ClientKind, target: ServerTarget, era: Era, *, log: WireLog | None = None, **kwargs: Any
) -> AsyncIterator[StockClient]:
    connect = mcp_client if client_kind == "mcp" else fastmcp_client
    async with connect(target, era, log=log, **kwargs) as client:
        yield client


def _check_era(negotiated: str | None, era: Era) -> None:
    if negotiated != era:
        raise RuntimeError(f"asked for protocol {era}, the connection negotiated {negotiated}")


@contextlib.contextmanager
def http_servers(
    commands: Sequence[Sequence[str]], *, log: IO[bytes] | None = None, ready_within: float = 60.0
) -> Iterator[list[str]]:
    """Run each command with a free port appended, on 127.0.0.1; yield their `/mcp` URLs.

    They start side by side, so two servers cost one start-up. The wait only polls the port until it
    accepts a connection; it is a readiness check, not a timing assertion. Every process is stopped by
    its PID on the way out.
    """
    started: list[tuple[subprocess.Popen[bytes], int]] = []
    try:
        for command in commands:
            port = free_port()
            process = subprocess.Popen(
                [*command, str(port)], stdin=subprocess.DEVNULL, stdout=log or subprocess.DEVNULL, stderr=log
            )
            started.append((process, port))
        deadline = time.monotonic() + ready_within
        for process, port in started:
            while not accepts(port):
                if process.poll() is not None:
                    raise RuntimeError(f"server {process.args} exited with {process.returncode} before listening")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server {process.args} did not listen on port {port}")
                time.sleep(0.05)
        yield [f"http://127.0.0.1:{port}/mcp" for _, port in started]
    finally:
        for process, _ in started:
            stop_process(process)


def catalogue_command(kind: ServerKind) -> list[str]:
    """The command that serves the catalogue of `kind` over HTTP (the port is appended)."""
    return [sys.executable, str(SERVE_SCRIPT), kind, "http"]
