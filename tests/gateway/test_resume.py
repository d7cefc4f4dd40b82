"""The gateway's SSE event store: a caller whose stream breaks mid-call resumes it with `Last-Event-ID`
through the gateway, and the store stays within its bounds without ever replaying a stream with an event
left out (a replay it cannot make whole is refused, as for an id it never issued)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.to_thread
import httpx
import mcp_types as mt
import pytest
import uvicorn
from fastmcp import Context, FastMCP
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.server.streamable_http import EventMessage

from mcpcache.gateway.resume import DEFAULT_RETRY_MS, BoundedEventStore, ResumeBounds, held_bytes, resumable_streams
from mcpcache.processes import free_port

from .conftest import gateway_over

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


def _note(text: str) -> mt.JSONRPCMessage:
    return mt.JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"data": text})


def _answer(request_id: int, text: str) -> mt.JSONRPCMessage:
    return mt.JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"content": [{"type": "text", "text": text}]})


async def _replay(store: BoundedEventStore, last: str) -> tuple[str | None, list[EventMessage]]:
    sent: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        sent.append(event)

    stream = await store.replay_events_after(last, send)
    return stream, sent


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.anyio
async def test_a_replay_is_the_named_streams_events_after_the_id_and_nothing_else() -> None:
    store = BoundedEventStore()
    primed = await store.store_event("a", None)
    first = await store.store_event("a", _note("a1"))
    await store.store_event("b", _note("b1"))
    last = await store.store_event("a", _answer(1, "done"))
    stream, sent = await _replay(store, primed)
    assert stream == "a"
    assert [event.event_id for event in sent] == [first, last]
    stream, sent = await _replay(store, first)
    assert (stream, [event.message for event in sent]) == ("a", [_answer(1, "done")])
    for unknown in ("", "nope", "0000-1", first.split("-")[0] + "-999"):
        assert await _replay(store, unknown) == (None, [])


@pytest.mark.anyio
async def test_the_oldest_events_go_first_within_each_bound() -> None:
    bounds = ResumeBounds(max_stream_events=3, max_events=5, max_event_bytes=10_000, max_stream_bytes=10**9)
    store = BoundedEventStore(bounds)
    ids = [await store.store_event("a", _note(f"a{i}")) for i in range(4)]
    assert await _replay(store, ids[0]) == (None, [])  # the stream's fourth event pushed out its first
    assert (await _replay(store, ids[1]))[0] == "a"
    others = [await store.store_event("b", _note(f"b{i}")) for i in range(3)]
    assert store.kept_events == 5
    assert await _replay(store, ids[1]) == (None, [])  # the oldest of all went first
    assert (await _replay(store, others[0]))[0] == "b"

    by_bytes = BoundedEventStore(ResumeBounds(max_event_bytes=5_000, max_stream_bytes=12_000, max_bytes=20_000))
    kept = [await by_bytes.store_event(f"s{i % 2}", _note("x" * 4_000)) for i in range(8)]
    assert by_bytes.kept_bytes <= 20_000
    assert await _replay(by_bytes, kept[0]) == (None, [])
    assert (await _replay(by_bytes, kept[-2]))[0] == "s0"


@pytest.mark.anyio
async def test_an_answer_too_large_to_keep_is_never_left_out_of_a_replay() -> None:
    store = BoundedEventStore(ResumeBounds(max_event_bytes=10_000))
    before = await store.store_event("a", _note("progress"))
    large = await store.store_event("a", _answer(1, "x" * 50_000))
    after = await store.store_event("a", _note("after"))
    assert store.kept_bytes < 10_000  # the large answer is not held
    assert await _replay(store, before) == (None, [])  # refused: the caller never received the answer
    stream, sent = await _replay(store, large)  # it did receive it: what came after is replayed
    assert (stream, [event.event_id for event in sent]) == ("a", [after])


@pytest.mark.anyio
async def test_events_older_than_the_age_bound_are_forgotten() -> None:
    clock = _Clock()
    store = BoundedEventStore(ResumeBounds(max_age_s=60), clock=clock)
    old = await store.store_event("a", _note("old"))
    clock.now += 61
    await store.store_event("b", _note("new"))
    assert await _replay(store, old) == (None, [])
    assert store.kept_events == 1


def test_the_size_of_a_message_is_walked_only_up_to_the_limit() -> None:
    huge = mt.JSONRPCResponse(jsonrpc="2.0", id=1, result={"rows": [{"n": i} for i in range(50_000)]})
    walked = held_bytes(huge, 500_000)
    assert 500_000 < walked < held_bytes(huge, 10**12) / 4  # stopped soon after the limit, not at the end
    assert held_bytes(_note("x" * 100), 10**9) > 100


_EVENTS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.one_of(st.none(), st.integers(0, 30_000))), max_size=40
)


@settings(max_examples=60, deadline=None)
@given(events=_EVENTS, pick=st.integers(0, 100))
def test_a_replay_is_whole_or_refused(events: list[tuple[str, int | None]], pick: int) -> None:
    """Against a model that keeps every event: whatever the bounds dropped, a replay sends exactly the
    events of the named stream after the named one (priming events aside), or nothing at all."""
    bounds = ResumeBounds(
        max_event_bytes=20_000, max_stream_bytes=60_000, max_stream_events=6, max_bytes=100_000, max_events=12
    )

    async def run() -> None:
        store = BoundedEventStore(bounds)
        model: list[tuple[str, str, mt.JSONRPCMessage | None]] = []
        for stream, size in events:
            message = None if size is None else _note("x" * size)
            model.append((stream, await store.store_event(stream, message), message))
        if not model:
            return
        stream, last, _ = model[pick % len(model)]
        replayed_stream, sent = await _replay(store, last)
        if replayed_stream is None:
            assert sent == []
            return
        assert replayed_stream == stream
        index = [event_id for _, event_id, _ in model].index(last)
        expected = [(eid, m) for s, eid, m in model[index + 1 :] if s == stream and m is not None]
        assert [(event.event_id, event.message) for event in sent] == expected

    anyio.run(run)


# Through the gateway, over HTTP --------------------------------------------------------------------

RELEASE = threading.Event()


def _upstream() -> FastMCP[Any]:
    server: FastMCP[Any] = FastMCP("slow")

    @server.tool
    async def slow_answer(ctx: Context) -> str:
        """Says it started, then answers once the test lets it."""
        await ctx.info("started")
        await anyio.to_thread.run_sync(RELEASE.wait, 60.0)  # set by the test, in its own thread
        return "the answer"

    return server


@contextlib.contextmanager
def _served(app: Any) -> Iterator[str]:
    port = free_port()
    runner = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=runner.run, name=f"gateway-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not runner.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        runner.should_exit = True
        thread.join(timeout=30)


def _events(response: httpx.Response) -> Iterator[dict[str, str]]:
    """The server-sent events of a streamed response, as field -> value."""
    event: dict[str, str] = {}
    for line in response.iter_lines():
        if not line:
            if event:
                yield event
            event = {}
            continue
        field, _, value = line.partition(":")
        event[field] = value.removeprefix(" ")


HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def test_a_broken_stream_is_resumed_through_the_gateway_with_last_event_id() -> None:
    RELEASE.clear()
    gateway = gateway_over(_upstream(), {})
    app = gateway.http_app(path="/mcp", **resumable_streams(json_response=False))
    with _served(app) as url, httpx.Client(timeout=30) as http:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        opened = http.post(url, json=init, headers=HEADERS)
        session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=HEADERS | session)
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "slow_answer", "arguments": {}}}
        with http.stream("POST", url, json=call, headers=HEADERS | session) as response:
            priming = next(_events(response))
        # The stream is broken (the caller went away) before the answer; the answer comes meanwhile.
        assert priming.get("data", "") == ""
        assert priming["retry"] == str(DEFAULT_RETRY_MS)
        RELEASE.set()
        resumed = HEADERS | session | {"Accept": "text/event-stream", "Last-Event-ID": priming["id"]}
        answer = None
        with http.stream("GET", url, headers=resumed) as response:
            for event in _events(response):
                if '"id":1' in event.get("data", ""):
                    answer = event["data"]
                    break
        assert answer is not None
        assert "the answer" in answer
