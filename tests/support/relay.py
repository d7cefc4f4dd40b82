"""A TCP relay on 127.0.0.1 between HTTP clients and a real server, that can lose exchanges on purpose.

What it imitates happens between real parts on its own, but only by chance: a server closing an idle
keep-alive connection just as the client sends a request on it (the client's request is then reset
before any answer, unread), a proxy or load balancer resetting the client's connection after it forwarded
the request (the server ran it; the client only sees a reset), or a connection dropped after the server read
the request but before its answer. The relay makes one happen on the next request sent on a connection that
has already carried an exchange (`lose_next`), so a test can show what a client does then; or, with
`chaos`, loses requests on any connection at random points, from a seeded generator. Everything else passes
through unchanged.
"""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import anyio
from anyio.abc import SocketAttribute, SocketStream

Loss = Literal[
    "reset_unread", "reset_mid_request", "reset_after_read", "drop_after_read", "cut_mid_answer", "reset_mid_answer"
]
CHAOS: tuple[Loss, ...] = (
    "reset_unread",
    "reset_mid_request",
    "reset_after_read",
    "drop_after_read",
    "reset_mid_answer",
)
"""The losses `chaos` chooses from: a reset before, inside and after the request, and inside the answer."""


def _reset_on_close(stream: SocketStream) -> None:
    # SO_LINGER 0: close() sends RST, as a kernel does for data reaching a closed socket (or a proxy that drops
    # its upstream link).
    raw = stream.extra(SocketAttribute.raw_socket)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class Relay:
    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._armed: Loss | None = None
        self._armed_anywhere = False
        self._chaos: tuple[float, random.Random] | None = None
        self.port = 0
        self.requests = 0
        """Requests seen so far (the first chunk of each), on every connection."""
        self.lost: list[Loss] = []
        """The exchanges lost so far, in order."""

    def lose_next(self, how: Loss, *, on_any_connection: bool = False) -> None:
        """Lose the next request sent on a reused connection (or on any, `on_any_connection`): `reset_unread`
        resets the client's connection without passing the request on (the server closed an idle connection as
        the request arrived);
        `reset_mid_request` passes part of it on, then resets both sides (the server never has the whole
        request); `reset_after_read` passes it on and resets the client's connection as the answer begins
        (a proxy whose upstream link dropped: the server ran it); `drop_after_read` passes it on and closes
        the client's connection before the answer; `cut_mid_answer` passes it on, and of the answer only its
        head (status line and headers); `reset_mid_answer` a part of the answer's first bytes, then a reset."""
        self._armed, self._armed_anywhere = how, on_any_connection

    def chaos(self, rate: float, seed: int) -> None:
        """From now on, lose each request (on any connection) with probability `rate`, in one of the `CHAOS`
        ways, at a random point, all drawn from `random.Random(seed)`. `rate` 0 ends it."""
        self._chaos = (rate, random.Random(seed)) if rate > 0 else None

    def _fate(self, reused: bool) -> tuple[Loss | None, float]:
        """How the request beginning now is lost (None: it is not), and where (a fraction of the bytes)."""
        if self._armed is not None and (reused or self._armed_anywhere):
            how, self._armed = self._armed, None
            return how, 0.5
        if self._chaos is not None:
            rate, rng = self._chaos
            if rng.random() < rate:
                return rng.choice(CHAOS), rng.random()
        return None, 0.0

    async def _serve(self, client: SocketStream) -> None:
        answered = False
        """Whether the server has answered on this connection: a request sent after that reuses it."""
        starting = True
        """Whether the client's next bytes begin a request (a client sends its next request on a connection
        only once the whole answer to the last one is in)."""
        fate: Loss | None = None
        point = 0.0
        async with client, await anyio.connect_tcp(*self._target) as server, anyio.create_task_group() as tg:

            async def upstream() -> None:
                nonlocal starting, fate, point
                async for chunk in client:
                    if starting:
                        starting = False
                        self.requests += 1
                        fate, point = self._fate(answered)
                        if fate is not None:
                            self.lost.append(fate)
                        if fate == "reset_unread":
                            _reset_on_close(client)
                            break
                        if fate == "reset_mid_request":
                            await server.send(chunk[: int(len(chunk) * point)] or chunk[:1])
                            _reset_on_close(client)
                            break
                    await server.send(chunk)
                tg.cancel_scope.cancel()

            async def downstream() -> None:
                nonlocal answered, starting
                async for chunk in server:
                    if fate in ("drop_after_read", "reset_after_read"):
                        if fate == "reset_after_read":
                            _reset_on_close(client)
                        break  # the server read the whole request and answers: the answer is lost
                    if fate == "cut_mid_answer":
                        head = chunk.find(b"\r\n\r\n")
                        if head >= 0:
                            await client.send(chunk[: head + 4])
                            break  # the answer's head went through, its body is lost
                    if fate == "reset_mid_answer":
                        if cut := int(len(chunk) * point):
                            await client.send(chunk[:cut])
                        _reset_on_close(client)
                        break
                    answered = starting = True
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
                # One side went away: the other is closed with it (raised alone, or by both sides at once).
                try:
                    await self._serve(client)
                except* (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass

            tg.start_soon(listener.serve, handle)
            try:
                yield f"http://127.0.0.1:{self.port}"
            finally:
                tg.cancel_scope.cancel()
