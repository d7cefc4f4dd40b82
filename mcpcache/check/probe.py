"""The server check's I/O: connect, list the tools, make the probe calls, hand the observations to the judges.

Every request goes out through the SDK client session's `send_request` with a result type that keeps the
JSON as it arrived, so the judges see exactly what the server sent (the SDK still refuses a result that is
not a valid `tools/call` result for the negotiated protocol; that refusal is recorded as the reply). No
answer goes through mcpcache's `ToolCache`. Sizes are counted per message at the client's transport
(`mcpcache.wire_count`), the way the benchmarks count them.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Literal, TextIO, cast

import mcp
import mcp_types as mt
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from mcpcache.check.core import Report, Stamping, Subject, judge_all
from mcpcache.check.harvest import find_arguments
from mcpcache.check.observations import Exchange, ToolObservations
from mcpcache.check.selection import ToolCall, declares_cache, invalid_arguments, select
from mcpcache.check.server_rules import PROBES, SKIP, Probe
from mcpcache.check.suite import SERVER_SCENARIOS
from mcpcache.check.wire import RawResult, block_dict, is_error, short
from mcpcache.protocol import META_KEY
from mcpcache.wire_count import CountingTransport, WireLog

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
    known_arguments: Mapping[str, Mapping[str, Any]] | None = None
    """`--args-from`: arguments by tool name, for tools chosen without `--args`."""
    mutations: tuple[ToolCall, ...] = ()
    meta_key: str = META_KEY
    era: Era = "auto"
    timeout_s: float = 60.0


@contextlib.asynccontextmanager
async def _transport(target: Target, errlog: IO[str]) -> AsyncIterator[Any]:
    if target.transport is not None:
        yield target.transport()
    elif target.url is not None:
        # No bound on one server-sent event (the SDK's default is 1 MB): a server's large answer is one event
        # on protocol 2025-11-25, and the check must read whatever the server sends.
        yield streamable_http_client(target.url, max_sse_event_size=None)
    else:
        command, *args = target.command
        yield stdio_client(mcp.StdioServerParameters(command=command, args=args), errlog=cast(TextIO, errlog))


@contextlib.asynccontextmanager
async def connect(target: Target, era: Era) -> AsyncIterator[tuple[mcp.Client, WireLog]]:
    """A connected stock `mcp.Client`, every message counted. The server's stderr goes to a temporary
    file (a server logging tracebacks for the invalid-argument probes would bury the report)."""
    log = WireLog()
    with tempfile.TemporaryFile("w+") as errlog:
        try:
            async with (
                _transport(target, errlog) as inner,
                mcp.Client(CountingTransport(inner, log), mode=era) as client,
            ):
                yield client, log
        except Exception as exc:
            last = _last_line(errlog) if target.command else None
            if last is None:
                raise
            # A stdio server that dies says why on stderr, which the SDK's error ("Connection closed") does not.
            raise ServerFailed(f"{_innermost(exc)}; the server's stderr ended with: {last}") from exc


class ServerFailed(RuntimeError):
    """The connection to a stdio server failed; the message ends with the last line the server wrote on stderr."""


def _innermost(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]  # anyio's task groups wrap the one failure that matters
    return f"{type(exc).__name__}: {exc}"


def _last_line(errlog: IO[str]) -> str | None:
    try:
        errlog.seek(0)
        lines = [line.strip() for line in errlog.read()[-8192:].splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    return lines[-1][:300] if lines else None


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
    accept_delta: Sequence[str] = (),
) -> Exchange:
    """One `tools/call`, conditional when `tag` is not None (listing `accept_delta` beside the tag when
    given), with its sizes on the wire."""
    # Not `conditional_request_meta`: a probe sends malformed tags (any JSON value) on purpose.
    meta: dict[str, Any] | None = None
    if tag is not None:
        block: dict[str, Any] = {"etag": tag}
        if accept_delta:
            block["acceptDelta"] = list(accept_delta)
        meta = {meta_key: block}
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
            client, log, obs.tool, arguments, tag, meta_key=options.meta_key, timeout_s=options.timeout_s,
            accept_delta=probe.accept_delta,
        )  # fmt: skip
    return replace(obs, exchanges=exchanges)


BETWEEN = "between-"
"""The name of the ordinary call made after the n-th mutating call when another follows: `between-<n>`."""


async def _between(
    client: mcp.Client, log: WireLog, obs: ToolObservations, index: int, options: CheckOptions
) -> ToolObservations:
    exchange = await call(
        client, log, obs.tool, obs.arguments, meta_key=options.meta_key, timeout_s=options.timeout_s
    )  # fmt: skip
    return replace(obs, exchanges={**obs.exchanges, f"{BETWEEN}{index}": exchange})


class _Run:
    """One server check's calls and what they showed, kept while the tools are chosen and probed."""

    def __init__(self, client: mcp.Client, log: WireLog, options: CheckOptions) -> None:
        self.client, self.log, self.options = client, log, options
        self.observed: list[ToolObservations] = []
        self.notes: dict[str, str] = {}
        self.skipped: list[tuple[str, str]] = []
        self.unchecked: list[str] = []
        """Tools meant to be probed that could not be (their `skipped` entry says what to add)."""
        self.answers: list[tuple[str, Mapping[str, Any]]] = []
        """Every successful answer, in order: where arguments for other tools may be found."""
        self.stamped = False
        self.answered = False

    def saw(self, tool: str, exchange: Exchange) -> None:
        result = exchange.result
        if result is None or is_error(result):
            return
        self.answered = True
        self.answers.append((tool, result))
        if block_dict(result, self.options.meta_key) is not None:
            self.stamped = True

    async def discover(self, tool_call: ToolCall, entry: Mapping[str, Any]) -> bool:
        """Call a read-only tool once: whether its answer carries a cache block (and so is worth probing)."""
        arguments = tool_call.arguments or {}
        first = await call(
            self.client, self.log, tool_call.name, arguments, meta_key=self.options.meta_key,
            timeout_s=self.options.timeout_s,
        )  # fmt: skip
        self.saw(tool_call.name, first)
        if first.result is None:
            self.skipped.append((tool_call.name, f"the call failed: {first.error}"))
            self.unchecked.append(tool_call.name)
        elif is_error(first.result):
            self.unchecked.append(tool_call.name)
            shown = json.dumps(dict(arguments), sort_keys=True)
            text = _error_line(first.result)
            self.skipped.append(
                (
                    tool_call.name,
                    f"called with {shown}, it answered an error ({text}); add --tool {tool_call.name} --args JSON",
                )
            )
        elif block_dict(first.result, self.options.meta_key) is None:
            self.skipped.append((tool_call.name, "its answer carries no cache block"))
        else:
            return True
        return False

    async def probe(self, tool_call: ToolCall, entry: Mapping[str, Any]) -> None:
        arguments = dict(tool_call.arguments or {})
        obs = ToolObservations(
            tool=tool_call.name,
            entry=entry,
            arguments=arguments,
            meta_key=self.options.meta_key,
            invalid_arguments=invalid_arguments(entry.get("inputSchema"), arguments),
        )
        before = [p for p in PROBES if p.phase == "before"]
        obs = await _run_probes(self.client, self.log, obs, before, self.options)
        for name in ("first", "second"):
            if (exchange := obs.get(name)) is not None:
                self.saw(tool_call.name, exchange)
        self.observed.append(obs)


