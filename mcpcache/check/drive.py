"""A reference driver for `mcpcache check --client`: the loop any client implementation runs against the
scripted server, written against two callables so it knows nothing of the client under test.

    await drive(direct=raw_caller(session), through=my_cached_call, partitions={"a", "b"})

`direct(tool, arguments)` calls a tool around the cache (the `script` and `report` calls are not reads to
cache); `through(partition, tool, arguments)` makes the call through the client under test, as the named
partition, and returns the tool result its caller got, as JSON with the wire's field names. A driver in
another language does the same: call `script`, then for each step call through the client and `report`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import mcp_types as mt
from mcp import ClientSession

from mcpcache.check.wire import RawResult

Direct = Callable[[str, dict[str, Any]], Awaitable[Mapping[str, Any]]]
Through = Callable[[str, str, dict[str, Any]], Awaitable[Mapping[str, Any]]]


def raw_caller(session: ClientSession) -> Direct:
    """`direct` for an MCP SDK session: a plain `tools/call`, its result as JSON."""

    async def direct(tool: str, arguments: dict[str, Any]) -> Mapping[str, Any]:
        params = mt.CallToolRequestParams(name=tool, arguments=arguments)
        return (await session.send_request(mt.CallToolRequest(params=params), RawResult)).root

    return direct


def as_json(result: mt.CallToolResult) -> dict[str, Any]:
    """An SDK `CallToolResult` as the JSON `report` takes."""
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def drive(direct: Direct, through: Through, partitions: Collection[str] | None = None) -> int:
    """Play the scripted server's plan; returns the number of steps. Steps of a partition not in
    `partitions` are reported as skipped (a client with no notion of partitions passes None: all run)."""
    plan = await direct("script", {})
    structured = plan.get("structuredContent")
    steps = structured.get("steps") if isinstance(structured, Mapping) else None
    if not isinstance(steps, list):
        raise RuntimeError("the server's `script` gave no steps: is this `mcpcache check --client`?")
    for step in steps:
        report: dict[str, Any] = {"key": step["key"], "step": step["step"]}
        if partitions is not None and step["partition"] not in partitions:
            report["skipped"] = True
        else:
            try:
                report["result"] = dict(await through(step["partition"], step["tool"], dict(step["arguments"])))
            except Exception as exc:  # what the caller got is what is judged, a raise included
                report["error"] = f"{type(exc).__name__}: {exc}"
        await direct("report", report)
    return len(steps)
