"""The upstream server of the proxy tests: one FastMCP server with everything a proxy must relay.

- `rows(station, hours=240)`: the project's time series (cacheable, 60 s, tagged, read-only);
  `summarize(data, title)`: takes rows and answers their count and digest (`refs.servers.digest`), so a
  test can check that exactly the rows arrived after a reference was resolved.
- `counted(key)`: cacheable for 60 s; every run of its body is counted, and `runs(key)` (no cache block)
  tells how many there were: the count of calls that reached this server.
- `whoami()`: who asked, as the server tells (an HTTP request's basic-auth user or a digest of its bearer
  token, else the `WHO` variable of the server's environment), private and cacheable for 60 s;
  `whoami_runs()` counts its body runs.
- `steps(n)`: reports n progress steps and logs a line before answering.
- `nap(seconds)`: sleeps; `naps()` says how many naps started and how many were cancelled.
- `ask_color()`: asks the host for a colour (an elicitation request, protocol 2025-11-25) and answers what it
  chose; `pick_color()` asks the 2026-07-28 way, answering the call with an input request.
- a resource `notes://readme`, a template `notes://{name}`, and a prompt `greet(name)`.

Run as `python upstream.py stdio` or `python upstream.py http PORT`; `build()` gives the same server in
process, for comparing what a host sees through the proxy with what it sees directly.
"""

from __future__ import annotations

import base64
import hashlib
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import mcp_types as mt
from fastmcp import Context, FastMCP
from fastmcp.server.dependencies import get_http_headers

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from refs.servers import digest

from mcpcache.bench.byref import ROWS, query_answer
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies

SCRIPT = Path(__file__).resolve()
INSTRUCTIONS = "Rows and notes for the proxy tests."
README = "The readme of the proxy tests' upstream."


def build() -> FastMCP:
    server = FastMCP("proxy-upstream", instructions=INSTRUCTIONS, version="1.2.3")
    runs: Counter[str] = Counter()
    naps = {"started": 0, "cancelled": 0}
    read_only = mt.ToolAnnotations(read_only_hint=True)

    @server.tool(annotations=read_only)
    def rows(station: str, hours: int = ROWS) -> dict[str, Any]:
        """Hourly temperature and humidity at a station."""
        return query_answer(station, hours)

    @server.tool(annotations=read_only)
    def summarize(data: list[dict[str, Any]], title: str) -> dict[str, Any]:
        """How many rows arrived, and their digest."""
        runs["summarize"] += 1
        return {"title": title, "count": len(data), "digest": digest(data)}

    @server.tool(annotations=read_only)
    def counted(key: str) -> dict[str, Any]:
        """A cacheable answer whose body runs are counted."""
        runs[key] += 1
        return {"key": key, "text": f"the text of {key}"}

    @server.tool(annotations=read_only)
    def runs_of(key: str) -> int:
        """How many times `counted(key)` (or `summarize`, for key "summarize") ran."""
        return runs[key]

    @server.tool(annotations=read_only)
    def whoami() -> dict[str, Any]:
        """Who the server thinks is asking."""
        runs["whoami"] += 1
        return {"kind": "who", "user": _asker()}

    @server.tool(annotations=read_only)
    def whoami_runs() -> int:
        return runs["whoami"]

    @server.tool
    async def steps(n: int, ctx: Context) -> str:
        """Reports n progress steps, then answers."""
        await ctx.info(f"stepping {n} times")
        for i in range(n):
            await ctx.report_progress(i + 1, n, f"step {i + 1}")
        return f"{n} steps done"

    @server.tool
    async def nap(seconds: float) -> str:
        naps["started"] += 1
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            naps["cancelled"] += 1
            raise
        return "rested"

    @server.tool
    def nap_counts() -> dict[str, int]:
        return dict(naps)

    @server.tool
    async def ask_color(ctx: Context) -> str:
        """Asks the host for a colour."""
        answer = await ctx.elicit("Which colour?", response_type=str)
        return f"chose {answer.data}" if answer.action == "accept" else f"no colour ({answer.action})"

    @server.tool(output_schema=None)
    async def pick_color(ctx: Context) -> Any:
        """Asks the host for a colour with an input request as the call's result (protocol 2026-07-28)."""
        answer = (ctx.input_responses or {}).get("color")
        if not isinstance(answer, mt.ElicitResult):
            schema: Any = {"type": "object", "properties": {"value": {"type": "string"}}}
            ask = mt.ElicitRequest(params=mt.ElicitRequestFormParams(message="Which colour?", requested_schema=schema))
            return mt.InputRequiredResult(input_requests={"color": ask})
        return f"picked {(answer.content or {}).get('value')}"

    @server.resource("notes://readme", mime_type="text/plain")
    def readme() -> str:
        return README

    @server.resource("notes://{name}", mime_type="text/plain")
    def note(name: str) -> str:
        return f"note {name}"

    @server.prompt
    def greet(name: str) -> str:
        """A greeting."""
        return f"Hello, {name}. Please summarize the rows."

    install(
        server,
        ToolPolicies(
            {
                "rows": CachePolicy(ttl_ms=60_000),
                "counted": CachePolicy(ttl_ms=60_000, kind="counted"),
                "whoami": CachePolicy(ttl_ms=60_000, kind="who"),
            }
        ),
    )
    return server


def _asker() -> str:
    authorization = get_http_headers(include={"authorization"}).get("authorization", "")
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "basic":
        return base64.b64decode(credentials).decode().partition(":")[0]
    if scheme.lower() == "bearer":
        return "bearer:" + hashlib.sha256(credentials.encode()).hexdigest()[:8]  # never the token in an answer
    return os.environ.get("WHO", "nobody")


def main(argv: list[str]) -> None:
    transport, *rest = argv
    server = build()
    if transport == "stdio":
        server.run(transport="stdio", show_banner=False)
    else:
        server.run(transport="http", host="127.0.0.1", port=int(rest[0]), show_banner=False, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
