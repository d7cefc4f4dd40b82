"""Hostile and broken input to `resolve`: a clear error or an untouched pass-through, never a leak, never
an exception in the host.

The conversation scope is the property that matters most (weakness 3 of chatbox-core, which compared
nothing on read): the URI's conversation segment is cosmetic and may collide, so a reference resolves only
where the stored entry's exact conversation id is the current one, and a miss reveals nothing about an
entry of another conversation.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpcache.refs import References, parse
from mcpcache.refs.uri import conversation_segment
from mcpcache.stores import MemoryStore

from .conftest import Harness
from .servers import time_series

pytestmark = pytest.mark.anyio

SECRET = "s3cr3t-only-for-conversation-a"
PAYLOAD = {"owner": SECRET, "rows": time_series()}


async def seeded(harness: Harness, conversation_id: str = "conv-a") -> tuple[References, str]:
    """A conversation holding one secret payload; returns its references and the URI."""
    refs = harness.refs(conversation_id)
    view = await refs.for_model(PAYLOAD, server="vault", tool="read", arguments={"key": SECRET})
    assert view.uri is not None
    return refs, str(view.uri)


def assert_no_leak(resolution: Any) -> None:
    text = json.dumps(resolution.error if resolution.error is not None else resolution.arguments)
    assert SECRET not in text
    assert "vault" not in text


def assert_clean_refusal(resolution: Any, reason: str) -> dict[str, Any]:
    assert not resolution.ok
    error = resolution.error
    assert error is not None
    assert error["error"].startswith("invalid_args: ")
    json.dumps(error)  # the envelope goes into a tool message as is
    [missing] = error["_missing_uris"]
    assert missing["reason"] == reason, missing
    assert_no_leak(resolution)
    return dict(missing)


# -- another conversation ------------------------------------------------------------------------------


async def test_a_reference_does_not_resolve_in_another_conversation(harness: Harness) -> None:
    a, uri = await seeded(harness)
    b = a.for_conversation("conv-b")
    missing = assert_clean_refusal(await b.resolve(tool="t", arguments={"data_uri": uri}), "other_conversation")
    assert "source" not in missing  # not even the source tool or its arguments
    assert_clean_refusal(await b.resolve(tool="t", arguments={"data_uri": uri + "#/owner"}), "other_conversation")
    assert (await a.resolve(tool="t", arguments={"data_uri": uri + "#/owner"})).arguments == {"data": SECRET}


@pytest.mark.parametrize(
    ("a_id", "b_id"),
    [
        ("a/b", "a_b"),
        ("a b", "a_b"),
        ("", "default"),
        ("ü", "_"),
        ("x" * 64 + "-one", "x" * 64 + "-two"),
    ],
)
async def test_a_reference_does_not_resolve_where_only_the_sanitised_segment_matches(
    harness: Harness, a_id: str, b_id: str
) -> None:
    assert conversation_segment(a_id) == conversation_segment(b_id)
    a, uri = await seeded(harness, a_id)
    b = a.for_conversation(b_id)
    assert_clean_refusal(await b.resolve(tool="t", arguments={"data_uri": uri}), "other_conversation")
    assert await a.load(uri) == PAYLOAD


async def test_rewriting_the_conversation_segment_does_not_help(harness: Harness) -> None:
    a, uri = await seeded(harness)
    b = a.for_conversation("conv-b")
    token = parse(uri).token
    for forged in (f"mcp+cache://conv-b/{token}", f"MCP+CACHE://conv-b/{token}", f"mcp+cache://default/{token}"):
        assert_clean_refusal(await b.resolve(tool="t", arguments={"data_uri": forged}), "other_conversation")


async def test_another_conversations_evicted_entry_reveals_nothing_either(harness: Harness) -> None:
    a, uri = await seeded(harness)
    await a.clear_conversation()
    b = a.for_conversation("conv-b")
    missing = assert_clean_refusal(await b.resolve(tool="t", arguments={"data_uri": uri}), "other_conversation")
    assert "source" not in missing


async def test_guessed_tokens_are_unknown(harness: Harness) -> None:
    a, _ = await seeded(harness)
    b = a.for_conversation("conv-b")
    for _ in range(50):
        guess = f"mcp+cache://conv-b/{secrets.token_urlsafe(8)}"
        assert_clean_refusal(await b.resolve(tool="t", arguments={"data_uri": guess}), "unknown")


# -- hostile strings -----------------------------------------------------------------------------------

MALFORMED = [
    "mcp+cache://../x",
    "mcp+cache://../../etc/passwd",
    "mcp+cache://conv-b/../conv-a/AAAAAAAAAAA",
    "mcp+cache://%2e%2e/AAAAAAAAAAA",
    "mcp+cache://conv-b/%2e%2e%2f%2e%2e",
    "mcp+cache://conv-b/AAAAAAAAAA%41",
    "mcp+cache://conv-b/AAAAAAAAAAA/../../x",
    "mcp+cache://conv-b/AAAAAAAAAAA?token=x",
    "mcp+cache://conv-b/AAAA\x00AAAAAA",
    "mcp+cache://conv-b/AAAAAAAAAA\u200b",
    "mcp+cache://conv-b/ÅAAAAAAAAAA",
    "mcp+cache://😀/AAAAAAAAAAA",
    "mcp+cache://conv-b/AAAAAAAAAAA#no-slash",
    "mcp+cache://conv-b/AAAAAAAAAAA#/%ff",
    "mcp+cache://conv-b/*",
    "mcp+cache://conv-b/r:AAAAAAAAA",
    "mcp+cache://",
    "mcp+cache://" + "a" * 5000,
]


@pytest.mark.parametrize("value", MALFORMED)
async def test_malformed_references_are_refused_before_any_store_is_asked(harness: Harness, value: str) -> None:
    a, _ = await seeded(harness)
    b = a.for_conversation("conv-b")
    missing = assert_clean_refusal(await b.resolve(tool="t", arguments={"data_uri": value}), "malformed")
    assert missing["detail"]
    assert len(missing["uri"]) <= 2048


async def test_a_one_megabyte_reference_is_refused_and_not_echoed(harness: Harness) -> None:
    refs = harness.refs()
    huge = "mcp+cache://conv-42/" + "A" * 1_000_000
    resolution = await refs.resolve(tool="t", arguments={"data_uri": huge})
    missing = assert_clean_refusal(resolution, "malformed")
    assert missing["uri"] == huge[:200] + "... (cut, 1,000,020 chars)"
    assert len(json.dumps(resolution.error)) < 2000


async def test_a_one_megabyte_ordinary_argument_passes_through_untouched(harness: Harness) -> None:
    refs = harness.refs()
    arguments = {"text": "x" * 1_000_000, "other_uri": "https://example.com/" + "y" * 1_000_000}
    resolution = await refs.resolve(tool="t", arguments=arguments)
    assert resolution.arguments == arguments


async def test_more_references_than_allowed_in_one_call_is_refused(harness: Harness) -> None:
    refs = harness.refs(max_uris_per_call=16)
    view = await refs.for_model(PAYLOAD, server="s", tool="t", arguments={})
    uri = str(view.uri)
    assert (await refs.resolve(tool="t", arguments={"data_uri": [uri] * 16})).ok
    resolution = await refs.resolve(tool="t", arguments={"data_uri": [uri] * 10, "more_uri": [uri] * 7})
    missing = assert_clean_refusal(resolution, "malformed")
    assert missing["argument"] == "*"
    assert missing["detail"] == "17 references in one call; at most 16"
    default = harness.refs()
    resolution = await default.resolve(tool="t", arguments={"data_uri": [uri] * 100_000})
    assert assert_clean_refusal(resolution, "malformed")["detail"] == "100000 references in one call; at most 256"


@pytest.mark.parametrize(
    "arguments",
    ["not an object", ["data_uri", "mcp+cache://conv-42/AAAAAAAAAAA"], 42],
    ids=["string", "list", "number"],
)
async def test_arguments_that_are_not_an_object_are_an_error_not_an_exception(harness: Harness, arguments: Any) -> None:
    refs = harness.refs()
    resolution = await refs.resolve(tool="t", arguments=arguments)
    missing = assert_clean_refusal(resolution, "malformed")
    assert missing["argument"] == "*"
    assert resolution.error is not None
    assert resolution.error["error"].startswith("invalid_args: t was not called; the arguments must be a JSON object")


async def test_non_string_keys_pass_through(harness: Harness) -> None:
    refs = harness.refs()
    arguments: dict[Any, Any] = {1: "https://x.example/", None: "x", ("a", "_uri"): 1}
    assert (await refs.resolve(tool="t", arguments=arguments)).arguments == arguments
    # ... but a string of ours under one is still refused: the tool would receive it all the same.
    missing = assert_clean_refusal(
        await refs.resolve(tool="t", arguments={1: "mcp+cache://conv-42/AAAAAAAAAAA"}), "malformed"
    )
    assert missing["argument"] == "1"


# -- a property: nothing crosses conversations, nothing raises ------------------------------------------


def mutations(uri: str) -> st.SearchStrategy[str]:
    """Strings near a real reference: the kinds of edits a confused or hostile model makes."""
    parsed = parse(uri)
    return st.one_of(
        st.just(uri),
        st.just(uri.upper()),
        st.builds(lambda seg: f"mcp+cache://{seg}/{parsed.token}", st.text(max_size=70)),
        st.builds(lambda frag: f"{uri}#{frag}", st.text(max_size=30)),
        st.builds(lambda tail: uri + tail, st.text(max_size=10)),
        st.builds(lambda i: uri[:i], st.integers(0, len(uri))),
        st.text(max_size=40).map(lambda t: "mcp+cache://" + t),
    )


@given(data=st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
async def test_resolving_anything_in_another_conversation_never_raises_and_never_leaks(data: st.DataObject) -> None:
    store = MemoryStore()
    a = References(store, conversation_id="conv-a", threshold_bytes=0)
    b = a.for_conversation("conv-b")
    uri = str((await a.for_model(PAYLOAD, server="vault", tool="read", arguments={"key": SECRET})).uri)
    mine = str((await b.for_model({"rows": [1, 2, 3]}, server="s", tool="t", arguments={})).uri)
    values = st.one_of(
        mutations(uri),
        st.just(mine),
        st.lists(mutations(uri) | st.just(mine), max_size=4),
        st.text(max_size=20),
        st.none() | st.integers() | st.booleans(),
        st.dictionaries(st.text(max_size=5), mutations(uri), max_size=2),
    )
    names = st.text(max_size=8).map(lambda n: n + "_uri") | st.text(max_size=8)
    arguments = data.draw(st.dictionaries(names, values, max_size=5))
    resolution = await b.resolve(tool="t", arguments=arguments)
    if resolution.ok:
        assert resolution.arguments is not None
        assert SECRET not in json.dumps(resolution.arguments, default=str)
    else:
        assert resolution.error is not None
        json.dumps(resolution.error)
        assert resolution.error["error"].startswith("invalid_args: ")
        assert SECRET not in json.dumps(resolution.error)
        for missing in resolution.error["_missing_uris"]:
            assert missing["reason"] in ("unknown", "evicted", "other_conversation", "malformed")
            if missing["reason"] == "other_conversation":
                assert "source" not in missing
