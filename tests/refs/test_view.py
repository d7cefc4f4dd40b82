"""What the model is shown: the payload of every result shape, the envelope, and shortening with markers.

The rule the markers keep (json-layout's, and docs/protocol.md section 6): a shortened view never holds a
plausible prefix of a value. Every member is either whole or a marker that says what it was, how big, and
names a reference whose fragment resolves to exactly that member.
"""

from __future__ import annotations

import json
import re
from typing import Any

import mcp_types as mt
import orjson
import pytest
from fastmcp.client.client import CallToolResult as FastMCPResult
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from mcpcache import tokens as tokens_module
from mcpcache.refs import References
from mcpcache.refs import view as view_module
from mcpcache.refs.uri import mint, parse
from mcpcache.refs.view import envelope_of, json_bytes, marker, payload_of, shorten
from mcpcache.stores import MemoryStore
from mcpcache.tokens import count_tokens

from .servers import time_series

NAME = r'"(?:[^"\\]|\\.)*"'  # a JSON string literal
MARKER = re.compile(
    r"<elided (?P<kind>object with \d+ members|list of \d+ items|text of [\d,]+ characters) "
    rf"\((?P<name>{NAME})\): "
    r"(?P<bytes>[\d,]+) bytes, (?P<approx>~?)(?P<tokens>[\d,]+) tokens\. It is stored, not lost: to pass it to a tool "
    r'argument X, give "(?P<uri>mcp\+cache://[^"]+)" as X_uri instead of X>'
)


def text_block(text: str) -> mt.TextContent:
    return mt.TextContent(type="text", text=text)


# -- the payload of each result shape -----------------------------------------------------------------

SERIES = {"station": "KSLC", "rows": time_series()}


@pytest.mark.parametrize(
    ("result", "payload", "is_error"),
    [
        pytest.param(SERIES, SERIES, False, id="plain dict"),
        pytest.param([1, 2], [1, 2], False, id="plain list"),
        pytest.param("text", "text", False, id="plain str"),
        pytest.param(7, 7, False, id="plain int"),
        pytest.param(None, None, False, id="None"),
        pytest.param(
            mt.CallToolResult(content=[text_block("{}")], structured_content=SERIES),
            SERIES,
            False,
            id="mcp structured wins over its text",
        ),
        pytest.param(
            mt.CallToolResult(content=[text_block(json.dumps(SERIES))]), SERIES, False, id="mcp one JSON text block"
        ),
        pytest.param(
            mt.CallToolResult(content=[text_block("not { json")]), "not { json", False, id="mcp one plain text block"
        ),
        pytest.param(
            mt.CallToolResult(content=[text_block("[1]"), text_block("[2]")]),
            "[1]\n[2]",
            False,
            id="mcp several text blocks are joined, not parsed",
        ),
        pytest.param(
            mt.CallToolResult(
                content=[text_block("a"), mt.ImageContent(type="image", data="QUJD", mime_type="image/png")]
            ),
            [{"type": "text", "text": "a"}, {"type": "image", "data": "QUJD", "mimeType": "image/png"}],
            False,
            id="mcp image: the blocks themselves",
        ),
        pytest.param(
            mt.CallToolResult(content=[text_block('{"error": "no"}')], structured_content={"x": 1}, is_error=True),
            '{"error": "no"}',
            True,
            id="mcp error: its text, never parsed as data",
        ),
        pytest.param(
            FastMCPResult(content=[text_block("{}")], structured_content=SERIES, meta=None, data=object()),
            SERIES,
            False,
            id="fastmcp structured",
        ),
        pytest.param(
            FastMCPResult(content=[text_block("boom")], structured_content=None, meta=None, is_error=True),
            "boom",
            True,
            id="fastmcp error",
        ),
        pytest.param((1, "a"), [1, "a"], False, id="tuple as its JSON"),
    ],
)
def test_payload_of_each_result_shape(result: Any, payload: Any, is_error: bool) -> None:
    got = payload_of(result)
    assert got.value == payload
    assert got.is_error is is_error


class Reading(BaseModel):
    t: str
    value: float


def test_a_host_value_that_is_not_json_is_shown_as_its_json_form_not_as_nothing() -> None:
    assert payload_of(Reading(t="x", value=1.5)).value == {"t": "x", "value": 1.5}
    assert sorted(payload_of({3, 1, 2}).value) == [1, 2, 3]
    assert payload_of(object()).value.startswith("<object object")


