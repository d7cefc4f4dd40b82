"""The gateway's front tier (fresh hits held decoded in front of the partition's cache) in front of the
delta history: a caller served from the front still gets not-modified for the current tag, a delta that
rebuilds the answer for an older one, and the full answer otherwise."""

from __future__ import annotations

import logging
from pathlib import Path

import fastmcp
import pytest

from mcpcache.client.entries import TOOLS_GROUP
from mcpcache.demo.notebooks import generate_notebook
from mcpcache.gateway.config import AuthSettings, StaticToken, ToolSettings
from mcpcache.protocol import META_KEY, conditional_request_meta
from mcpcache.stores import MemoryStore
from mcpcache.stores.items import Match

from .conftest import served_in_thread
from .deltas_support import (
    ARGS,
    NOTEBOOK,
    READ,
    asking,
    delta_gateway,
    delta_of,
    edit,
    patched,
    same_answer,
    tag_of,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    generate_notebook(tmp_path / NOTEBOOK, 8, seed=5)  # small enough to be held in front
    return tmp_path


def _front_hits(caplog: pytest.LogCaptureFixture) -> int:
    return sum("front: fresh_hit" in record.getMessage() for record in caplog.records)


async def test_a_front_hit_answers_not_modified_a_delta_and_the_full_answer_as_the_store_would(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tools = {READ: ToolSettings(ttl_ms=60_000, scope="public", kind="notebook.read", deltas=True)}
    store = MemoryStore()
    gateway = delta_gateway(folder, store, tools=tools)
    caplog.set_level(logging.DEBUG, logger="mcpcache")
    async with fastmcp.Client(gateway) as client:
        held = await client.call_tool_mcp(READ, ARGS)
        await edit(client, 3, held.structured_content["cells"][3]["source"] + "\nprint('edited')")
        # The upstream knows nothing of caching: the cached answers go (the history stays), as a clear does.
        assert await store.remove_matching(Match(TOOLS_GROUP)) >= 1
        full = await client.call_tool_mcp(READ, ARGS)
        assert tag_of(full) != tag_of(held)
        again = await client.call_tool_mcp(READ, ARGS)  # a fresh hit: held in front from now on
        before = _front_hits(caplog)
        current = await client.call_tool_mcp(READ, ARGS, meta=conditional_request_meta(tag_of(full)))
        reply = await client.call_tool_mcp(READ, ARGS, meta=asking(tag_of(held)))
        plain = await client.call_tool_mcp(READ, ARGS, meta=conditional_request_meta(tag_of(held)))
        error = await client.call_tool_mcp("edit_cell", {"path": NOTEBOOK, "index": 10_000, "source": "x"})
        assert _front_hits(caplog) - before == 3, "these were not answered from the front tier"
    assert same_answer(again, full)
    assert (current.meta or {})[META_KEY].get("notModified") is True
    assert current.content == []
    rebuilt = patched(held, reply)
    assert same_answer(rebuilt, full)
    assert tag_of(reply) == tag_of(full)
    assert delta_of(plain) is None
    assert same_answer(plain, full)
    assert tag_of(plain) == tag_of(full)
    assert error.is_error


TOKENS = {"alice": "alice-" + "a" * 24, "bob": "bob-" + "b" * 24}


async def test_a_front_hit_never_sends_one_partition_a_delta_against_anothers_answer(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Private answers, two callers: each partition's fresh hits are held in front apart, and a caller
    sending the other's tag from the front gets the full answer (its history never saw that tag)."""
    auth = AuthSettings(kind="static", tokens=[StaticToken(token=t, client_id=who) for who, t in TOKENS.items()])
    tools = {READ: ToolSettings(ttl_ms=60_000, scope="private", kind="notebook.read", deltas=True)}
    store = MemoryStore()
    caplog.set_level(logging.DEBUG, logger="mcpcache")
    with served_in_thread(delta_gateway(folder, store, tools=tools, auth=auth)) as url:
        async with (
            fastmcp.Client(url, auth=TOKENS["alice"]) as alice,
            fastmcp.Client(url, auth=TOKENS["bob"]) as bob,
        ):
            bobs = await bob.call_tool_mcp(READ, ARGS)
            await edit(bob, 3, "secret = 'bob'")
            assert await store.remove_matching(Match(TOOLS_GROUP)) >= 1
            for _ in range(2):  # bob's new answer: a miss, then a fresh hit held in front
                bobs_new = await bob.call_tool_mcp(READ, ARGS)
            alices = await alice.call_tool_mcp(READ, ARGS)
            await alice.call_tool_mcp(READ, ARGS)  # held in front for alice too
            before = _front_hits(caplog)
            asked = await alice.call_tool_mcp(READ, ARGS, meta=asking(tag_of(bobs)))
            bob_patched = patched(bobs, await bob.call_tool_mcp(READ, ARGS, meta=asking(tag_of(bobs))))
            assert _front_hits(caplog) - before == 2, "these were not answered from the front tier"
    assert delta_of(asked) is None
    assert same_answer(asked, alices)
    assert same_answer(bob_patched, bobs_new)
