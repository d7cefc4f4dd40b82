"""Two gateways on one store, in front of one upstream reached with different credentials, keep apart what
each fetched, for the same caller.

A gateway partitions by its callers; the credentials it sends upstream (the URL's userinfo, which httpx
sends as basic auth, or configured headers) decide which principal the upstream answers for. So the
upstream's identity in the store's keys carries a digest of them: the same caller reaching the upstream
as alice through one gateway and as bob through another gets each one's own private answer, never the
other's. The upstream is the proxy tests' server (tests/proxy/upstream.py), whose `whoami` answers who
asked, private and fresh for 60 s.
"""

from __future__ import annotations

import base64
from pathlib import Path

import fastmcp
import pytest
from proxy.upstream import build as build_upstream

from mcpcache.gateway.app import build_gateway
from mcpcache.gateway.config import parse_config
from mcpcache.stores.sqlite import SQLiteStore

from .conftest import served_in_thread

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CALLER = "caller-token-" + "c" * 20


def config_text(upstream: str, headers: str = "") -> str:
    return f"""
[auth]
kind = "static"

[[auth.tokens]]
token = "{CALLER}"
client_id = "caller"

[upstreams.up]
url = "{upstream}"
{headers}

[upstreams.up.tools.whoami]
"""


async def who(url: str) -> str:
    async with fastmcp.Client(url, auth=CALLER) as client:
        result = await client.call_tool_mcp("whoami", {})
    assert not result.is_error, result
    assert result.structured_content is not None
    user: str = result.structured_content["user"]
    return user


@pytest.mark.parametrize("carrier", ["userinfo", "header"])
async def test_one_caller_through_two_gateways_with_other_upstream_credentials_gets_each_ones_answer(
    carrier: str, tmp_path: Path
) -> None:
    def config(user: str) -> str:
        if carrier == "userinfo":
            return config_text(upstream.replace("http://", f"http://{user}:pw-{user}@", 1))
        return config_text(upstream, f'headers = {{ Authorization = "Basic {_basic(user)}" }}')

    with served_in_thread(build_upstream()) as upstream:
        stores = [SQLiteStore(tmp_path / "shared.db", namespace="gw") for _ in range(2)]
        alice, bob = (
            build_gateway(parse_config(config(user)), store=store)
            for user, store in zip(("alice", "bob"), stores, strict=True)
        )
        try:
            with served_in_thread(alice.server) as via_alice, served_in_thread(bob.server) as via_bob:
                assert await who(via_alice) == "alice"
                assert await who(via_bob) == "bob", "the gateway sending bob's credentials served alice's answer"
                assert await who(via_alice) == "alice"
        finally:
            await alice.aclose()
            await bob.aclose()


def _basic(user: str) -> str:
    return base64.b64encode(f"{user}:pw-{user}".encode()).decode()
