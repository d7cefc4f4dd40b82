"""Two users' proxies on one store never see each other's private answers, whatever carries the credential.

Each test starts two `mcpcache proxy` processes on one SQLite file, the way two hosts (two users, or two
tokens of one user) would share a cache folder, in front of the proxy tests' upstream (`upstream.py`), whose
`whoami` answers who asked (private, fresh for 60 s). The credential travels three ways a user writes it:
in the URL's userinfo (httpx sends it as basic auth), as a `--header`, and in a stdio upstream's environment
(named by `--server-id`, so the endpoint alone no longer keeps the users apart). Each user must get their
own answer, each user's second read must still be a fresh hit, and no credential may be kept in clear.
(`--trust-annotations`: counting runs with the read-only `whoami_runs` must not end the answers' freshness.)
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import fastmcp
import pytest
from fastmcp.client.transports import StdioTransport

from .conftest import Upstreams
from .hosts import PYTHON, REPO, proxy_args
from .upstream import SCRIPT

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRETS = ("pw-alice-1f0c", "pw-bob-93ab", "token-alice-5d1e", "token-bob-77c2")


@contextlib.asynccontextmanager
async def host(args: Sequence[str], env: Mapping[str, str] | None = None) -> AsyncIterator[fastmcp.Client[Any]]:
    """A stock host starting the proxy with `env` added to this process's environment."""
    transport = StdioTransport(PYTHON, list(args), env={**os.environ, **(env or {})}, cwd=str(REPO), keep_alive=False)
    async with fastmcp.Client(transport, mode="legacy") as client:
        yield client


async def who(client: fastmcp.Client[Any]) -> str:
    result = await client.call_tool_mcp("whoami", {})
    assert not result.is_error, result
    assert result.structured_content is not None
    user: str = result.structured_content["user"]
    return user


async def runs(client: fastmcp.Client[Any]) -> int:
    result = await client.call_tool_mcp("whoami_runs", {})
    assert result.structured_content is not None
    count: int = result.structured_content["result"]
    return count


def with_userinfo(url: str, user: str, password: str) -> str:
    return url.replace("http://", f"http://{user}:{password}@", 1)


def assert_no_secret_kept(store: Path) -> None:
    # Everything the store holds (keys, labels, metadata, bodies), read back through SQLite.
    with contextlib.closing(sqlite3.connect(store)) as db:
        tables = [row[0] for row in db.execute("select name from sqlite_master where type = 'table'")]
        text = "\n".join(repr(row) for table in tables for row in db.execute(f'select * from "{table}"'))
    assert text, "the store holds the answers"
    for secret in SECRETS:
        assert secret not in text


@pytest.mark.parametrize("carrier", ["userinfo", "header"])
async def test_two_users_proxies_on_one_store_keep_their_private_answers_apart(
    carrier: str, upstreams: Upstreams, tmp_path: Path
) -> None:
    store = tmp_path / "shared.db"

    def upstream_of(user: str, password: str, token: str) -> list[str]:
        if carrier == "userinfo":
            return ["--url", with_userinfo(upstreams.tests, user, password)]
        return ["--url", upstreams.tests, "--header", f"Authorization: Bearer {token}"]

    alice = proxy_args("--store", str(store), "--trust-annotations", *upstream_of("alice", SECRETS[0], SECRETS[2]))
    bob = proxy_args("--store", str(store), "--trust-annotations", *upstream_of("bob", SECRETS[1], SECRETS[3]))
    expected = {"alice": "alice", "bob": "bob"}
    if carrier == "header":
        expected = {
            who: "bearer:" + hashlib.sha256(token.encode()).hexdigest()[:8]
            for who, token in zip(expected, SECRETS[2:], strict=True)
        }
    async with host(alice) as alice_host, host(bob) as bob_host:
        before = await runs(alice_host)
        assert await who(alice_host) == expected["alice"]
        assert await who(bob_host) == expected["bob"], "bob's host was served alice's private answer"
        assert await who(alice_host) == expected["alice"]
        assert await who(bob_host) == expected["bob"]
        # One run of the tool per user: each user's second read was a fresh hit of their own answer.
        assert await runs(alice_host) - before == 2
    assert_no_secret_kept(store)


async def test_two_environments_behind_one_server_id_keep_their_private_answers_apart(tmp_path: Path) -> None:
    # A stdio upstream named by --server-id: the endpoint (which includes the environment) no longer tells
    # the two apart, so the partition must.
    store = tmp_path / "shared.db"
    args = proxy_args(
        "--store",
        str(store),
        "--trust-annotations",
        "--server-id",
        "rows-server",
        upstream=[PYTHON, str(SCRIPT), "stdio"],
    )
    async with host(args, {"WHO": "alice", "SECRET": SECRETS[0]}) as alice_host:
        assert await who(alice_host) == "alice"
        assert await who(alice_host) == "alice"
        assert await runs(alice_host) == 1, "the second read was a fresh hit"
    async with host(args, {"WHO": "bob", "SECRET": SECRETS[1]}) as bob_host:
        assert await who(bob_host) == "bob", "bob's host was served alice's private answer"
    async with host(args, {"WHO": "alice", "SECRET": SECRETS[0]}) as alice_again:
        assert await who(alice_again) == "alice"
        assert await runs(alice_again) == 0, "the same environment is the same user: a fresh hit"
    assert_no_secret_kept(store)
