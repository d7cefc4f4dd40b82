"""A thin streamable-HTTP front for a stdio MCP server, so that the conformance suite (an HTTP client) can
test `mcpcache proxy` (a stdio server) as a host would use it.

It relays JSON-RPC messages and nothing else: a host of the handshake era gets a proxy process of its
own per `initialize` (its HTTP session is that process); requests of 2026-07-28, which carry their own
`_meta`, share one process. Each POSTed request is written to the process's stdin and answered with an
event stream of what the process writes until its response (progress, logs, and the process's requests
to the host, which the host answers in a later POST). Ids of concurrent requests are mapped apart.
It is test scaffolding: it checks no HTTP header, keeps no event store, and has no standalone GET
stream, so the suite's scenarios about the HTTP transport itself test this front, not the proxy
(tests/conformance/test_transparency.py names them).

Run: `python stdio_relay.py PORT -- COMMAND...`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectSendStream
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

_ids = itertools.count(1)
MODERN_ENVELOPE = "io.modelcontextprotocol/protocolVersion"
"""A 2026-07-28 request carries its protocol version in `_meta` (and needs no session)."""


@dataclass
class _Pending:
    original_id: Any
    stream: MemoryObjectSendStream[dict[str, Any]]
    progress_token: Any = None


@dataclass
class StdioPeer:
    """One stdio server process and the POSTs waiting on it."""

    command: Sequence[str]
    process: Process | None = None
    pending: dict[int, _Pending] = field(default_factory=dict)
    lock: anyio.Lock = field(default_factory=anyio.Lock)

    async def start(self, group: anyio.abc.TaskGroup) -> None:
        self.process = await anyio.open_process(list(self.command), stderr=sys.stderr)
        group.start_soon(self._read)

    async def _read(self) -> None:
        assert self.process is not None
        assert self.process.stdout is not None
        buffered = b""
        async for chunk in self.process.stdout:
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                if line.strip():
                    await self._route(json.loads(line))
        for waiting in self.pending.values():
            waiting.stream.close()

    async def _route(self, message: dict[str, Any]) -> None:
        if "id" in message and "method" not in message:  # a response
            waiting = self.pending.pop(message["id"], None)
            if waiting is not None:
                await self._deliver(waiting, {**message, "id": waiting.original_id})
                waiting.stream.close()
            return
        token = (message.get("params") or {}).get("progressToken")
        targets = [p for p in self.pending.values() if token is None or p.progress_token == token]
        for waiting in targets[-1:] if "id" in message else targets:  # a request to the host goes once
            await self._deliver(waiting, message)

    async def _deliver(self, waiting: _Pending, message: dict[str, Any]) -> None:
        # The suite may have stopped reading a stream (a listen stream it read enough of) while the server
        # still writes to it: that stream's messages are dropped, the others still relayed.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await waiting.stream.send(message)

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process is not None
        assert self.process.stdin is not None
        async with self.lock:
            await self.process.stdin.send(json.dumps(message).encode() + b"\n")

    async def request(self, message: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        relay_id = next(_ids)
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](100)
        token = ((message.get("params") or {}).get("_meta") or {}).get("progressToken")
        self.pending[relay_id] = _Pending(message["id"], send, token)
        await self.send({**message, "id": relay_id})
        async with receive:
            async for answer in receive:
                yield answer

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            with anyio.move_on_after(10):
                await self.process.wait()
            if self.process.returncode is None:
                self.process.kill()


def relay_app(command: Sequence[str]) -> Starlette:
    sessions: dict[str, StdioPeer] = {}
    shared: list[StdioPeer] = []
    groups: list[anyio.abc.TaskGroup] = []

    async def peer_for(request: Request, message: dict[str, Any]) -> tuple[StdioPeer | Response, str | None]:
        session_id = request.headers.get("mcp-session-id")
        if message.get("method") == "initialize":
            peer = StdioPeer(command)
            await peer.start(groups[0])
            session_id = uuid.uuid4().hex
            sessions[session_id] = peer
            return peer, session_id
        if session_id is not None:
            found = sessions.get(session_id)
            return (found if found is not None else Response(status_code=404)), session_id
        if MODERN_ENVELOPE not in ((message.get("params") or {}).get("_meta") or {}):
            # Neither a session's nor enveloped: a handshake-era request before `initialize`.
            return Response(status_code=400), None
        if not shared:
            shared.append(StdioPeer(command))
            await shared[0].start(groups[0])
        return shared[0], None

    async def post(request: Request) -> Response:
        message = json.loads(await request.body())
        peer, session_id = await peer_for(request, message)
        if isinstance(peer, Response):
            return peer
        headers = {"mcp-session-id": session_id} if session_id else {}
        if "method" not in message or "id" not in message:  # a notification, or the host's answer
            await peer.send(message)
            return Response(status_code=202, headers=headers)

        async def events() -> AsyncIterator[bytes]:
            async for answer in peer.request(message):
                yield b"event: message\ndata: " + json.dumps(answer).encode() + b"\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    async def delete(request: Request) -> Response:
        peer = sessions.pop(request.headers.get("mcp-session-id", ""), None)
        if peer is None:
            return Response(status_code=404)
        await peer.stop()
        return Response(status_code=200)

    async def get(request: Request) -> Response:
        return JSONResponse({"error": "no standalone stream"}, status_code=405)

    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            groups.append(group)
            yield
            for peer in [*sessions.values(), *shared]:
                await peer.stop()
            group.cancel_scope.cancel()

    from contextlib import asynccontextmanager

    routes = [
        Route("/mcp", post, methods=["POST"]),
        Route("/mcp", delete, methods=["DELETE"]),
        Route("/mcp", get, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=asynccontextmanager(lifespan))


def main(argv: list[str]) -> None:
    port, separator, *command = argv
    if separator != "--" or not command:
        raise SystemExit(__doc__)
    uvicorn.run(relay_app(command), host="127.0.0.1", port=int(port), log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
