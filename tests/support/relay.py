"""A TCP relay on 127.0.0.1 between HTTP clients and a real server, that can lose one exchange on purpose.

What it imitates happens between real parts on its own, but only by chance: a server closing an idle
keep-alive connection just as the client sends a request on it (the client's request is then reset
before any answer, unread), or a connection dropped after the server read the request but before its
answer (the server ran it; the client never learns the outcome). The relay makes each happen on the next
request sent on a connection that has already carried an exchange, so a test can show what a client does
then; or cut the answer off mid-way, once its headers are through (the server ran the call, and the
client has begun to read an answer that never completes). Everything else passes through unchanged.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import anyio
from anyio.abc import SocketAttribute, SocketStream

Loss = Literal["reset_unread", "drop_after_read", "cut_mid_answer"]


class Relay:
    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._armed: Loss | None = None
        self.port = 0
        self.lost: list[Loss] = []
        """The exchanges lost so far, in order."""

    def lose_next(self, how: Loss) -> None:
        """Lose the next request sent on a reused connection: `reset_unread` resets the client's connection
        without passing the request on (the server closed an idle connection as the request arrived);
        `drop_after_read` passes the request on and closes the client's connection before the answer;
        `cut_mid_answer` passes the request on, and of the answer only its head (status line and headers)."""
        self._armed = how

    async def _serve(self, client: SocketStream) -> None:
        answered = False
        """Whether the server has answered on this connection: a request sent after that reuses it (a client
        sends its next request only once the whole answer is in)."""
        dropping = False
        cutting = False
        async with client, await anyio.connect_tcp(*self._target) as server, anyio.create_task_group() as tg:

            async def upstream() -> None:
                nonlocal dropping, cutting
                async for chunk in client:
                    if answered and not (dropping or cutting) and self._armed is not None:
                        how, self._armed = self._armed, None
                        self.lost.append(how)
                        if how == "reset_unread":
                            # SO_LINGER 0: close() sends RST, as a kernel does for data reaching a closed socket.
                            raw = client.extra(SocketAttribute.raw_socket)
                            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                            break
                        if how == "cut_mid_answer":
                            cutting = True
                        else:
                            dropping = True
                    await server.send(chunk)
                tg.cancel_scope.cancel()

            async def downstream() -> None:
                nonlocal answered
                async for chunk in server:
                    if dropping:
                        break  # the server read the whole request and answers: the answer is lost
                    if cutting:
                        head = chunk.find(b"\r\n\r\n")
                        if head >= 0:
                            await client.send(chunk[: head + 4])
                            break  # the answer's head went through, its body is lost
                    answered = True
                    await client.send(chunk)
                tg.cancel_scope.cancel()

            tg.start_soon(upstream)
            tg.start_soon(downstream)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        """Serve until the block ends; yields the relay's base URL (http://127.0.0.1:PORT)."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tg:

            async def handle(client: SocketStream) -> None:
                # One side went away: the other is closed with it.
                with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await self._serve(client)

            tg.start_soon(listener.serve, handle)
            try:
                yield f"http://127.0.0.1:{self.port}"
            finally:
                tg.cancel_scope.cancel()
