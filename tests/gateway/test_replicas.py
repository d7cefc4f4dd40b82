"""Two `mcpcache gateway` processes sharing one real redis-server, in front of the counting server over
HTTP, with two bearer tokens verified by the gateways' own auth (tests/gateway/conftest.py, `cluster`).

The counting server numbers every answer it gives (`fetch`), so an answer served from the shared store
keeps the number it was fetched with: the numbers say which reads reached upstream.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import fastmcp
import pytest

from .conftest import TOKENS, Cluster
from .test_gateway import block_of

pytestmark = pytest.mark.redis

PRIVATE, PUBLIC = "count_numbered_private", "count_numbered_public"


async def numbered(client: fastmcp.Client[Any], tool: str, name: str) -> tuple[int, dict[str, Any]]:
    result = await client.call_tool_mcp(tool, {"name": name})
    assert not result.is_error, result
    return result.structured_content["fetch"], block_of(result)


@pytest.mark.anyio
async def test_replicas_share_fresh_answers_and_keep_callers_apart(cluster: Cluster) -> None:
    one, two = cluster.gateways
    async with (
        fastmcp.Client(one, auth=TOKENS["alice"]) as alice_one,
        fastmcp.Client(two, auth=TOKENS["alice"]) as alice_two,
        fastmcp.Client(one, auth=TOKENS["bob"]) as bob_one,
        fastmcp.Client(two, auth=TOKENS["bob"]) as bob_two,
    ):
        # N reads of one answer within its ttl, alternating replicas: upstream is reached once.
        reads = [await numbered(client, PRIVATE, "x") for client in (alice_one, alice_two) * 3]
        fetched = {fetch for fetch, _ in reads}
        assert len(fetched) == 1
        (alice_fetch,) = fetched
        assert all(block["cacheScope"] == "private" for _, block in reads)

        # Another token is another partition: bob's private answer is his own, through either replica,
        # and alice keeps hers.
        bob_fetch, _ = await numbered(bob_two, PRIVATE, "x")
        assert bob_fetch != alice_fetch
        assert (await numbered(bob_one, PRIVATE, "x"))[0] == bob_fetch
        assert (await numbered(alice_two, PRIVATE, "x"))[0] == alice_fetch

        # A public answer is shared across callers and replicas.
        public, block = await numbered(alice_one, PUBLIC, "y")
        assert (await numbered(bob_two, PUBLIC, "y"))[0] == public
        assert block["cacheScope"] == "public"

        # Three answers were ever fetched: alice's, bob's and the public one. `count_calls` is not
        # declared, so it passes through to the upstream.
        calls = await bob_one.call_tool_mcp("count_calls", {})
    assert calls.structured_content == {"calls": 3}


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-token"])
def test_a_caller_without_a_valid_token_is_refused(cluster: Cluster, authorization: str | None) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if authorization is not None:
        headers["Authorization"] = authorization
    request = urllib.request.Request(cluster.gateways[0], json.dumps(body).encode(), headers, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 401
