"""The bounds of resolving and of what `for_model` accepts: nothing in our scheme reaches a tool, one call
resolves at most `max_resolved_bytes`, an error envelope stays small whatever the model wrote, and
`for_model` never raises on a value the host hands it.

Every store test runs on MemoryStore, a real SQLite file and the real redis-server (tests/refs/conftest.py).
"""

from __future__ import annotations

import json
import logging
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mcpcache.refs import References, parse
from mcpcache.refs import references as references_module
from mcpcache.refs.references import DEFAULT_MAX_RESOLVED_BYTES, _receipt_key, copy_json
from mcpcache.refs.uri import is_cache_uri
from mcpcache.refs.view import json_bytes, lenient_json
from mcpcache.stores import MemoryStore, SQLiteStore, Store

from .conftest import Harness
from .servers import time_series

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024
SERIES = {"station": "KSLC", "rows": time_series()}


async def minted(refs: References, payload: Any = None) -> str:
    stored = await refs.put(SERIES if payload is None else payload, server="s", tool="query", arguments={})
    return str(stored.uri)


def only_missing(resolution: Any) -> dict[str, Any]:
    assert not resolution.ok
    assert resolution.arguments is None
    error = resolution.error
    assert error is not None
    assert error["error"].startswith("invalid_args: ")
    json.dumps(error)
    [missing] = error["_missing_uris"]
    return dict(missing)


def strings_in(value: Any) -> list[str]:
    """Every string a tool would receive in `value`: keys and values, at any depth."""
    found: list[str] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            found.append(node)
        elif isinstance(node, dict):
            for key, member in node.items():
                stack.extend((key, member))
        elif isinstance(node, list | tuple | set | frozenset):
            stack.extend(node)
    return found


# -- anything starting with mcp+cache: is ours ---------------------------------------------------------


@pytest.mark.parametrize("where", ["X_uri", "plain argument", "nested", "list item"])
@pytest.mark.parametrize("form", ["mcp+cache:{conv}/{token}", "mcp+cache:/{conv}/{token}", "MCP+CACHE:{conv}/{token}"])
async def test_forms_without_both_slashes_are_refused_never_passed_to_the_tool(
    harness: Harness, form: str, where: str
) -> None:
    refs = harness.refs()
    uri = parse(await minted(refs))
    text = form.format(conv=uri.conversation, token=uri.token)
    arguments: dict[str, Any] = {
        "X_uri": {"data_uri": text},
        "plain argument": {"data": text},
        "nested": {"options": {"deep": [{"x": text}]}},
        "list item": {"data_uri": [str(uri), text]},
    }[where]
    missing = only_missing(await refs.resolve(tool="plot", arguments=arguments))
    assert missing["reason"] == "malformed"
    assert "both slashes" in missing["detail"]
    assert missing["uri"] == text


NEAR_MISSES = {
    "three slashes": "mcp+cache:///{conv}/{token}",
    "double slash before the token": "mcp+cache://{conv}//{token}",
    "trailing slash": "mcp+cache://{conv}/{token}/",
    "token one short": "mcp+cache://{conv}/{short}",
    "token one long": "mcp+cache://{conv}/{token}A",
    "token with +": "mcp+cache://{conv}/{plus}",
    "token with padding": "mcp+cache://{conv}/{token}=",
    "whitespace before": " mcp+cache://{conv}/{token}",
    "newline after": "mcp+cache://{conv}/{token}\n",
    "query string": "mcp+cache://{conv}/{token}?x=1",
    "fragment not a pointer": "mcp+cache://{conv}/{token}#rows",
    "bad ~ escape": "mcp+cache://{conv}/{token}#/ro~2ws",
}


@pytest.mark.parametrize("template", NEAR_MISSES.values(), ids=NEAR_MISSES.keys())
async def test_near_miss_references_are_malformed(harness: Harness, template: str) -> None:
    refs = harness.refs()
    uri = parse(await minted(refs))
    text = template.format(conv=uri.conversation, token=uri.token, short=uri.token[:-1], plus="+" + uri.token[1:])
    for arguments in ({"data_uri": text}, {"data": text}):
        missing = only_missing(await refs.resolve(tool="plot", arguments=arguments))
        assert missing["reason"] == "malformed", missing
        assert missing["detail"]