def _error_line(result: Mapping[str, Any]) -> str:
    content = result.get("content")
    first = content[0] if isinstance(content, list) and content else None
    text = first.get("text") if isinstance(first, Mapping) else None
    return short(" ".join(str(text).split()), 80) if text is not None else "no text"


async def check_server(target: Target, options: CheckOptions) -> Report:
    """Run every server scenario against every tool chosen, over one connection."""
    async with connect(target, options.era) as (client, log):
        entries = await list_tools(client)
        selection = select(entries, options.meta_key, options.calls, options.known_arguments)
        run = _Run(client, log, options)
        run.skipped.extend(selection.skipped)
        run.unchecked.extend(name for name, why in selection.skipped if why == "not in tools/list")
        chosen = list(selection.probe)
        for candidate, entry in selection.candidates:
            if await run.discover(candidate, entry):
                chosen.append((candidate, entry))
        for tool_call, entry in chosen:
            await run.probe(tool_call, entry)

        # Tools that need arguments: look for them in what the tools called so far answered.
        for wanting in selection.wanting:
            found = find_arguments(wanting.entry.get("inputSchema"), wanting.missing, run.answers)
            if len(found) < len(wanting.missing):
                run.unchecked.append(wanting.name)
                still = tuple(name for name in wanting.missing if name not in found)
                run.skipped.append(
                    (wanting.name, wanting.hint() if not found else replace(wanting, missing=still).hint())
                )
                continue
            tool_call = ToolCall(wanting.name, {**wanting.arguments, **{k: f.value for k, f in found.items()}})
            run.notes[wanting.name] = "arguments found in listing answers: " + "; ".join(
                f.describe(prop) for prop, f in found.items()
            )
            if wanting.declared or await run.discover(tool_call, wanting.entry):
                await run.probe(tool_call, wanting.entry)

        observed = run.observed
        if options.mutations and observed:
            made: list[str] = []
            for index, mutation in enumerate(options.mutations, start=1):
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
                if index < len(options.mutations):
                    # Between two mutating calls, one ordinary call of each tool: an edit then a change of
                    # `_meta` alone exercise both the mutation rule and the `_meta` one in one run.
                    observed = [await _between(client, log, obs, index, options) for obs in observed]
            after = [p for p in PROBES if p.phase == "after"]
            observed = [
                await _run_probes(client, log, replace(obs, mutations=tuple(made)), after, options) for obs in observed
            ]
        protocol = client.protocol_version

    declared = any(declares_cache(entry, options.meta_key) for entry in entries)
    stamping: Stamping = "seen" if run.stamped or declared else "none" if run.answered else "unknown"
    subjects = tuple(
        Subject(
            obs.tool,
            obs.arguments,
            judge_all(SERVER_SCENARIOS, obs),
            note=run.notes.get(obs.tool, ""),
            revalidated=obs.current_tag is not None and obs.get("current") is not None,
        )
        for obs in observed
    )
    # A tool probed whose ordinary call failed or answered an error was not checked either.
    failed = [obs.tool for obs in observed if _first_unusable(obs)]
    unchecked = tuple(dict.fromkeys([*run.unchecked, *failed]))
    return Report("server", target.label, protocol, subjects, tuple(run.skipped), stamping, unchecked)


def _first_unusable(obs: ToolObservations) -> bool:
    first = obs.get("first")
    return first is None or first.result is None or is_error(first.result)


def parse_arguments_file(path: Path) -> dict[str, dict[str, Any]]:
    """`--args-from FILE`: a JSON object of tool name -> arguments object, or a one-line error (ValueError)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"--args-from {path}: {exc.strerror or exc}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--args-from {path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise ValueError(f"--args-from {path} must be a JSON object of tool name -> arguments object")
    return value


def parse_arguments(text: str) -> dict[str, Any]:
    """`--args` JSON: an object, or a one-line error (ValueError)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--args is not JSON ({exc.msg} at column {exc.colno}): {short(text, 60)}") from None
    if not isinstance(value, dict):
        raise ValueError(f"--args must be a JSON object, not {type(value).__name__}: {short(text, 60)}")
    return value
