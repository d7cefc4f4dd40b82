"""The history of answers sent with tags (`mcpcache.server.history`): what a version holds and gives back,
the bounds (bytes overall, versions per key, an answer too large to keep), least recently used out,
partitions kept apart, and the memory it really holds staying near what it counts, over 1,000 edits
through a real FastMCP server.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import OrderedDict
from typing import Any

import fastmcp
import mcp_types as mt
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.transports import MODERN, ServerTarget, stock_client

from mcpcache.delta import answer_document
from mcpcache.protocol import META_KEY, conditional_request_meta, parse_cache_block
from mcpcache.server.history import (
    ANONYMOUS,
    PUBLIC,
    AnswerHistory,
    HistoryKey,
    Partition,
    Version,
    version_of,
)
from server.notes import Notes, build

TAGS = [f'W/"{n:032x}"' for n in range(1, 40)]


def key(tool: str = "t", arguments: bytes = b"{}", partition: Partition = ANONYMOUS) -> HistoryKey:
    return HistoryKey(partition, tool, arguments)


def answer(text: str, structured: Any = None, meta: dict[str, Any] | None = None) -> Version:
    version = version_of([mt.TextContent(type="text", text=text)], structured, meta)
    assert version is not None
    return version


# What a version holds --------------------------------------------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | finite | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=25,
)


@settings(deadline=None, max_examples=150)
@given(st.text(), json_values, st.dictionaries(st.text(max_size=6), json_values, max_size=3))
def test_a_version_gives_back_the_document_of_the_answer_it_was_made_from(
    text: str, structured: Any, meta: dict[str, Any]
) -> None:
    image = mt.ImageContent(type="image", data="aGk=", mime_type="image/png")
    content = [mt.TextContent(type="text", text=text), image]
    version = version_of(content, structured, meta)
    assert version is not None
    assert version.document() == answer_document(content, structured, meta)
    assert version.document() is not version.document()  # built anew: a caller may keep it


def test_what_the_tool_does_with_its_objects_afterwards_does_not_change_a_version() -> None:
    structured = {"kind": "doc", "cells": [{"source": "x = 1"}]}
    meta = {"example.com/own": {"n": 1}}
    version = version_of([{"type": "text", "text": "x = 1", "annotations": {"priority": 1}}], structured, meta)
    assert version is not None
    before = version.document()
    structured["cells"][0]["source"] = "changed"  # type: ignore[index]
    meta["example.com/own"]["n"] = 2
    assert version.document() == before


def test_the_cache_block_is_not_part_of_a_version() -> None:
    version = version_of([], {"kind": "k"}, {META_KEY: {"etag": TAGS[0]}, "other": 1})
    assert version is not None
    assert version.document() == {"content": [], "structuredContent": {"kind": "k"}, "_meta": {"other": 1}}


@pytest.mark.parametrize("structured", [{"n": 2**70}, {1: "not a string key"}, {"x": float("nan")}, {"s": "\ud800"}])
def test_an_answer_with_no_json_form_is_never_a_version(structured: Any) -> None:
    assert version_of([], structured, None) is None


def test_a_version_counts_what_it_holds() -> None:
    ascii_text, emoji_text = "a" * 10_000, "a" * 9_999 + "\N{GRINNING FACE}"
    small, wide = answer(ascii_text), answer(emoji_text)
    # One character beyond U+FFFF makes Python store four bytes for every character: counted as held.
    assert wide.size - small.size >= 3 * 9_999
    assert small.json_size >= 10_000


@pytest.mark.parametrize("wrapped", [False, True])
def test_structured_content_that_the_text_block_holds_is_kept_once(wrapped: bool) -> None:
    value = {"kind": "doc", "lines": ["x" * 1000, "y"]}
    text = orjson.dumps(value).decode()
    structured = {"result": value} if wrapped else value
    content = [mt.TextContent(type="text", text=text)]
    once = version_of(content, structured, None, structured_in_text="wrapped" if wrapped else "plain")
    twice = version_of(content, structured, None)
    assert once is not None
    assert twice is not None
    assert once.structured is None
    assert once.document() == twice.document() == answer_document(content, structured, None)
    assert once.size < twice.size - 1000
    assert once.json_size >= 2 * len(text)  # half the answer is still measured against all of it


@pytest.mark.parametrize(
    ("content", "structured", "claim"),
    [
        ([{"type": "text", "text": "{}"}, {"type": "text", "text": "{}"}], {}, "plain"),  # two blocks
        ([{"type": "image", "data": "aGk=", "mimeType": "image/png"}], {}, "plain"),  # no text block
        ([{"type": "text", "text": "{}"}], ["a list"], "plain"),  # not an object
        ([{"type": "text", "text": "{}"}], {"result": {}, "more": 1}, "wrapped"),  # not a wrapper
    ],
)
def test_a_claim_the_answer_s_shape_cannot_bear_is_not_taken(content: Any, structured: Any, claim: Any) -> None:
    version = version_of(content, structured, None, structured_in_text=claim)
    assert version is not None
    assert version.structured is not None
    assert version.document() == answer_document(content, structured, None)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["fastmcp", "sdk"])
async def test_a_fastmcp_dict_answer_is_held_once_and_others_as_sent(kind: Any) -> None:
    """FastMCP writes a returned dict's text block from its structured content, so the history keeps the
    text alone, not the structured content's JSON a second time (beside it, 16-byte hashes of the return
    value's parts, for deltas computed from its change); the SDK's `MCPServer` gives the adapter no such
    promise, so both are kept as sent."""
    server, layer = build(kind)
    assert layer.history is not None
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        answer = await client.call_tool("notes", {"key": "once"})
    text = answer.content[0].text  # type: ignore[union-attr]
    held = layer.history.snapshot().bytes
    (version,) = [version for version, _ in layer.history._lru.values()]
    if kind == "fastmcp":
        assert version.structured is None
        assert version.structured_in_text == "plain"
        assert version.derived.raw is not None
        assert held < len(text) + version.derived.cost() + 2048
        assert version.derived.cost() < len(text) / 2
    else:
        assert version.structured is not None
        assert version.derived.raw is None
        assert held > 2 * len(text) - 2048


# The bounds -------------------------------------------------------------------------------------------


def test_a_key_keeps_its_last_few_versions() -> None:
    history = AnswerHistory(10_000_000, versions_per_key=4)
    for tag in TAGS[:6]:
        history.record(key(), tag, answer(tag))
    assert history.get(key(), TAGS[0]) is None
    assert history.get(key(), TAGS[1]) is None
    assert [history.get(key(), tag) is not None for tag in TAGS[2:6]] == [True] * 4
    assert history.snapshot().versions == 4
    assert history.snapshot().evicted == 0  # pushed out by its key's newer versions, not by the bound


def test_the_byte_bound_holds_and_the_least_recently_used_goes_first() -> None:
    one = answer("x" * 10_000)
    history = AnswerHistory(one.size * 5)
    keys = [key(arguments=f'{{"k":{n}}}'.encode()) for n in range(8)]
    for n, k in enumerate(keys[:4]):
        assert history.record(k, TAGS[n], answer("x" * 10_000))
    assert history.get(keys[0], TAGS[0]) is not None  # used: now the most recent
    for n, k in enumerate(keys[4:6], start=4):
        history.record(k, TAGS[n], answer("x" * 10_000))
    stats = history.snapshot()
    assert stats.bytes <= history.max_bytes
    assert history.get(keys[0], TAGS[0]) is not None
    assert history.get(keys[1], TAGS[1]) is None  # the least recently used went first
    assert stats.evicted >= 1


def test_an_answer_larger_than_half_the_bound_is_not_kept_nor_an_older_one_under_its_tag() -> None:
    small = answer("x" * 100)
    history = AnswerHistory(small.size * 6)
    assert history.record(key(), TAGS[0], small)
    assert not history.record(key(), TAGS[0], answer("x" * (small.size * 4)))
    assert history.get(key(), TAGS[0]) is None
    assert history.snapshot().refused == 1
    assert history.snapshot().bytes == 0


def test_tags_are_compared_weakly_and_a_malformed_one_finds_nothing() -> None:
    history = AnswerHistory()
    history.record(key(), TAGS[0], answer("a"))
    assert history.get(key(), TAGS[0].removeprefix("W/")) is not None
    assert history.get(key(), "not a tag") is None
    assert not history.record(key(), "not a tag", answer("a"))


def test_partitions_tools_and_arguments_keep_versions_apart() -> None:
    history = AnswerHistory()
    alice = Partition.caller("alice", "https://id.example", "u1", ["read"])
    bob = Partition.caller("bob", "https://id.example", "u2", ["read"])
    history.record(key(partition=alice), TAGS[0], answer("a"))
    others = [key(partition=bob), key(partition=ANONYMOUS), key(partition=PUBLIC), key(tool="u"), key(arguments=b"{}1")]
    for other in others:
        assert history.get(other, TAGS[0]) is None
    same = Partition.caller("alice", "https://id.example", "u1", ["read", "read"])
    assert history.get(key(partition=same), TAGS[0]) is not None


def test_a_refreshed_token_keeps_its_partition_and_other_scopes_do_not() -> None:
    one = Partition.caller("c", "iss", "sub", ["b", "a"])
    assert one == Partition.caller("c", "iss", "sub", ["a", "b"])
    assert one != Partition.caller("c", "iss", "sub", ["a"])
    assert one != Partition.caller("c", None, "sub", ["a", "b"])


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        AnswerHistory(-1)
    with pytest.raises(ValueError, match="versions_per_key"):
        AnswerHistory(10, versions_per_key=0)


# The memory it really holds, over 1,000 edits ----------------------------------------------------------


def held_bytes(root: object) -> int:
    """The memory reachable from `root` through containers, dataclasses and slots, each object once:
    what the history really keeps alive (the answers are gone once sent)."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict | OrderedDict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
        elif dataclasses.is_dataclass(item):
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
    return total


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_history_stays_within_its_bound_over_a_thousand_edits() -> None:
    """Three keys, each edited and read again 333 times through a real FastMCP server, every read asking
    for a delta. The counted bytes never pass the bound, the memory really held stays near it, and the
    deltas keep coming (the last base is always held)."""
    bound = 128 * 1024
    notes = Notes()
    server, layer = build("fastmcp", notes, delta_history_bytes=bound)
    history = layer.history
    assert history is not None
    keys = ["k0", "k1", "k2"]
    async with fastmcp.Client(server) as client:
        held = {k: await client.call_tool_mcp("notes", {"key": k}) for k in keys}
        for n in range(1000):
            k = keys[n % 3]
            text = f"{k} line {n % 200} edit {n:04d}: the quick brown fox jumps over the lazy dog"  # as long
            await client.call_tool_mcp("edit_notes", {"key": k, "index": n % 200, "text": text})
            etag = parse_cache_block(held[k].meta).etag  # type: ignore[union-attr]
            meta = conditional_request_meta(etag, accept_delta=["json-patch+splice/1"])  # type: ignore[arg-type]
            reply = await client.call_tool_mcp("notes", {"key": k}, meta=meta)
            assert parse_cache_block(reply.meta).delta is not None  # type: ignore[union-attr]
            held[k] = await client.call_tool_mcp("notes", {"key": k})
            assert history.snapshot().bytes <= bound
    stats = history.snapshot()
    assert layer.stats.deltas_sent == 1000
    assert stats.evicted > 0  # the bound, not only the four versions per key, did the work
    really = held_bytes(history)
    assert really <= bound * 1.1, (really, stats)
    assert stats.bytes <= really * 1.1 + 4096, (really, stats)  # and what it counts is what it holds
