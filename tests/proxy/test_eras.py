"""Hosts of either era are served in their own era, whatever `--upstream-era` says.

The proxy used to keep one upstream session in one fixed era: with the default (`legacy`) a 2026-07-28
host got "invalid result" for an input request; with `--upstream-era auto` a 2025-11-25 host got no
elicitation. Each host request is now served on an upstream session of its own era and declared
capabilities (`UpstreamLink.use`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as mt
import pytest
from support.transports import LEGACY, MODERN, Era

from .conftest import Upstreams
from .hosts import mcp_host, proxy_args

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.mark.parametrize("setting", [(), ("--upstream-era", "auto")], ids=["default", "upstream-era-auto"])
@pytest.mark.parametrize("era", [MODERN, LEGACY])
async def test_a_host_gets_the_upstreams_questions_in_its_own_era(
    upstreams: Upstreams, tmp_path: Path, setting: tuple[str, ...], era: Era
) -> None:
    asked: list[str] = []

    async def on_elicit(context: Any, params: mt.ElicitRequestParams) -> mt.ElicitResult:
        asked.append(params.message)
        return mt.ElicitResult(action="accept", content={"value": "teal"})

    args = proxy_args(*setting, "--store", str(tmp_path / "proxy.db"), "--url", upstreams.tests)
    mode = "auto" if era == MODERN else "legacy"
    async with mcp_host(args, mode=mode, elicitation_callback=on_elicit) as host:
        assert host.protocol_version == era
        # 2026-07-28: the question is the call's result, and the host calls again with the answer;
        # 2025-11-25: the upstream asks the host in the middle of the call.
        tool, said = ("pick_color", "picked teal") if era == MODERN else ("ask_color", "chose teal")
        result = await host.call_tool(tool, {})
    assert not result.is_error, result
    assert [block.text for block in result.content if isinstance(block, mt.TextContent)] == [said]
    assert asked == ["Which colour?"]
