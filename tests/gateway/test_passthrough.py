"""Completion and resource subscriptions pass through the gateway (FastMCP's proxy answers both with
"Method not found"): completions come from the upstream, a subscribed caller is told of its resource's
updates (through an upstream session of its own, since the one that calls tools lasts one call), and an
unsubscribed one is told nothing more."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import mcp_types as mt
import pytest
import uvicorn
from fixture_servers.everything import NAME, app
from support.transports import ServerTarget, stock_client

from mcpcache.gateway.app import build_gateway
from mcpcache.gateway.config import quick_config
from mcpcache.processes import free_port

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

WATCHED = "test://watched-resource"


@pytest.fixture(scope="module")
def everything_url() -> Iterator[str]:
    port = free_port()
    runner = uvicorn.Server(uvicorn.Config(app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=runner.run, name=f"everything-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not runner.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the everything server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        runner.should_exit = True
        thread.join(timeout=30)


@pytest.mark.anyio
async def test_completion_and_subscriptions_pass_through(everything_url: str) -> None:
    gateway = build_gateway(quick_config(url=everything_url, command=None, tools=[]))
    updates: list[str] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mt.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))
            arrived.set()

    try:
        target = ServerTarget.memory(gateway.server)
        async with stock_client("mcp", target, "2025-11-25", message_handler=on_message) as client:
            assert client.server_capabilities is not None
            assert client.server_capabilities.resources is not None
            assert client.server_capabilities.resources.subscribe is True
            assert client.server_capabilities.completions is not None
            completed = await client.complete(
                mt.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"),
                {"name": "arg1", "value": "pa"},
            )
            assert completed.completion.values == [f"pa-from-{NAME}"]

            await client.subscribe_resource(WATCHED)
            await client.call_tool("test_touch_watched", {})
            with anyio.fail_after(30):
                await arrived.wait()
            assert updates == [WATCHED]

            await client.unsubscribe_resource(WATCHED)
            await client.call_tool("test_touch_watched", {})
            await client.call_tool("test_simple_text", {})  # a round trip after the touch: nothing came
            assert updates == [WATCHED]
    finally:
        await gateway.aclose()
