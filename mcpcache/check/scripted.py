"""The scripted server of `mcpcache check --client`: it plays `client_rules`' scripts to whatever client
is pointed at it, records what each request carried, and judges the client when it is done.

Three tools, on the MCP SDK's low-level `Server` (so every reply is exactly the one planned):
- `script()`: the plan, as structured content: for each step, the call to make and the partition to make it as;
- `read(key)`: answers each step's requests with the step's planned replies;
- `report(key, step, result | error | skipped)`: what the client's caller got for that step; it closes the
  step, so the requests that follow belong to the next one.

A driver (see `mcpcache.check.drive`) makes the plan's calls through the client under test and reports
each outcome by calling `report` around the cache. The server's own judgement needs nothing but the
requests it saw and those reports.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as mt
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from mcpcache.check.client_rules import (
    CLIENT_SCENARIOS,
    KEYED_TOOL,
    KIND,
    NONCE,
    OUTPUT_SCHEMA,
    TOOL,
    WRITE_TOOL,
    Script,
    ScriptRecord,
    StepRecord,
    planned_result,
    scripts,
)
from mcpcache.check.core import Report, Subject
from mcpcache.delta import FORMAT
from mcpcache.protocol import META_KEY, accepted_delta_formats

SCRIPT_TOOL = "script"
REPORT_TOOL = "report"
INSTRUCTIONS = (
    "mcpcache check --client: call `script` (directly, not through your cache), then make each step's call "
    "through the client under test as the step's partition, and after each step call `report` (directly) "
    "with what the caller got."
)


@dataclass
class ClientCheck:
    """The state of one client check: the scripts, what each step saw, and when it is over."""

    meta_key: str = META_KEY
    plan: tuple[Script, ...] = field(default_factory=scripts)
    records: dict[str, list[StepRecord]] = field(default_factory=dict)
    calls: int = 0
    protocol: str | None = None
    finished: anyio.Event = field(default_factory=anyio.Event)
    """Set when every step has been reported."""

    def __post_init__(self) -> None:
        for script in self.plan:
            self.records[script.key] = [StepRecord() for _ in script.steps]

    def script(self, key: str) -> Script | None:
        return next((s for s in self.plan if s.key == key), None)

    def open_step(self, key: str) -> int:
        """The step requests for `key` belong to now: the first one not yet reported."""
        steps = self.records[key]
        return next((i for i, step in enumerate(steps) if not step.reported), len(steps))

    def steps_json(self) -> list[dict[str, Any]]:
        return [
            {
                "key": s.key,
                "step": index + 1,
                "partition": step.partition,
                "tool": step.tool,
                "arguments": step.arguments(s.key),
            }
            for s in self.plan
            for index, step in enumerate(s.steps)
        ]

    def report(self) -> Report:
        subject = Subject(
            "client",
            None,
            tuple(
                item.scenario.verdict(ScriptRecord(item.script, self.records[item.script.key], self.meta_key))
                for item in CLIENT_SCENARIOS
            ),
            note=f"{self.calls} tool calls received",
        )
        return Report("client", "the client connected to the scripted server", self.protocol, (subject,))


def _text(text: str) -> list[mt.TextContent]:
    return [mt.TextContent(type="text", text=text)]


def _refuse(text: str) -> mt.CallToolResult:
    return mt.CallToolResult(content=_text(text), is_error=True)


def _sent_tag(meta: object, meta_key: str) -> object:
    """The `etag` the request's block carried, as sent (malformed values included); None without one."""
    if isinstance(meta, Mapping):
        block = meta.get(meta_key)
        if isinstance(block, Mapping):
            return block.get("etag")
    return None


