"""The FastMCP client's counting transport, on the core byte counter (`mcpcache.wire_count`).

`fastmcp.Client(CountingFastMCPTransport(transport, log))` records every message of the connection in
`log`, exactly as `mcpcache.wire_count.CountingTransport` does for an `mcp.Client`. Here rather than beside
it because it needs FastMCP (the cli extra), which the core floor does not.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, Unpack, cast

from fastmcp.client.transports import ClientTransport
from fastmcp.client.transports.base import SessionKwargs, TransportOptions
from mcp import ClientSession
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

from mcpcache.wire_count import WireLog, counting_streams

__all__ = ["CountingFastMCPTransport"]


class CountingFastMCPTransport(ClientTransport):
    """Wraps a FastMCP client transport: `fastmcp.Client(CountingFastMCPTransport(transport))`.

    Every FastMCP transport builds its session as `options.session_class(read, write, ...)`, so a
    session class that wraps the streams it is given counts any of them.
    """

    def __init__(self, inner: ClientTransport, log: WireLog | None = None) -> None:
        self.inner = inner
        self.log = log if log is not None else WireLog()
        self.legacy_only = inner.legacy_only

    @contextlib.asynccontextmanager
    async def connect_session(
        self, *, transport_options: TransportOptions | None = None, **session_kwargs: Unpack[SessionKwargs]
    ) -> AsyncIterator[ClientSession]:
        options = transport_options or TransportOptions()
        base = options.session_class
        log = self.log

        def counting_session(
            read_stream: ReadStream[SessionMessage | Exception],
            write_stream: WriteStream[SessionMessage],
            *args: Any,
            **kwargs: Any,
        ) -> ClientSession:
            counted_read, counted_write = counting_streams(read_stream, write_stream, log)
            return base(counted_read, counted_write, *args, **kwargs)

        # TransportOptions types session_class as a class; every transport only ever calls it.
        counted = replace(options, session_class=cast(type[ClientSession], counting_session))
        async with self.inner.connect_session(transport_options=counted, **session_kwargs) as session:
            yield session

    async def close(self) -> None:
        # fastmcp declares ClientTransport.close without annotations.
        await self.inner.close()  # type: ignore[no-untyped-call]

    def get_session_id(self) -> str | None:
        return self.inner.get_session_id()

    def __repr__(self) -> str:
        return f"<CountingFastMCPTransport {self.inner!r}>"