async def test_integers_orjson_cannot_write_are_stored_and_resolved_exactly() -> None:
    # pydantic reads any JSON integer into a Python int, so a structured result can hold 2**70; orjson
    # refuses to write it (the host used to crash) and would read it back as a float (losing digits).
    refs = References(MemoryStore(), conversation_id="c", threshold_bytes=0)
    payload = {"id": 2**70 + 1, "ids": [-(2**80)], 2: "int key", "pad": "x" * 50}
    view = await refs.for_model(payload, server="s", tool="t", arguments={})
    assert view.uri is not None
    assert await refs.load(view.uri) == {"id": 2**70 + 1, "ids": [-(2**80)], "2": "int key", "pad": "x" * 50}
    assert await refs.load(view.uri.at("/id")) == 2**70 + 1
    assert json.loads(view.text())["id"] == 2**70 + 1


# -- the envelope -------------------------------------------------------------------------------------


def test_envelope_adds_cache_uri_beside_the_members_of_an_object() -> None:
    uri = mint("c")
    assert envelope_of({"a": 1}, uri) == {"a": 1, "_cache_uri": str(uri)}
    assert envelope_of({"a": 1}, None) == {"a": 1}


@pytest.mark.parametrize("payload", [[1, 2], "text", 3, None, {"_cache_uri": "mine"}, {"result": 1}])
def test_envelope_never_collides_with_the_payloads_own_keys(payload: Any) -> None:
    uri = mint("c")
    envelope = envelope_of(payload, uri)
    assert envelope == {"result": payload, "_cache_uri": str(uri)}


# -- markers and shortening ---------------------------------------------------------------------------


def test_a_marker_names_kind_size_tokens_and_the_reference() -> None:
    rows = time_series()
    uri = mint("c").at("/rows")
    text = marker(rows, uri, "rows")
    found = MARKER.fullmatch(text)
    assert found, text
    assert found["kind"] == "list of 240 items"
    assert json.loads(found["name"]) == "rows"
    assert int(found["bytes"].replace(",", "")) == len(json_bytes(rows))
    assert int(found["tokens"].replace(",", "")) == count_tokens(json_bytes(rows).decode()).count
    assert found["approx"] == ""
    assert parse(found["uri"]) == uri


def test_a_marker_says_when_its_token_count_is_an_estimate(no_tokenizer: None) -> None:
    found = MARKER.fullmatch(marker("x" * 1000, mint("c"), "result"))
    assert found
    assert found["approx"] == "~"


@pytest.fixture
def no_tokenizer(monkeypatch: pytest.MonkeyPatch) -> Any:
    tokens_module._encoder.cache_clear()
    monkeypatch.setattr(tokens_module, "_encoder", lambda: None)
    yield
    monkeypatch.undo()
    tokens_module._encoder.cache_clear()


def members_of(envelope: dict[str, Any]) -> Any:
    body = {k: v for k, v in envelope.items() if k != "_cache_uri"}
    return body["result"] if set(body) == {"result"} else body


async def check_view(refs: References, payload: Any, budget: int) -> None:
    """Every member of the view is whole or a marker whose reference resolves to exactly that member."""
    view = await refs.for_model(payload, server="s", tool="t", arguments={})
    assert view.uri is not None
    assert view.envelope["_cache_uri"] == str(view.uri)
    assert await refs.load(view.uri) == payload
    shown = members_of(view.envelope)
    if view.shortened == [""]:
        found = MARKER.fullmatch(shown)
        assert found, shown
        assert await refs.load(found["uri"]) == payload
        assert parse(found["uri"]).pointer is None
        return
    assert len(view.text().encode()) <= budget or not view.shortened
    keys = range(len(payload)) if isinstance(payload, list) else payload.keys()
    for key in keys:
        original, seen = payload[key], shown[key]
        pointer = "/" + str(key).replace("~", "~0").replace("/", "~1")
        if pointer in view.shortened:
            found = MARKER.fullmatch(seen)
            assert found, seen
            assert parse(found["uri"]).pointer == pointer
            assert await refs.load(found["uri"]) == original
            assert int(found["bytes"].replace(",", "")) == len(json_bytes(original))
        else:
            assert seen == original  # whole, never a prefix


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=400),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=6), inner, max_size=6),
    max_leaves=40,
)


@given(
    st.dictionaries(st.text(max_size=8), json_values, min_size=1, max_size=8)
    | st.lists(json_values, min_size=1, max_size=8),
    st.integers(0, 3000),
)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
async def test_shortened_views_hold_only_whole_values_and_resolving_markers(payload: Any, budget: int) -> None:
    refs = References(MemoryStore(), conversation_id="c", threshold_bytes=0, max_view_bytes=budget)
    await check_view(refs, payload, budget)


pytestmark = pytest.mark.anyio