TOOLS = [
    mt.Tool(
        name=SCRIPT_TOOL,
        description="The steps to make, in order (call it directly, not through a cache).",
        input_schema={"type": "object", "properties": {}},
    ),
    mt.Tool(
        name=TOOL,
        description="A document the scripted server answers as each step plans.",
        input_schema={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        output_schema=OUTPUT_SCHEMA,
        annotations=mt.ToolAnnotations(read_only_hint=True),
    ),
    mt.Tool(
        name=WRITE_TOOL,
        description="A write: no annotations, and its answer carries no cache block.",
        input_schema={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    ),
    mt.Tool(
        name=KEYED_TOOL,
        description="A document whose declaration names its key arguments malformedly (both fields).",
        input_schema={
            "type": "object",
            "properties": {"key": {"type": "string"}, NONCE: {"type": "string"}},
            "required": ["key"],
        },
        output_schema=OUTPUT_SCHEMA,
        annotations=mt.ToolAnnotations(read_only_hint=True),
        _meta={
            META_KEY: {"ttlMs": 600_000, "cacheScope": "private", "keyArguments": ["key"], "ignoreArguments": [NONCE]}
        },
    ),
    mt.Tool(
        name=REPORT_TOOL,
        description="What the caller got for a step: result (the tool result as JSON), error, or skipped.",
        input_schema={
            "type": "object",
            "properties": {
                "key": {"type": "string"},
                "step": {"type": "integer"},
                "result": {"type": "object"},
                "error": {"type": "string"},
                "skipped": {"type": "boolean"},
            },
            "required": ["key", "step"],
        },
    ),
]


def build_scripted_server(check: ClientCheck, *, calls: int | None = None) -> Server[Any]:
    """The scripted server over `check`; with `calls`, `check.finished` is also set after that many calls."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListToolsResult:
        return mt.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: ServerRequestContext[Any], params: mt.CallToolRequestParams) -> mt.CallToolResult:
        check.calls += 1
        try:
            return _answer(check, params)
        finally:
            if calls is not None and check.calls >= calls:
                check.finished.set()

    return Server("mcpcache-check-client", instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool)


def _answer(check: ClientCheck, params: mt.CallToolRequestParams) -> mt.CallToolResult:
    arguments = params.arguments or {}
    if params.name == SCRIPT_TOOL:
        steps = check.steps_json()
        return mt.CallToolResult(content=_text(json.dumps(steps)), structured_content={"steps": steps})
    key = arguments.get("key")
    script = check.script(key) if isinstance(key, str) else None
    if script is None:
        return _refuse(f"unknown key {key!r}; call `script` for the plan")
    records = check.records[script.key]
    index = check.open_step(script.key)
    if params.name in (TOOL, WRITE_TOOL, KEYED_TOOL):
        if index >= len(script.steps):
            return _refuse(f"every step of {script.key!r} was already reported")
        step, record = script.steps[index], records[index]
        record.sent_tags.append(_sent_tag(params.meta, check.meta_key))
        accepts = FORMAT in accepted_delta_formats(params.meta, check.meta_key)
        record.accepted.append(accepts)
        reply = step.replies[min(len(record.replies), len(step.replies) - 1)]
        record.replies.append(reply)
        if reply.kind == "jsonrpc-error":
            raise MCPError(-32603, f"{script.key}: the scripted server fails this request (a JSON-RPC error)")
        wire = planned_result(script.key, step.partition, reply, check.meta_key, accepts_delta=accepts)
        return mt.CallToolResult.model_validate(wire)
    if params.name == REPORT_TOOL:
        step_number = arguments.get("step")
        if step_number != index + 1:
            return _refuse(f"step {step_number} of {script.key!r} reported out of order; step {index + 1} is open")
        record = records[index]
        record.reported = True
        record.skipped = arguments.get("skipped") is True
        error = arguments.get("error")
        record.error = error if isinstance(error, str) else None
        result = arguments.get("result")
        record.served = result if isinstance(result, Mapping) else None
        if all(step.reported for steps in check.records.values() for step in steps):
            check.finished.set()
        return mt.CallToolResult(content=_text(f"step {index + 1} of {script.key!r} recorded"))
    return _refuse(f"unknown tool {params.name!r}")


# -- serving it ------------------------------------------------------------------------------------


def serve_client_check(*, http_port: int | None = None, calls: int | None = None, meta_key: str = META_KEY) -> Report:
    """Serve the scripted server over stdio (until the client disconnects, or after `calls` calls) or over
    streamable HTTP on 127.0.0.1 (until every step is reported, or after `calls` calls); then judge."""
    check = ClientCheck(meta_key=meta_key)
    server = build_scripted_server(check, calls=calls)
    if http_port is None:
        anyio.run(_serve_stdio, server, check, calls)
    else:
        anyio.run(_serve_http, server, check, http_port)
    return check.report()


async def _serve_stdio(server: Server[Any], check: ClientCheck, calls: int | None) -> None:
    from mcp.server.stdio import stdio_server

    async with anyio.create_task_group() as tg, stdio_server() as (read_stream, write_stream):

        async def stop_after_calls() -> None:
            await check.finished.wait()
            if calls is not None and check.calls >= calls:
                await anyio.sleep(0.2)  # let the last reply go out
                tg.cancel_scope.cancel()

        tg.start_soon(stop_after_calls)
        await server.run(read_stream, write_stream, server.create_initialization_options())
        tg.cancel_scope.cancel()


async def _serve_http(server: Server[Any], check: ClientCheck, port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    web = uvicorn.Server(config)
    print(f"mcpcache check --client: serving http://127.0.0.1:{port}/mcp", file=sys.stderr, flush=True)
    async with anyio.create_task_group() as tg:

        async def stop_when_finished() -> None:
            await check.finished.wait()
            await anyio.sleep(0.2)  # let the last reply go out
            web.should_exit = True

        tg.start_soon(stop_when_finished)
        await web.serve()
        tg.cancel_scope.cancel()


__all__ = ["KIND", "ClientCheck", "build_scripted_server", "serve_client_check"]
