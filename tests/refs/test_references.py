"""`References` against every store: what `for_model` stores, what `resolve` does, and the housekeeping.

Each test runs on MemoryStore, a real SQLite file and a real redis-server (tests/refs/conftest.py). The
weaknesses of chatbox-core's design (research/byref-and-peers.md, section 1) each have a test here that
shows mcpcache does otherwise; their numbers are in the test names' comments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fastmcp
import mcp
import mcp_types as mt
import pytest
from fastmcp.client.client import CallToolResult as FastMCPResult
from mcp.client._memory import InMemoryTransport
from support.redis_server import free_port

from mcpcache import tokens as tokens_module
from mcpcache.refs import CacheUri, ModelView, References, ResolutionError, parse
from mcpcache.refs.references import _payload_key, _receipt_key
from mcpcache.refs.view import json_bytes
from mcpcache.stores import RedisStore, SQLiteStore, Store, StoreLimits
from mcpcache.tokens import count_tokens

from .conftest import CONVERSATION, Harness
from .servers import build_query_server, time_series

pytestmark = pytest.mark.anyio

SERIES = {"station": "KSLC", "rows": time_series()}
ARGS = {"station": "KSLC", "hours": 240}


def uri_of(view: ModelView) -> CacheUri:
    assert view.uri is not None
    return view.uri


def sized(n: int) -> str:
    """A payload whose JSON is exactly `n` bytes."""
    return "x" * (n - 2)


# -- for_model: what is stored, when -------------------------------------------------------------------


async def test_a_result_at_the_threshold_is_stored_with_its_source_size_and_tokens(harness: Harness) -> None:
    refs = harness.refs(threshold_bytes=4096)
    view = await refs.for_model(SERIES, server="nb", tool="query", arguments=ARGS)
    assert view.uri is not None
    assert view.envelope["_cache_uri"] == str(view.uri)
    body = json_bytes(SERIES)
    assert view.size_bytes == len(body)
    assert view.tokens == count_tokens(body.decode())
    assert view.tokens.method == "o200k"

    item = await refs.store.load(_payload_key(view.uri.token))
    assert item is not None
    assert item.body == body
    assert item.created_at == harness.clock()
    assert item.meta == {
        "conversation": CONVERSATION,
        "source": {"server": "nb", "tool": "query", "arguments": ARGS},
        "createdAt": harness.clock(),
        "size": len(body),
        "tokens": {"count": view.tokens.count, "method": "o200k"},
    }
    assert await refs.load(uri_of(view)) == SERIES


async def test_the_threshold_is_inclusive_and_smaller_results_store_nothing(harness: Harness) -> None:
    refs = harness.refs(threshold_bytes=4096)
    below = await refs.for_model(sized(4095), server="s", tool="t", arguments={})
    assert below.uri is None
    assert below.envelope == {"result": sized(4095)}
    assert (await refs.stats())["items"] == 0
    at = await refs.for_model(sized(4096), server="s", tool="t", arguments={})
    assert at.uri is not None
    assert at.size_bytes == 4096
    assert (await refs.stats())["items"] == 1


async def test_without_the_tokenizer_the_stored_count_is_labelled_an_estimate(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens_module._encoder.cache_clear()
    monkeypatch.setattr(tokens_module, "_encoder", lambda: None)
    try:
        refs = harness.refs()
        view = await refs.for_model(SERIES, server="s", tool="t", arguments={})
        assert view.tokens.method == "estimate"
        assert view.tokens.count == view.size_bytes // 4
        assert view.uri is not None
        item = await refs.store.load(_payload_key(view.uri.token))
        assert item is not None
        assert item.meta["tokens"] == {"count": view.size_bytes // 4, "method": "estimate"}
    finally:
        monkeypatch.undo()
        tokens_module._encoder.cache_clear()


ERRORS = [
    pytest.param(mt.CallToolResult(content=[mt.TextContent(type="text", text="no " * 3000)], is_error=True), id="mcp"),
    pytest.param(
        mt.CallToolResult(content=[mt.TextContent(type="text", text="{}")], structured_content=SERIES, is_error=True),
        id="mcp with structured content",
    ),
    pytest.param(
        FastMCPResult(
            content=[mt.TextContent(type="text", text="no " * 3000)], structured_content=None, meta=None, is_error=True
        ),
        id="fastmcp",
    ),
]


@pytest.mark.parametrize("result", ERRORS)
async def test_error_results_are_never_stored(harness: Harness, result: Any) -> None:  # weakness 8
    refs = harness.refs(threshold_bytes=16, max_view_bytes=16)
    view = await refs.for_model(result, server="s", tool="t", arguments={})
    assert view.uri is None
    assert view.shortened == []
    assert "_cache_uri" not in view.envelope
    assert (await refs.store.usage()).items == 0


async def test_real_results_of_every_shape_from_fastmcp_and_mcp_clients(harness: Harness) -> None:
    refs = harness.refs(threshold_bytes=4096)
    server = build_query_server()
    expected_rows = time_series()
    async with fastmcp.Client(server) as fast, mcp.Client(InMemoryTransport(server._mcp_server)) as sdk:
        for client in (fast, sdk):
            results: dict[str, Any] = {}
            for tool in ("query", "query_json_text", "report", "snapshot", "broken"):
                if isinstance(client, fastmcp.Client):
                    results[tool] = await client.call_tool(tool, {"station": "KSLC"}, raise_on_error=False)
                else:
                    results[tool] = await client.call_tool(tool, {"station": "KSLC"})
            views = {
                tool: await refs.for_model(result, server="q", tool=tool, arguments={"station": "KSLC"})
                for tool, result in results.items()
            }
            # Structured content, not the text block beside it (weakness 9).
            assert await refs.load(views["query"].envelope["_cache_uri"] + "#/rows") == expected_rows
            # JSON in one text block is read as the value it holds.
            assert (await refs.load(views["query_json_text"].envelope["_cache_uri"]))["rows"] == expected_rows
            # Plain text is stored as text (weakness 5: a string result is referenced, not just cut).
            report = await refs.load(views["report"].envelope["_cache_uri"])
            assert isinstance(report, str)
            assert report.count("\n") == 239
            # Text plus an image: the blocks themselves.
            blocks = await refs.load(views["snapshot"].envelope["_cache_uri"])
            assert [b["type"] for b in blocks] == ["text", "image"]
            assert blocks[1]["mimeType"] == "image/png"
            # An error is shown, never stored.
            assert views["broken"].uri is None
            assert "offline" in views["broken"].envelope["result"]


@pytest.mark.parametrize("kind", ["sqlite closed", "redis with nobody listening"])
async def test_a_store_that_fails_gives_the_model_the_whole_result(kind: str, tmp_path: Path) -> None:
    store: Store
    if kind == "sqlite closed":
        store = SQLiteStore(tmp_path / "refs.db")
        await store.close()
    else:
        store = RedisStore(f"redis://127.0.0.1:{free_port()}/0")
    refs = References(store, conversation_id=CONVERSATION, max_view_bytes=4096)
    view = await refs.for_model(SERIES, server="s", tool="t", arguments={})
    assert view.uri is None
    assert view.envelope == SERIES
    resolution = await refs.resolve(tool="plot", arguments={"data_uri": "mcp+cache://conv-42/AAAAAAAAAAA"})
    assert resolution.error is not None
    [missing] = resolution.error["_missing_uris"]
    assert missing["reason"] == "unknown"
    assert missing["detail"].startswith("the reference store failed")
    await store.close()


# -- resolve: the rules --------------------------------------------------------------------------------


async def test_x_uri_becomes_x_and_is_dropped(harness: Harness) -> None:
    refs = harness.refs()
    view = await refs.for_model(SERIES, server="s", tool="query", arguments=ARGS)
    uri = str(view.uri)
    resolution = await refs.resolve(tool="plot", arguments={"data_uri": uri + "#/rows", "title": "t"})
    assert resolution.ok
    assert resolution.arguments == {"data": time_series(), "title": "t"}
    assert resolution.resolved == {"data": [uri + "#/rows"]}
    assert resolution.overridden == []
    assert resolution.error is None


async def test_a_fragment_addresses_a_field_not_the_whole_envelope(harness: Harness) -> None:  # weakness 1
    refs = harness.refs()
    uri = str((await refs.for_model(SERIES, server="s", tool="query", arguments=ARGS)).uri)
    whole = await refs.resolve(tool="plot", arguments={"data_uri": uri})
    assert whole.arguments == {"data": SERIES}
    row = await refs.resolve(tool="plot", arguments={"point_uri": uri + "#/rows/239/temp_c"})
    assert row.arguments == {"point": time_series()[239]["temp_c"]}


async def test_a_list_made_only_of_uris_becomes_the_list_of_their_values_in_order(harness: Harness) -> None:
    refs = harness.refs()
    first = await refs.for_model({"rows": time_series("A")}, server="s", tool="query", arguments={"station": "A"})
    second = await refs.for_model({"rows": time_series("B")}, server="s", tool="query", arguments={"station": "B"})
    uris = [f"{second.uri}#/rows", f"{first.uri}#/rows"]
    resolution = await refs.resolve(tool="compare", arguments={"series_uri": uris})
    assert resolution.arguments == {"series": [time_series("B"), time_series("A")]}
    assert resolution.resolved == {"series": uris}


async def test_when_both_forms_are_given_the_reference_wins_and_says_so(harness: Harness) -> None:
    refs = harness.refs()
    uri = str((await refs.for_model(SERIES, server="s", tool="query", arguments=ARGS)).uri)
    resolution = await refs.resolve(tool="plot", arguments={"data": [{"t": 1}], "data_uri": uri + "#/rows"})
    assert resolution.arguments == {"data": time_series()}
    assert resolution.overridden == ["data"]


async def test_a_list_mixing_uris_and_other_values_is_refused_naming_the_argument(harness: Harness) -> None:
    refs = harness.refs()  # weakness 2: chatbox-core passed a mixed list through silently
    uri = str((await refs.for_model(SERIES, server="s", tool="query", arguments=ARGS)).uri)
    resolution = await refs.resolve(tool="plot", arguments={"data_uri": [uri, {"t": 1}], "title": "x"})
    assert not resolution.ok
    assert resolution.arguments is None
    error = resolution.error
    assert error is not None
    assert error["error"].startswith("invalid_args: plot was not called")
    assert error["_missing_uris"] == [
        {
            "argument": "data_uri",
            "uri": "",
            "reason": "malformed",
            "detail": "a list of references must hold only mcp+cache:// references",
        }
    ]
    assert "data_uri" in error["fix_hint"]


@pytest.mark.parametrize(
    "arguments",
    [
        {"data_uri": "https://example.com/data.json", "title": "x"},
        {"data_uri": ["https://a.example/1", "https://a.example/2"]},
        {"data_uri": []},
        {"data_uri": 7, "n_uri": None, "flag_uri": True},
        {"data_uri": {"uri": "https://example.com/x"}},
        {"options": {"data_uri": "file:///tmp/x"}},
        {"text": "see mcp+cache://conv-42/AAAAAAAAAAA", "other": "mcp-cache://conv-42/AAAAAAAAAAA"},
        {},
    ],
    ids=[
        "other scheme",
        "list of other schemes",
        "empty list",
        "non-string values",
        "an object",
        "nested other scheme",
        "not at the start, or another scheme",
        "no arguments",
    ],
)
async def test_what_is_not_in_our_scheme_passes_through_untouched(harness: Harness, arguments: dict[str, Any]) -> None:
    refs = harness.refs()
    resolution = await refs.resolve(tool="t", arguments=arguments)
    assert resolution.ok
    assert resolution.arguments == arguments
    assert resolution.resolved == {}


@pytest.mark.parametrize(
    ("arguments", "argument"),
    [
        ({"data_uri": {"uri": "mcp+cache://conv-42/AAAAAAAAAAA"}}, "data_uri.uri"),
        ({"_uri": "mcp+cache://conv-42/AAAAAAAAAAA"}, "_uri"),
        ({"options": {"data_uri": "mcp+cache://conv-42/AAAAAAAAAAA"}}, "options.data_uri"),
        ({"rows": [{"data_uri": "mcp+cache://conv-42/AAAAAAAAAAA"}]}, "rows[0].data_uri"),
        ({"data": "mcp+cache://conv-42/AAAAAAAAAAA"}, "data"),
        ({"uri": "mcp+cache://conv-42/AAAAAAAAAAA"}, "uri"),
        ({"data": "mcp+cache:conv-42/AAAAAAAAAAA"}, "data"),
        ({"data": ("x", {"mcp+cache://conv-42/AAAAAAAAAAA": 1})}, "data[1].mcp+cache://conv-42/AAAAAAAAAAA"),
    ],
    ids=[
        "inside an X_uri object",
        "bare _uri",
        "nested in an object",
        "nested in a list",
        "a reference in a non-_uri argument",
        "an argument named uri",
        "a malformed one in a non-_uri argument",
        "as a key",
    ],
)
async def test_our_scheme_outside_a_top_level_x_uri_is_refused_never_passed_on(
    harness: Harness, arguments: dict[str, Any], argument: str
) -> None:
    refs = harness.refs()
    resolution = await refs.resolve(tool="t", arguments=arguments)
    assert resolution.error is not None
    [missing] = resolution.error["_missing_uris"]
    assert missing["argument"] == argument
    assert missing["reason"] == "malformed"
    assert "resolved only" in missing["detail"] or "key" in missing["detail"]
    assert f"{argument}:" in resolution.error["fix_hint"]


async def test_a_reference_in_a_plain_argument_is_told_its_x_uri_name(harness: Harness) -> None:
    refs = harness.refs()
    uri = str((await refs.for_model(SERIES, server="s", tool="query", arguments=ARGS)).uri)
    resolution = await refs.resolve(tool="plot", arguments={"data": uri})
    assert resolution.error is not None
    [missing] = resolution.error["_missing_uris"]
    assert missing["detail"] == "a reference is resolved only in an argument named X_uri; give it as data_uri"
    assert (await refs.resolve(tool="plot", arguments={"data_uri": uri})).arguments == {"data": SERIES}


async def test_resolve_never_mutates_the_callers_arguments(harness: Harness) -> None:
    refs = harness.refs()
    uri = str((await refs.for_model(SERIES, server="s", tool="query", arguments=ARGS)).uri)
    arguments = {"data_uri": uri, "title": "x"}
    await refs.resolve(tool="plot", arguments=arguments)
    assert arguments == {"data_uri": uri, "title": "x"}
    assert (await refs.resolve(tool="t", arguments=None)).arguments == {}


# -- resolve: misses -----------------------------------------------------------------------------------


async def test_every_miss_is_named_per_argument_with_its_reason(harness: Harness) -> None:  # weakness 12
    refs = harness.refs()
    other = refs.for_conversation("someone-else")
    evicted = str((await refs.for_model(SERIES, server="nb", tool="query", arguments=ARGS)).uri)
    foreign = str((await other.for_model(SERIES, server="nb", tool="query", arguments={"secret": "s3cr3t"})).uri)
    good = str((await refs.for_model({"rows": time_series("B")}, server="nb", tool="query", arguments={})).uri)
    # Clear the first payload only: a second conversation cleared and this one's entry remain apart.
    await refs.store.remove(_payload_key(parse(evicted).token))
    guessed = "mcp+cache://conv-42/AAAAAAAAAAA"
    resolution = await refs.resolve(
        tool="plot",
        arguments={
            "data_uri": evicted,
            "other_uri": foreign,
            "more_uri": [good, guessed],
            "bad_uri": "mcp+cache://conv-42/short",
            "title": "x",
        },
    )
    assert not resolution.ok
    error = resolution.error
    assert error is not None
    assert set(error) == {"error", "_missing_uris", "fix_hint"}
    assert error["error"].startswith("invalid_args: plot was not called; 4 cache references could not be resolved")
    assert error["_missing_uris"] == [
        {
            "argument": "data_uri",
            "uri": evicted,
            "reason": "evicted",
            "source": {"server": "nb", "tool": "query", "arguments": ARGS},
        },
        {"argument": "other_uri", "uri": foreign, "reason": "other_conversation"},
        {"argument": "more_uri[1]", "uri": guessed, "reason": "unknown"},
        {
            "argument": "bad_uri",
            "uri": "mcp+cache://conv-42/short",
            "reason": "malformed",
            "detail": "the token must be exactly 11 characters of A-Z a-z 0-9 _ -",
        },
    ]
    for argument in ("data_uri", "other_uri", "more_uri[1]", "bad_uri"):
        assert f"{argument}:" in error["fix_hint"]
    assert "Call query again" in error["fix_hint"]  # weakness 7: the source tool is named
    assert "s3cr3t" not in str(error)  # nothing of the other conversation's entry


async def test_a_fragment_naming_nothing_is_malformed_and_names_the_source(harness: Harness) -> None:
    refs = harness.refs()
    uri = str((await refs.for_model(SERIES, server="nb", tool="query", arguments=ARGS)).uri)
    resolution = await refs.resolve(tool="plot", arguments={"data_uri": uri + "#/rowz"})
    assert resolution.error is not None
    [missing] = resolution.error["_missing_uris"]
    assert missing["reason"] == "malformed"
    assert missing["detail"] == "the fragment names nothing: no member 'rowz'"
    assert missing["source"]["tool"] == "query"


async def test_load_raises_a_resolution_error_carrying_the_miss(harness: Harness) -> None:
    refs = harness.refs()
    with pytest.raises(ResolutionError) as caught:
        await refs.load("mcp+cache://conv-42/AAAAAAAAAAA")
    assert caught.value.args[0].reason == "unknown"


# -- housekeeping --------------------------------------------------------------------------------------


async def test_clear_conversation_makes_its_references_evicted_not_unknown(harness: Harness) -> None:
    refs = harness.refs()
    other = refs.for_conversation("other")
    mine = await refs.for_model(SERIES, server="nb", tool="query", arguments=ARGS)
    theirs = await other.for_model(SERIES, server="nb", tool="query", arguments=ARGS)
    assert await refs.clear_conversation() == 1
    resolution = await refs.resolve(tool="plot", arguments={"data_uri": str(mine.uri)})
    assert resolution.error is not None
    [missing] = resolution.error["_missing_uris"]
    assert missing["reason"] == "evicted"
    assert missing["source"] == {"server": "nb", "tool": "query", "arguments": ARGS}
    assert await other.load(uri_of(theirs)) == SERIES  # another conversation is untouched
    assert await refs.clear_conversation("other") == 1
    with pytest.raises(ResolutionError) as caught:
        await other.load(uri_of(theirs))
    assert caught.value.args[0].reason == "evicted"


async def test_evict_older_than_drops_old_payloads_of_every_conversation(harness: Harness) -> None:
    refs = harness.refs()  # weakness 6: age eviction the host actually calls, with an injected clock
    other = refs.for_conversation("other")
    old = await refs.for_model(SERIES, server="nb", tool="query", arguments=ARGS)
    old_other = await other.for_model(SERIES, server="nb", tool="query", arguments=ARGS)
    harness.clock.advance(3600)
    new = await refs.for_model(SERIES, server="nb", tool="query", arguments={"station": "new"})
    assert await refs.evict_older_than(1800) == 2
    assert await refs.load(uri_of(new)) == SERIES
    for owner, view in ((refs, old), (other, old_other)):
        with pytest.raises(ResolutionError) as caught:
            await owner.load(uri_of(view))
        assert caught.value.args[0].reason == "evicted"
    assert await refs.evict_older_than(1800) == 0


async def test_the_conversation_cap_evicts_least_recently_used_payloads(harness: Harness) -> None:
    size = len(json_bytes({"rows": time_series("A")}))
    refs = harness.refs(max_conversation_bytes=int(size * 2.5))
    a = await refs.for_model({"rows": time_series("A")}, server="s", tool="query", arguments={"station": "A"})
    b = await refs.for_model({"rows": time_series("B")}, server="s", tool="query", arguments={"station": "B"})
    harness.clock.advance(1)
    assert (await refs.resolve(tool="plot", arguments={"data_uri": str(a.uri)})).ok  # A is now the most recent
    c = await refs.for_model({"rows": time_series("C")}, server="s", tool="query", arguments={"station": "C"})
    assert (await refs.stats())["items"] == 2
    assert (await refs.stats())["bytes"] <= size * 2.5
    assert await refs.load(uri_of(a)) == {"rows": time_series("A")}
    assert await refs.load(uri_of(c)) == {"rows": time_series("C")}
    with pytest.raises(ResolutionError) as caught:
        await refs.load(uri_of(b))
    assert caught.value.args[0].reason == "evicted"
    assert caught.value.args[0].source.arguments == {"station": "B"}
    # Another conversation's cap is its own.
    other = refs.for_conversation("other")
    await other.for_model({"rows": time_series("D")}, server="s", tool="query", arguments={})
    assert await refs.load(uri_of(a)) == {"rows": time_series("A")}


async def test_a_result_too_large_for_any_cap_is_shown_whole_not_referenced_to_nothing(harness: Harness) -> None:
    # Before the fix the payload was saved and at once trimmed (or silently refused by the store's bound):
    # the view was cut down to markers naming a reference that could never resolve.
    refs = harness.refs(max_conversation_bytes=8000, max_view_bytes=4096)
    view = await refs.for_model(SERIES, server="s", tool="t", arguments={})
    assert view.uri is None
    assert view.envelope == SERIES
    bounded = harness.refs(store=harness.store(StoreLimits(max_bytes=8000)), max_view_bytes=4096)
    view = await bounded.for_model(SERIES, server="s", tool="t", arguments={})
    assert view.uri is None
    assert view.envelope == SERIES


async def test_the_stores_total_cap_bounds_every_conversation_together(harness: Harness) -> None:
    size = len(json_bytes({"rows": time_series("A")}))
    store = harness.store(StoreLimits(max_bytes=size * 3))
    refs = harness.refs(store=store)
    other = refs.for_conversation("other")
    views = []
    for i in range(6):
        owner = refs if i % 2 == 0 else other
        views.append((owner, await owner.for_model({"rows": time_series(str(i))}, server="s", tool="q", arguments={})))
    usage = await store.usage()
    assert usage.bytes <= size * 3
    owner, newest = views[-1]
    assert await owner.load(uri_of(newest)) == {"rows": time_series("5")}
    owner, oldest = views[0]
    with pytest.raises(ResolutionError) as caught:
        await owner.load(uri_of(oldest))
    # Under the store's own bound a receipt is an ordinary item and may go too; then the miss is "unknown".
    assert caught.value.args[0].reason in ("evicted", "unknown")


async def test_receipts_outlive_payloads_and_expire_by_the_stores_clock(harness: Harness) -> None:
    refs = harness.refs()
    view = await refs.for_model(SERIES, server="s", tool="q", arguments={})
    assert view.uri is not None
    receipt = await refs.store.load(_receipt_key(view.uri.token))
    assert receipt is not None
    assert receipt.body == b""
    # The references' clock is not the store's (Redis keeps its own): the receipt expiry follows the store.
    assert receipt.expires_at is not None
    assert receipt.expires_at > refs.store.now() + 80 * 24 * 3600
