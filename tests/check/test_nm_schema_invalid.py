"""nm-schema judges a stub as the MCP SDK's client does: an output schema the metaschema refuses (here a
numeric `title`) makes the client refuse every reply, so a stub sent under it does not "pass the output
schema", and the full answer a server sends instead is what conforms."""

from __future__ import annotations

from typing import Any

import pytest
from fastmcp import FastMCP
from mcp.client._memory import InMemoryTransport

from mcpcache.check.probe import CheckOptions, Target, check_server
from mcpcache.check.selection import ToolCall
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import cache_meta
from mcpcache.server.stubs import StubCheck, StubChecks

pytestmark = pytest.mark.anyio

# Valid for iter_errors (the stub {"kind": "doc"} passes it), invalid for check_schema (title must be a string).
SCHEMA: dict[str, Any] = {"type": "object", "title": 5, "properties": {"kind": {"type": "string"}}}


class _Unchecked(StubChecks):
    def get(self, tool: str, schema: Any) -> StubCheck:
        return StubCheck(None)


def _server(*, checked: bool) -> FastMCP:
    server = FastMCP("invalid-schema")

    @server.tool(output_schema=SCHEMA, meta=cache_meta(ttl_ms=1000))
    def doc(key: str) -> dict[str, Any]:
        return {"kind": "doc", "key": key, "text": "x" * 50}

    middleware = install(server)
    if not checked:
        middleware.stubs = _Unchecked()
    return server


@pytest.mark.parametrize("checked", [True, False], ids=["full-answer", "stub-sent"])
async def test_a_schema_the_metaschema_refuses_refuses_the_stub(checked: bool) -> None:
    server = _server(checked=checked)
    target = Target.of("in memory", lambda: InMemoryTransport(server._mcp_server))
    report = await check_server(target, CheckOptions(calls=(ToolCall("doc", {"key": "k"}),)))
    found = {v.scenario: v for v in next(s for s in report.subjects if s.name == "doc").verdicts}
    if checked:
        assert found["not-modified"].status == "pass", found["not-modified"]
        assert found["nm-schema"].status == "pass", found["nm-schema"]
    else:
        assert found["nm-schema"].status == "fail", found["nm-schema"]
