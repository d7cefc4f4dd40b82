"""The caller's declared capabilities and identity reach an HTTP upstream as declared, in both eras.

An upstream decides what it may ask of its client from what that client declared; through the gateway it
must see the caller's declaration, not the gateway's own (FastMCP's proxy client declares sampling,
elicitation and roots whoever calls, so an upstream asked a caller for what it never offered).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import mcp_types as mt
import pytest
from fastmcp import Context, FastMCP
from support.transports import ERAS, Era, ServerTarget, stock_client

from mcpcache.gateway.app import build_gateway
from mcpcache.gateway.config import quick_config

from .conftest import served_in_thread


def _seer() -> FastMCP[Any]:
    server: FastMCP[Any] = FastMCP("seer")

    @server.tool
    def what_i_see(ctx: Context) -> str:
        """The client's capabilities and name, as this server sees them."""
        caps = ctx.session.client_capabilities or mt.ClientCapabilities()
        params = ctx.session.client_params
        return json.dumps(
            {
                "sampling": caps.sampling is not None,
                "elicitation": caps.elicitation is not None,
                "roots": caps.roots is not None,
                "name": params.client_info.name if params is not None else None,
            }
        )

    return server


@pytest.fixture(scope="module")
def seer_url() -> Iterator[str]:
    with served_in_thread(_seer()) as url:
        yield url


async def _sample(context: Any, params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
    return mt.CreateMessageResult(role="assistant", content=mt.TextContent(type="text", text="hi"), model="m")


async def _roots(context: Any) -> mt.ListRootsResult:
    return mt.ListRootsResult(roots=[])


DECLARATIONS: dict[str, dict[str, Any]] = {
    "nothing": {},
    "sampling only": {"sampling_callback": _sample},
    "roots only": {"list_roots_callback": _roots},
}


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("declared", sorted(DECLARATIONS))
async def test_the_upstream_sees_what_the_caller_declared(seer_url: str, era: Era, declared: str) -> None:
    gateway = build_gateway(quick_config(url=seer_url, command=None, tools=[]))
    try:
        callbacks = DECLARATIONS[declared]
        info = mt.Implementation(name=f"caller-{declared.replace(' ', '-')}", version="1.0")
        async with stock_client(
            "mcp", ServerTarget.memory(gateway.server), era, client_info=info, **callbacks
        ) as client:
            result = await client.call_tool("what_i_see", {})
    finally:
        await gateway.aclose()
    seen = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert seen["sampling"] is ("sampling_callback" in callbacks)
    assert seen["roots"] is ("list_roots_callback" in callbacks)
    assert seen["elicitation"] is False
    assert seen["name"] == info.name
