"""The relay's count of message bytes inside HTTP/1.1 traffic (mcpcache.bench.relay), on known bytes."""

from __future__ import annotations

from mcpcache.bench.relay import _Bodies


def _chunked(body: bytes, size: int) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


def test_request_bodies_count_whole_however_the_bytes_arrive() -> None:
    first, second = b'{"jsonrpc":"2.0","id":1}', b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    wire = b"".join(
        b"POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body)
        for body in (first, second)
    )
    for step in (1, 7, len(wire)):
        bodies = _Bodies("sent")
        assert sum(bodies.feed(wire[i : i + step]) for i in range(0, len(wire), step)) == len(first) + len(second)


def test_an_event_stream_counts_its_data_lines_and_a_json_body_counts_whole() -> None:
    events = [b'{"jsonrpc":"2.0","id":1,"result":{}}', b'{"jsonrpc":"2.0","method":"notifications/progress"}']
    stream = b"".join(b"event: message\r\ndata: %s\r\n\r\n" % event for event in events)
    json_body = b'{"jsonrpc":"2.0","id":2,"result":{"content":[]}}'
    wire = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        + _chunked(stream, 9)
        + b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n"
        + b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (len(json_body), json_body)
    )
    for step in (1, 5, len(wire)):
        bodies = _Bodies("received")
        counted = sum(bodies.feed(wire[i : i + step]) for i in range(0, len(wire), step))
        assert counted == sum(map(len, events)) + len(json_body)