@pytest.mark.parametrize("fragment", ["#/nope", "#/rows/240", "#/rows/-1", "#/rows/01", "#/station/0", "#/rows/x"])
async def test_fragments_that_name_nothing_are_refused_with_the_source(harness: Harness, fragment: str) -> None:
    refs = harness.refs()
    uri = await minted(refs)
    missing = only_missing(await refs.resolve(tool="plot", arguments={"data_uri": uri + fragment}))
    assert missing["reason"] == "malformed"
    assert missing["detail"].startswith("the fragment names nothing")
    assert missing["source"]["tool"] == "query"


@pytest.mark.parametrize("scheme", ["MCP+CACHE", "Mcp+Cache", "mcp+CACHE"])
async def test_the_scheme_is_case_insensitive_so_a_case_variant_resolves(harness: Harness, scheme: str) -> None:
    refs = harness.refs()
    uri = await minted(refs)
    variant = scheme + uri[len("mcp+cache") :]
    assert (await refs.resolve(tool="plot", arguments={"data_uri": variant})).arguments == {"data": SERIES}
    foreign = refs.for_conversation("conv-b")
    missing = only_missing(await foreign.resolve(tool="plot", arguments={"data_uri": variant}))
    assert missing["reason"] == "other_conversation"
    assert "source" not in missing


# -- the bound on what one call resolves ---------------------------------------------------------------


async def test_one_megabyte_listed_256_times_is_refused_by_the_bound_without_reading_it(harness: Harness) -> None:
    refs = harness.refs()
    assert refs.max_resolved_bytes == DEFAULT_MAX_RESOLVED_BYTES == 64 * MiB
    payload = {"blob": "x" * MiB}
    uri = await minted(refs, payload)
    size = len(json_bytes(payload))
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        resolution = await refs.resolve(tool="plot", arguments={"data_uri": [uri] * 256})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    missing = only_missing(resolution)
    assert missing["argument"] == "*"
    assert missing["reason"] == "too_large"
    assert f"{256 * size:,} bytes" in missing["detail"]
    assert f"at most {64 * MiB:,}" in missing["detail"]
    assert resolution.error is not None
    assert "too_large" in resolution.error["error"] or f"{256 * size:,}" in resolution.error["error"]
    # Refused from the sizes recorded at minting: not even the one payload was read.
    assert peak < size


async def test_without_a_receipt_the_bound_still_holds_after_reading_one_payload(harness: Harness) -> None:
    refs = harness.refs()
    payload = {"blob": "x" * MiB}
    uri = await minted(refs, payload)
    await refs.store.remove(_receipt_key(parse(uri).token))  # pushed out, as under a store's total cap
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        resolution = await refs.resolve(tool="plot", arguments={"data_uri": [uri] * 256})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert only_missing(resolution)["reason"] == "too_large"
    assert peak < 16 * MiB  # one payload's bytes, a few times over at most; nothing like 256 MB


async def test_the_bound_is_configurable_and_counts_every_use(harness: Harness) -> None:
    size = len(json_bytes(SERIES))
    refs = harness.refs(max_resolved_bytes=3 * size)
    uri = await minted(refs)
    assert (await refs.resolve(tool="t", arguments={"a_uri": [uri] * 3})).ok
    assert (await refs.resolve(tool="t", arguments={"a_uri": [uri, uri], "b_uri": uri})).ok
    for arguments in ({"a_uri": [uri] * 4}, {"a_uri": [uri, uri], "b_uri": uri, "c_uri": uri}):
        missing = only_missing(await refs.resolve(tool="t", arguments=arguments))
        assert missing["reason"] == "too_large"
        assert f"{4 * size:,} bytes" in missing["detail"]


async def test_a_fragment_counts_the_part_it_places_not_the_whole_payload(harness: Harness) -> None:
    size = len(json_bytes(SERIES))
    refs = harness.refs(max_resolved_bytes=2 * size)
    uri = await minted(refs)
    row = uri + "#/rows/0"
    resolution = await refs.resolve(tool="t", arguments={"rows_uri": [row] * 200})
    assert resolution.arguments == {"rows": [SERIES["rows"][0]] * 200}
    # ...but the parts still add up: 1.5 payloads' worth of the rows, three times, is past two payloads.
    missing = only_missing(await refs.resolve(tool="t", arguments={"rows_uri": [uri + "#/rows"] * 3}))
    assert missing["reason"] == "too_large"


