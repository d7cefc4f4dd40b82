"""The server check's I/O: connect, list the tools, make the probe calls, hand the observations to the judges.

Every request goes out through the SDK client session's `send_request` with a result type that keeps the
JSON as it arrived, so the judges see exactly what the server sent (the SDK still refuses a result that is
not a valid `tools/call` result for the negotiated protocol; that refusal is recorded as the reply). No
answer goes through mcpcache's `ToolCache`. Sizes are counted per message at the client's transport
(`mcpcache.bench.wire`), the way the benchmarks count them.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import IO, Any, Literal, TextIO, cast

import mcp
import mcp_types as mt
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from mcpcache.bench.wire import CountingTransport, WireLog
from mcpcache.check.core import Report, Subject, judge_all
from mcpcache.check.selection import ToolCall, invalid_arguments, select
from mcpcache.check.server_rules import PROBES, SERVER_SCENARIOS, SKIP, Exchange, Probe, ToolObservations
from mcpcache.check.wire import RawResult, block_dict, short
from mcpcache.protocol import META_KEY

Era = Literal["auto", "legacy"]


@dataclass(frozen=True)
class Target:
    """Where the server under check is: a URL, a command to start over stdio, or (tests) a transport."""

    label: str
    url: str | None = None
    command: tuple[str, ...] = ()
    transport: Callable[[], Any] | None = None
    """Builds a fresh `mcp.client.Transport` (e.g. `InMemoryTransport(server)`)."""

    @classmethod
    def http(cls, url: str) -> Target:
        return cls(label=url, url=url)

    @classmethod
    def stdio(cls, command: Sequence[str]) -> Target:
        return cls(label=" ".join(command), command=tuple(command))

    @classmethod
    def of(cls, label: str, make: Callable[[], Any]) -> Target:
        return cls(label=label, transport=make)


@dataclass(frozen=True)
class CheckOptions:
    calls: tuple[ToolCall, ...] = ()
    """The user's `--tool`s; empty: choose from tools/list."""
    mutations: tuple[ToolCall, ...] = ()
    meta_key: str = META_KEY
    era: Era = "auto"
    timeout_s: float = 60.0


@contextlib.asynccontextmanager
async def _transport(target: Target, errlog: IO[str]) -> AsyncIterator[Any]:
    if target.transport is not None:
        yield target.transport()
    elif target.url is not None:
        yield streamable_http_client(target.url)
    else:
        command, *args = target.command
        yield stdio_client(mcp.StdioServerParameters(command=command, args=args), errlog=cast(TextIO, errlog))


@contextlib.asynccontextmanager
async def connect(target: Target, era: Era) -> AsyncIterator[tuple[mcp.Client, WireLog]]:
    """A connected stock `mcp.Client`, every message counted. The server's stderr goes to a temporary
    file (a server logging tracebacks for the invalid-argument probes would bury the report)."""
    log = WireLog()
    with tempfile.TemporaryFile("w+") as errlog:
        async with (
            _transport(target, errlog) as inner,
            mcp.Client(CountingTransport(inner, log), mode=era) as client,
        ):
            yield client, log


async def list_tools(client: mcp.Client) -> list[dict[str, Any]]:
    """Every `tools/list` entry as sent, across pages."""
    entries: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(1000):  # a server whose cursors never end is not followed forever
        params = mt.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = (await client.session.send_request(mt.ListToolsRequest(params=params), RawResult)).root
        tools = page.get("tools")
        if isinstance(tools, list):
            entries.extend(tool for tool in tools if isinstance(tool, dict))
        next_cursor = page.get("nextCursor")
        if not isinstance(next_cursor, str) or not next_cursor:
            break
        cursor = next_cursor
    return entries


