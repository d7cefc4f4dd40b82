"""2026-07-28 change notifications pass through the gateway: its discovery declares the list changes and
resource subscriptions its upstreams deliver (and no others), and a caller's `subscriptions/listen` stream
is relayed to each upstream, URIs under the caller's names, events back tagged with the caller's
subscription id."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged
from support.transports import ServerTarget, stock_client

from mcpcache.gateway.app import build_gateway
from mcpcache.gateway.config import GatewayConfig, UpstreamSettings
from mcpcache.gateway.reach import reach_upstreams

from .conftest import served_in_thread
from .counting_server import build_counting_server
from .test_passthrough import everything_url as everything_url  # the module's upstream, shared

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

MODERN = "2026-07-28"


@pytest.fixture(scope="module")
def fastmcp_url() -> Iterator[str]:
    """A FastMCP server: on 2026-07-28 it serves no listen streams, so it declares no list changes."""
    with served_in_thread(build_counting_server()) as url:
        yield url


@pytest.mark.anyio
async def test_a_2026_caller_hears_of_an_upstreams_changes_through_the_gateway(everything_url: str) -> None:
    config = GatewayConfig(upstreams={"ev": UpstreamSettings(url=everything_url, namespace="ev")})
    gateway = build_gateway(config)
    try:
        assert await reach_upstreams(gateway.upstreams) == []
        async with stock_client("mcp", ServerTarget.memory(gateway.server), MODERN) as client:
            capabilities = client.server_capabilities
            assert capabilities is not None
            assert capabilities.tools is not None
            assert capabilities.tools.list_changed
            assert capabilities.prompts is not None
            assert capabilities.prompts.list_changed
            assert capabilities.resources is not None
            assert capabilities.resources.subscribe
            watched = "test://ev/watched-resource"  # the gateway's name for the upstream's test://watched-resource
            async with client.listen(tools_list_changed=True, resource_subscriptions=[watched]) as subscription:
                assert subscription.honored.tools_list_changed
                assert subscription.honored.resource_subscriptions == [watched]
                await client.call_tool("ev_test_trigger_tool_change", {})
                with anyio.fail_after(30):
                    assert await anext(subscription) == ToolsListChanged()
                await client.call_tool("ev_test_touch_watched", {})
                with anyio.fail_after(30):
                    assert await anext(subscription) == ResourceUpdated(watched)
            async with client.listen(prompts_list_changed=True) as narrow:
                await client.call_tool("ev_test_trigger_tool_change", {})
                await client.call_tool("ev_test_trigger_prompt_change", {})
                with anyio.fail_after(30):
                    first = await anext(narrow)
                assert not isinstance(first, ToolsListChanged)  # never a kind the caller did not ask for
    finally:
        await gateway.aclose()


@pytest.mark.anyio
async def test_the_gateway_declares_no_list_changes_its_upstream_does_not_deliver(fastmcp_url: str) -> None:
    gateway = build_gateway(GatewayConfig(upstreams={"up": UpstreamSettings(url=fastmcp_url)}))
    try:
        assert await reach_upstreams(gateway.upstreams) == []
        async with stock_client("mcp", ServerTarget.memory(gateway.server), MODERN) as client:
            capabilities = client.server_capabilities
            assert capabilities is not None
            assert capabilities.tools is not None
            assert not capabilities.tools.list_changed
            async with client.listen(tools_list_changed=True) as subscription:
                assert not subscription.honored.tools_list_changed  # acknowledged, nothing honored
    finally:
        await gateway.aclose()