async def test_the_results_read_count_too_even_when_the_parts_placed_are_small(harness: Harness) -> None:
    size = len(json_bytes(SERIES))
    refs = harness.refs(max_resolved_bytes=2 * size)
    uris = [await minted(refs) for _ in range(3)]
    missing = only_missing(await refs.resolve(tool="t", arguments={"p_uri": [u + "#/station" for u in uris]}))
    assert missing["reason"] == "too_large"
    assert (await refs.resolve(tool="t", arguments={"p_uri": [u + "#/station" for u in uris[:2]]})).ok


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_the_bound_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_resolved_bytes"):
        References(MemoryStore(), max_resolved_bytes=bad)


async def test_the_same_reference_twice_is_decoded_once_and_each_use_gets_its_own_copy(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    refs = harness.refs()
    uri = await minted(refs)
    decoded: list[int] = []
    real = references_module.decode_json

    def counting(body: bytes, exact: bool = False) -> Any:
        decoded.append(len(body))
        return real(body, exact)

    monkeypatch.setattr(references_module, "decode_json", counting)
    resolution = await refs.resolve(tool="t", arguments={"a_uri": uri, "b_uri": [uri, uri + "#/rows"]})
    assert decoded == [len(json_bytes(SERIES))]
    args = resolution.arguments
    assert args == {"a": SERIES, "b": [SERIES, SERIES["rows"]]}
    a, (b0, b1) = args["a"], args["b"]
    # No two placed values share a list or an object: a tool changing one cannot corrupt another.
    assert a is not b0
    assert a["rows"] is not b0["rows"]
    assert b1 is not a["rows"]
    assert b1 is not b0["rows"]
    a["rows"][0]["temp_c"] = "corrupted"
    b1.clear()
    assert b0 == SERIES
    assert (await refs.resolve(tool="t", arguments={"a_uri": uri})).arguments == {"a": SERIES}


def test_copy_json_shares_no_container_and_goes_deeper_than_recursion_allows() -> None:
    deep: Any = [1]
    for _ in range(5000):
        deep = {"k": [deep, "s"]}
    copied = copy_json(deep)
    node, original = copied, deep
    while isinstance(node, dict):
        assert node is not original
        assert node["k"] is not original["k"]
        node, original = node["k"][0], original["k"][0]
    assert node == [1]
    assert node is not original


# -- the envelope is bounded ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "note"),
    [
        ({"n" * 1_000_000 + "_uri": "mcp+cache://conv-42/short"}, "(cut, 1,000,004 chars)"),
        ({"n" * 1_000_000 + "_uri": "mcp+cache://conv-42/AAAAAAAAAAA"}, "(cut, 1,000,004 chars)"),
        ({"n" * 1_000_000: "mcp+cache://conv-42/AAAAAAAAAAA"}, "(cut, 1,000,000 chars)"),
        ({"n" * 1_000_000 + "_uri": ["mcp+cache://conv-42/AAAAAAAAAAA", 1]}, "(cut, 1,000,004 chars)"),
        ({"data": {"k" * 1_000_000: {"j" * 1_000_000: "mcp+cache:x"}}}, "(cut, 1,000,001 chars)"),
        ({"mcp+cache://" + "k" * 1_000_000: 1}, "(cut, 1,000,012 chars)"),
    ],
    ids=["malformed", "unknown", "plain argument", "mixed list", "nested keys", "a key of ours"],
)
async def test_a_megabyte_argument_name_gives_a_small_envelope(
    harness: Harness, arguments: dict[str, Any], note: str
) -> None:
    refs = harness.refs()
    resolution = await refs.resolve(tool="t" * 1_000_000, arguments=arguments)
    missing = only_missing(resolution)
    assert len(missing["argument"]) <= 300
    assert note in missing["argument"]  # the note tells the real length
    assert resolution.error is not None
    assert "t" * 201 not in resolution.error["error"]
    assert len(json.dumps(resolution.error)) < 4000


async def test_an_evicted_references_huge_source_arguments_are_summarised_not_repeated(harness: Harness) -> None:
    refs = harness.refs()
    arguments = {"sql": "select " * 200_000, "limit": 10, **{f"opt{i}": i for i in range(100)}}
    stored = await refs.put(SERIES, server="db", tool="query", arguments=arguments)
    await refs.clear_conversation()
    resolution = await refs.resolve(tool="plot", arguments={"data_uri": str(stored.uri)})
    missing = only_missing(resolution)
    assert missing["reason"] == "evicted"
    assert missing["source"]["tool"] == "query"
    assert missing["source"]["arguments"]["limit"] == 10
    assert (
        missing["source"]["arguments"]["sql"]
        == f"<not repeated here: {len(json_bytes('select ' * 200_000)):,} bytes of JSON>"
    )
    assert len(missing["source"]["arguments"]) == 21  # twenty arguments, and a note saying how many more
    assert len(json.dumps(resolution.error)) < 4000