async def call(
    client: mcp.Client,
    log: WireLog,
    name: str,
    arguments: Mapping[str, Any],
    tag: object = None,
    *,
    meta_key: str = META_KEY,
    timeout_s: float = 60.0,
) -> Exchange:
    """One `tools/call`, conditional when `tag` is not None, with its sizes on the wire."""
    meta = {meta_key: {"etag": tag}} if tag is not None else None
    params = mt.CallToolRequestParams(name=name, arguments=dict(arguments), _meta=meta)
    mark = log.mark()
    try:
        result = (await client.session.send_request(mt.CallToolRequest(params=params), RawResult, timeout_s)).root
    except Exception as exc:  # a JSON-RPC error, a result the SDK refused, a dead connection: all observations
        request_bytes, reply_bytes = _sizes(log, mark)
        error = f"{type(exc).__name__}: {short(str(exc), 160)}"
        return Exchange(tag, None, error=error, reply_bytes=reply_bytes, request_bytes=request_bytes)
    request_bytes, reply_bytes = _sizes(log, mark)
    return Exchange(tag, result, reply_bytes=reply_bytes, request_bytes=request_bytes)


def _sizes(log: WireLog, mark: int) -> tuple[int | None, int | None]:
    """(request, reply) bytes of the first tools/call since `mark`."""
    try:
        request, reply = log.exchange("tools/call", since=mark)
    except LookupError:
        return None, None
    return request.nbytes, reply.nbytes


async def _run_probes(
    client: mcp.Client, log: WireLog, obs: ToolObservations, probes: Sequence[Probe], options: CheckOptions
) -> ToolObservations:
    exchanges = dict(obs.exchanges)
    for probe in probes:
        tag = probe.tag(replace(obs, exchanges=exchanges)) if probe.tag is not None else None
        if tag is SKIP:
            continue
        arguments = obs.invalid_arguments if probe.invalid else obs.arguments
        if arguments is None:
            continue
        exchanges[probe.name] = await call(
            client, log, obs.tool, arguments, tag, meta_key=options.meta_key, timeout_s=options.timeout_s
        )
    return replace(obs, exchanges=exchanges)


async def check_server(target: Target, options: CheckOptions) -> Report:
    """Run every server scenario against every tool chosen, over one connection."""
    async with connect(target, options.era) as (client, log):
        entries = await list_tools(client)
        selection = select(entries, options.meta_key, options.calls)
        chosen = list(selection.probe)
        skipped = list(selection.skipped)
        for candidate, entry in selection.candidates:
            # A read-only tool: its first answer says whether it stamps a cache block.
            first = await call(client, log, candidate.name, candidate.arguments or {}, meta_key=options.meta_key)
            if first.result is not None and block_dict(first.result, options.meta_key) is not None:
                chosen.append((candidate, entry))
            else:
                skipped.append((candidate.name, "its answer carries no cache block"))

        observed: list[ToolObservations] = []
        for tool_call, entry in chosen:
            arguments = dict(tool_call.arguments or {})
            obs = ToolObservations(
                tool=tool_call.name,
                entry=entry,
                arguments=arguments,
                meta_key=options.meta_key,
                invalid_arguments=invalid_arguments(entry.get("inputSchema"), arguments),
            )
            observed.append(await _run_probes(client, log, obs, [p for p in PROBES if p.phase == "before"], options))

        if options.mutations and observed:
            made: list[str] = []
            for mutation in options.mutations:
                exchange = await call(
                    client,
                    log,
                    mutation.name,
                    mutation.arguments or {},
                    meta_key=options.meta_key,
                    timeout_s=options.timeout_s,
                )
                outcome = "failed" if exchange.result is None or exchange.result.get("isError") is True else "ok"
                made.append(f"{mutation.describe()} {outcome}")
            after = [p for p in PROBES if p.phase == "after"]
            observed = [
                await _run_probes(client, log, replace(obs, mutations=tuple(made)), after, options) for obs in observed
            ]
        protocol = client.protocol_version

    subjects = tuple(Subject(obs.tool, obs.arguments, judge_all(SERVER_SCENARIOS, obs)) for obs in observed)
    return Report("server", target.label, protocol, subjects, tuple(skipped))


def parse_arguments(text: str) -> dict[str, Any]:
    """`--args` JSON: an object, or a one-line error (ValueError)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--args is not JSON ({exc.msg} at column {exc.colno}): {short(text, 60)}") from None
    if not isinstance(value, dict):
        raise ValueError(f"--args must be a JSON object, not {type(value).__name__}: {short(text, 60)}")
    return value
