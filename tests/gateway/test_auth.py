"""The verifiers the configuration builds (FastMCP's own), and the partitions of what they verify."""

from __future__ import annotations

import pytest
from fastmcp.server.auth.providers.jwt import RSAKeyPair

from mcpcache.gateway.app import build_auth
from mcpcache.gateway.config import parse_config
from mcpcache.gateway.decisions import partition_of
from mcpcache.gateway.middleware import principal_of

UPSTREAM = '[upstreams.nb]\nurl = "http://127.0.0.1:8000/mcp"\n'


@pytest.mark.anyio
async def test_static_tokens_become_one_partition_per_caller() -> None:
    text = (
        UPSTREAM + '[auth]\nkind = "static"\n[[auth.tokens]]\ntoken = "t-alice"\nclient_id = "alice"\n'
        '[[auth.tokens]]\ntoken_env = "BOB_TOKEN"\nclient_id = "bob"\nscopes = ["read"]\n'
    )
    environ = {"BOB_TOKEN": "t-bob"}
    verifier = build_auth(parse_config(text, environ=environ).auth, environ)
    assert verifier is not None
    alice, bob = await verifier.verify_token("t-alice"), await verifier.verify_token("t-bob")
    assert alice is not None
    assert bob is not None
    assert await verifier.verify_token("t-mallory") is None
    assert partition_of(principal_of(alice), "principal") != partition_of(principal_of(bob), "principal")


@pytest.mark.anyio
async def test_jwts_of_one_subject_share_a_partition_unless_partitioned_by_token() -> None:
    keys = RSAKeyPair.generate()
    text = (
        UPSTREAM + '[auth]\nkind = "jwt"\n[auth.jwt]\npublic_key = """' + keys.public_key + '"""\n'
        'issuer = "https://id.example"\naudience = "gateway"\n'
    )
    verifier = build_auth(parse_config(text).auth, {})
    assert verifier is not None

    def token(subject: str, lifetime: int) -> str:
        return keys.create_token(subject, "https://id.example", "gateway", ["read"], lifetime)

    first = await verifier.verify_token(token("alice", 3600))
    refreshed = await verifier.verify_token(token("alice", 7200))
    other = await verifier.verify_token(token("bob", 3600))
    assert first is not None
    assert refreshed is not None
    assert other is not None
    assert await verifier.verify_token(RSAKeyPair.generate().create_token("alice", audience="gateway")) is None
    same = [principal_of(t) for t in (first, refreshed)]
    assert partition_of(same[0], "principal") == partition_of(same[1], "principal")
    assert partition_of(same[0], "token") != partition_of(same[1], "token")
    assert partition_of(principal_of(other), "principal") != partition_of(same[0], "principal")