async def test_many_problems_each_stay_bounded(harness: Harness) -> None:
    refs = harness.refs()
    long = "mcp+cache://conv-42/AAAAAAAAAAA#/" + "x" * 2000
    resolution = await refs.resolve(tool="t", arguments={f"a{i}_uri": long for i in range(256)})
    assert resolution.error is not None
    assert len(resolution.error["_missing_uris"]) == 256
    assert all(len(m["uri"]) < 250 for m in resolution.error["_missing_uris"])
    assert len(json.dumps(resolution.error)) < 256 * 1500


# -- for_model never raises ----------------------------------------------------------------------------


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no")

    __repr__ = __str__


class HostileResult:
    @property
    def content(self) -> Any:
        raise RuntimeError("content is not for you")


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for index in range(depth):
        value = [value] if index % 2 else {"k": value}
    return value


def cyclic() -> dict[str, Any]:
    value: dict[str, Any] = {"pad": "x" * 100}
    value["self"] = value
    return value


UNSTORABLE = {
    "int of 5,000 digits": 10**4999,
    "an int of 5,000 digits inside an object": {"n": 10**4999, "pad": "x" * 100},
    "nesting depth 5,000": nested(5000),
    "a cycle": cyclic(),
    "an object whose str raises": {"x": Unprintable()},
    "a result whose content raises": HostileResult(),
}
STORABLE = {
    "NaN and infinities": {"nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"), "pad": "x" * 100},
    "non-JSON types": {"set": {1, 2}, "bytes": b"raw", "object": object(), (1, 2): "tuple key", "pad": "x" * 100},
    "a lone surrogate": {"s": "a\ud800b", "pad": "x" * 100},
    "nesting depth 300": nested(300),
}


@pytest.mark.parametrize("value", UNSTORABLE.values(), ids=UNSTORABLE.keys())
async def test_for_model_passes_what_cannot_be_stored_whole_and_logs_it(
    harness: Harness, value: Any, caplog: pytest.LogCaptureFixture
) -> None:
    refs = harness.refs(threshold_bytes=0, max_view_bytes=64)
    with caplog.at_level(logging.WARNING, logger="mcpcache.refs"):
        view = await refs.for_model(value, server="s", tool="t", arguments={})
    assert view.uri is None
    assert "_cache_uri" not in view.envelope
    assert view.shortened == []
    shown = view.envelope.get("result", view.envelope)
    assert shown is value or (isinstance(value, dict) and shown == value) or isinstance(value, HostileResult)
    assert "the model gets it whole" in caplog.text
    assert isinstance(view.text(), str)
    assert (await refs.stats())["items"] == 0


@pytest.mark.parametrize("value", STORABLE.values(), ids=STORABLE.keys())
async def test_for_model_never_raises_on_values_json_has_no_exact_form_for(harness: Harness, value: Any) -> None:
    refs = harness.refs(threshold_bytes=0)
    view = await refs.for_model(value, server="s", tool="t", arguments={})
    assert isinstance(view.text(), str)
    assert view.uri is not None
    # What is stored resolves to what the model was shown (NaN as null, a set as a list, bytes as text...).
    shown = json.loads(view.text())
    del shown["_cache_uri"]
    expected = shown["result"] if set(shown) == {"result"} else shown
    assert json.loads(json_bytes(await refs.load(view.uri))) == expected


async def test_for_model_never_raises_on_hostile_arguments_or_names(harness: Harness) -> None:
    refs = harness.refs(threshold_bytes=0)
    view = await refs.for_model(SERIES, server="s" * 10_000, tool="t", arguments={"x": Unprintable()})
    assert view.envelope["rows"] == SERIES["rows"]  # stored or not, the result is never lost


def test_lenient_json_writes_every_digit_and_every_level() -> None:
    assert lenient_json(10**4999) == "1" + "0" * 4999
    text = lenient_json(nested(5000))
    assert text.count("[") + text.count("{") == 5000
    assert lenient_json({"n": float("nan"), 1: (True, None)}) == '{"n":null,"1":[true,null]}'


