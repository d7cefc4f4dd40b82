"""Everything that is not a tool answer passes through the proxy as the upstream offers it, and a tool
answer within its freshness is served without reaching the upstream.

The host is a stock `fastmcp.Client` on the initialize handshake (what desktop hosts speak today) that
starts `python -m mcpcache proxy -- python upstream.py stdio`; what it sees is compared with what the
same server, in this process, shows a direct client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types as mt
import pytest
from fastmcp.client.elicitation import ElicitResult
from support.transports import LEGACY, MODERN, ServerTarget, stock_client

from .conftest import Upstreams
from .hosts import PYTHON, fastmcp_host, mcp_host, proxy_args
from .upstream import INSTRUCTIONS, SCRIPT, build

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _dumped(listing: Any) -> list[dict[str, Any]]:
    return [item.model_dump(by_alias=True, exclude_none=True) for item in listing]


async def test_the_host_sees_the_upstream_and_a_fresh_answer_never_reaches_it(tmp_path: Path) -> None:
    progress: list[tuple[float, float | None, str | None]] = []
    logged: list[str] = []
    asked: list[str] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def on_log(message: Any) -> None:
        logged.append(str(message.data.get("msg") if isinstance(message.data, dict) else message.data))

    async def on_elicit(message: str, response_type: Any, params: Any, context: Any) -> Any:
        asked.append(message)
        return ElicitResult(action="accept", content={"value": "teal"})

    args = proxy_args("--store", str(tmp_path / "proxy.db"), upstream=[PYTHON, str(SCRIPT), "stdio"])
    host = fastmcp_host(args, mode="legacy", log_handler=on_log, elicitation_handler=on_elicit)
    async with host, stock_client("fastmcp", ServerTarget.memory(build()), LEGACY) as direct:
        # Who the server is, and everything it lists, as the upstream says it.
        assert host.initialize_result is not None
        assert direct.initialize_result is not None
        assert host.initialize_result.server_info.name == "proxy-upstream"
        assert host.initialize_result.server_info.version == "1.2.3"
        assert host.initialize_result.instructions == INSTRUCTIONS
        assert _dumped(await host.list_tools()) == _dumped(await direct.list_tools())
        assert _dumped(await host.list_resources()) == _dumped(await direct.list_resources())
        assert _dumped(await host.list_resource_templates()) == _dumped(await direct.list_resource_templates())
        assert _dumped(await host.list_prompts()) == _dumped(await direct.list_prompts())

        # Resources, templates and prompts.
        assert _dumped(await host.read_resource("notes://readme")) == _dumped(
            await direct.read_resource("notes://readme")
        )
        assert [c.text for c in await host.read_resource("notes://seven")] == ["note seven"]  # type: ignore[union-attr]
        prompt = await host.get_prompt("greet", {"name": "Ada"})
        assert prompt.model_dump() == (await direct.get_prompt("greet", {"name": "Ada"})).model_dump()

        # A tool answer: exactly what the upstream sends, cache block included; the second call within its
        # 60 s freshness is served by the proxy, so the body ran once.
        first = await host.call_tool_mcp("counted", {"key": "k"})
        again = await host.call_tool_mcp("counted", {"key": "k"})
        expected = await direct.call_tool_mcp("counted", {"key": "k"})
        assert first.model_dump() == expected.model_dump()
        assert again.model_dump() == first.model_dump()
        assert (first.meta or {})["io.modelcontextprotocol/cache"]["ttlMs"] == 60_000
        assert (await host.call_tool("runs_of", {"key": "k"})).data == 1

        # Progress, logging and an elicitation, relayed during one call each.
        done = await host.call_tool("steps", {"n": 3}, progress_handler=on_progress)
        assert done.data == "3 steps done"
        assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
        assert any("stepping 3 times" in line for line in logged)
        chosen = await host.call_tool("ask_color", {})
        assert chosen.data == "chose teal"
        assert asked == ["Which colour?"]

        # Cancellation: the host gives up on a long call; the upstream's call is cancelled too.
        with pytest.raises(Exception, match=r"(?i)timed out|timeout"):
            await host.call_tool("nap", {"seconds": 60}, timeout=1.0)
        counts: Any = None
        for _ in range(300):  # generous: the cancellation crosses two processes
            counts = (await host.call_tool("nap_counts", {})).data
            if counts == {"started": 1, "cancelled": 1}:
                break
            await anyio.sleep(0.1)
        assert counts == {"started": 1, "cancelled": 1}


async def test_on_the_2026_era_an_input_request_reaches_the_host_and_its_answer_the_upstream(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    # A host and an upstream that both speak 2026-07-28 (`--upstream-era auto`): an upstream that needs input
    # answers the call with an input request; the host answers it and repeats the call, which the proxy
    # sends upstream as it came (never through the cache).
    asked: list[str] = []

    async def on_elicit(context: Any, params: mt.ElicitRequestParams) -> mt.ElicitResult:
        asked.append(params.message)
        return mt.ElicitResult(action="accept", content={"value": "teal"})

    args = proxy_args("--upstream-era", "auto", "--store", str(tmp_path / "proxy.db"), "--url", upstreams.tests)
    async with mcp_host(args, elicitation_callback=on_elicit) as host:
        assert host.protocol_version == MODERN
        picked = await host.call_tool("pick_color", {})
        assert not picked.is_error, picked
        assert [block.text for block in picked.content if isinstance(block, mt.TextContent)] == ["picked teal"]
        assert asked == ["Which colour?"]
        # The upstream speaks 2026-07-28 too: its answers carry its own name, and are cached like any other.
        counted = await host.call_tool("counted", {"key": "modern"})
        assert (counted.meta or {})[mt.SERVER_INFO_META_KEY]["name"] == "proxy-upstream"
        assert counted.model_dump() == (await host.call_tool("counted", {"key": "modern"})).model_dump()
        assert (await host.call_tool("runs_of", {"key": "modern"})).structured_content == {"result": 1}