async def test_the_series_behind_a_marker_resolves_to_exactly_its_rows() -> None:
    refs = References(MemoryStore(), conversation_id="c", threshold_bytes=4096, max_view_bytes=4096)
    payload = {"station": "KSLC", "unit": "C", "rows": time_series()}
    view = await refs.for_model(payload, server="s", tool="query", arguments={"station": "KSLC"})
    assert view.shortened == ["/rows"]
    assert view.envelope["station"] == "KSLC"
    found = MARKER.fullmatch(view.envelope["rows"])
    assert found
    assert found["kind"] == "list of 240 items"
    assert await refs.load(found["uri"]) == time_series()
    await check_view(refs, payload, 4096)


async def test_a_text_result_is_referenced_before_it_is_cut_and_never_sliced() -> None:
    refs = References(MemoryStore(), conversation_id="c", threshold_bytes=4096, max_view_bytes=4096)
    text = "line of a long report\n" * 2000
    view = await refs.for_model(text, server="s", tool="report", arguments={})
    assert view.shortened == [""]
    found = MARKER.fullmatch(view.envelope["result"])
    assert found
    assert found["kind"] == "text of 44,000 characters"
    assert "line of a long report" not in view.text()
    assert await refs.load(found["uri"]) == text


async def test_a_list_of_small_items_becomes_one_marker_rather_than_longer_markers() -> None:
    refs = References(MemoryStore(), conversation_id="c", threshold_bytes=1024, max_view_bytes=1024)
    rows = time_series()  # each row is far smaller than a marker
    view = await refs.for_model(rows, server="s", tool="t", arguments={})
    assert view.shortened == [""]
    assert len(view.text().encode()) < 1024


async def test_shortening_encodes_the_view_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    # Members a little over a marker's size, so each one is worth replacing. Before the fix every
    # replacement re-encoded the whole envelope: quadratic in the members (2,000 x 600 KB here). The work
    # is counted in bytes encoded rather than timed, so the test says the same on any machine.
    encoded = 0
    real = view_module.json_bytes

    def counting(value: Any) -> bytes:
        nonlocal encoded
        body = real(value)
        encoded += len(body)
        return body

    monkeypatch.setattr(view_module, "json_bytes", counting)
    refs = References(MemoryStore(), conversation_id="c", threshold_bytes=1024, max_view_bytes=1024)
    payload = ["x" * 300 for _ in range(2000)]
    view = await refs.for_model(payload, server="s", tool="t", arguments={})
    assert view.shortened == [""]
    assert encoded <= 10 * len(real(payload))


async def test_view_without_a_budget_is_the_whole_payload_plus_the_uri() -> None:
    refs = References(MemoryStore(), conversation_id="c", threshold_bytes=4096)
    view = await refs.for_model(SERIES, server="s", tool="t", arguments={})
    assert view.shortened == []
    assert view.envelope == {**SERIES, "_cache_uri": str(view.uri)}
    assert orjson.loads(view.text()) == view.envelope


def test_shorten_leaves_an_envelope_that_fits_alone() -> None:
    uri = mint("c")
    envelope = envelope_of({"a": "b" * 100}, uri)
    assert shorten({"a": "b" * 100}, envelope, uri, 10_000) == (envelope, [])


def test_max_view_bytes_below_the_threshold_is_refused() -> None:
    # Anything cut must have been stored first; a view budget below the threshold would cut unstored results.
    with pytest.raises(ValueError, match="at least threshold_bytes"):
        References(MemoryStore(), threshold_bytes=4096, max_view_bytes=1000)


# -- token counts -------------------------------------------------------------------------------------


def test_token_counts_are_o200k() -> None:
    # Known o200k counts (tiktoken gives the same): words are single tokens, a leading space joins the word.
    assert count_tokens("hello world").count == 2
    assert count_tokens("hello world").method == "o200k"
    assert count_tokens("").count == 0


def test_without_the_tokenizer_the_count_is_an_estimate_and_labelled_so(no_tokenizer: None) -> None:
    counted = count_tokens("abcd" * 100)
    assert counted.method == "estimate"
    assert counted.count == 100


def test_a_text_the_tokenizer_splits_into_many_tokens_is_still_counted_exactly() -> None:
    # Rare CJK characters cost about 4 tokens each; chunks of 100k characters overflowed the tokenizer's
    # 200k-token limit and the count fell back to a mislabelled guess.
    text = "".join(chr(0x20000 + (i * 7919) % 0xA000) for i in range(120_000))
    counted = count_tokens(text)
    assert counted.method == "o200k"
    assert counted.count > 200_000


def test_token_counts_stay_exact_when_deprecation_warnings_are_errors() -> None:
    # Importing bpe-openai warns (importlib.resources.open_binary); under `-W error` that import failed and
    # every count silently became an estimate. A fresh interpreter, because the import happens once.
    import subprocess
    import sys

    code = "from mcpcache.tokens import count_tokens; print(count_tokens('hello world').method)"
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "o200k", done.stderr