# -- a property: whatever the model writes ---------------------------------------------------------------

BOUND = 8_000
SECRET = "s3cr3t-of-conversation-a"


def near_misses(uri: str) -> st.SearchStrategy[str]:
    parsed = parse(uri)
    tail = f"{parsed.conversation}/{parsed.token}"
    return st.one_of(
        st.sampled_from(
            [
                "mcp+cache:" + tail,
                "mcp+cache:/" + tail,
                "mcp+cache:///" + tail,
                "MCP+CACHE:" + tail,
                " " + uri,
                uri + " ",
                uri + "/",
                uri[:-1],
                uri + "A",
                uri.replace("//", "////"),
                uri + "#/rows/9999",
                uri + "#rows",
                "mcp+cache:",
            ]
        ),
        st.builds(lambda seg: f"mcp+cache://{seg}/{parsed.token}", st.text(max_size=70)),
        st.builds(lambda frag: f"{uri}#{frag}", st.text(max_size=20)),
        st.builds(lambda i: uri[:i], st.integers(len("mcp+cache:"), len(uri))),
        st.text(max_size=30).map(lambda t: "mcp+cache:" + t),
        st.text(max_size=30).map(lambda t: "Mcp+Cache://" + t),
    )


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@given(data=st.data())
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
async def test_resolve_never_raises_never_crosses_never_passes_ours_on_never_exceeds_the_bound(
    kind: str, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store: Store = MemoryStore() if kind == "memory" else SQLiteStore(Path(folder) / "refs.db")
        try:
            a = References(store, conversation_id="conv-a", threshold_bytes=0, max_resolved_bytes=BOUND)
            b = a.for_conversation("conv-b")
            theirs = await minted(a, {"owner": SECRET, "rows": time_series()[:20]})
            mine = await minted(b, {"rows": time_series()[:20]})  # about 1.5 KB: five fit the bound
            small = await minted(b, {"rows": time_series()[:2]})
            own = st.sampled_from([mine, small, mine + "#/rows", mine + "#/rows/3", small + "#"])
            reference = st.one_of(
                own,
                st.sampled_from([theirs, theirs + "#/owner", theirs.replace("conv-a", "conv-b")]),
                near_misses(mine),
                near_misses(theirs),
            )
            leaf = st.one_of(
                reference,
                st.text(max_size=10),
                st.sampled_from(["https://x.example/a", "mcp-cache://x/y", "see mcp+cache://x"]),
                st.integers() | st.none() | st.booleans(),
            )
            value = st.one_of(
                leaf,
                st.lists(reference, min_size=1, max_size=6),
                st.lists(own, min_size=0, max_size=300),  # amplification
                st.recursive(
                    leaf,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=6,
                ),
            )
            name = st.one_of(
                st.text(max_size=6).map(lambda n: n + "_uri"),
                st.text(max_size=6),
                st.just("n" * 3000 + "_uri"),
                reference,
            )
            clean = st.dictionaries(
                st.text(max_size=6).map(lambda n: n + "_uri") | st.text(max_size=6),
                own | st.lists(own, min_size=1, max_size=20) | st.text(max_size=10) | st.integers(),
                max_size=4,
            )
            arguments = data.draw(clean | st.dictionaries(name, value, max_size=4))
            resolution = await b.resolve(tool="t", arguments=arguments)
        finally:
            await store.close()
    event("resolved" if resolution.ok else "refused")
    if resolution.ok:
        args = resolution.arguments
        assert args is not None
        assert not any(is_cache_uri(text) for text in strings_in(args))
        assert SECRET not in json.dumps(args, default=str)
        placed = 0
        for target, uris in resolution.resolved.items():
            values = args[target] if isinstance(arguments[target + "_uri"], list) else [args[target]]
            assert len(values) == len(uris)
            placed += sum(len(json_bytes(v)) for v in values)
        assert placed <= BOUND
    else:
        error = resolution.error
        assert error is not None
        text = json.dumps(error)
        assert error["error"].startswith("invalid_args: ")
        assert SECRET not in text
        assert len(text) < 2000 + 4000 * len(error["_missing_uris"])
        for missing in error["_missing_uris"]:
            event(missing["reason"])
            assert missing["reason"] in ("unknown", "evicted", "other_conversation", "malformed", "too_large")
            assert len(missing["argument"]) < 250
            if missing["reason"] == "other_conversation":
                assert "source" not in missing
