"""The canonical forms, the tag and the digest (docs/extension.md, "Canonical forms" and "The digest"):
mcpcache's implementation and a second one written from the text alone (tests/support/second_canonical.py)
both reproduce docs/vectors/canonical.json, and agree with each other on every JSON value Hypothesis
draws, every float exponent included. That agreement is what lets the text stand for the code: the tag
form is what orjson writes, and these tests are where the two are held to each other.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import second_canonical as second
from support.vectors import VECTORS, build

from mcpcache.canonical import CanonicalizationError, _write_jcs, canonical_json, jcs
from mcpcache.etag import answer_digest, content_tag

property_test = settings(deadline=None, max_examples=400)

FILE: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))


def ours(form: str, value: Any) -> bytes | None:
    try:
        return canonical_json(value) if form == "tag" else jcs(value)
    except CanonicalizationError:
        return None


def theirs(form: str, value: Any) -> bytes | None:
    try:
        return second.canonical(value, form)
    except second.NoCanonicalForm:
        return None


def expected(entry: dict[str, Any], field: str) -> bytes | None:
    text = entry[field]
    if text is None:
        return None
    data: bytes = text.encode("utf-8")
    assert data.hex() == entry[field + "Hex"], "the file's text and hex agree"
    return data


# -- the vectors -----------------------------------------------------------------------------------


def test_the_vectors_file_is_what_mcpcache_computes() -> None:
    assert build() == FILE, "regenerate with: python tests/support/vectors.py"


@pytest.mark.parametrize("entry", FILE["values"], ids=lambda entry: entry["name"])
@pytest.mark.parametrize("implementation", [ours, theirs], ids=["mcpcache", "second"])
def test_both_implementations_reproduce_the_canonical_bytes(implementation: Any, entry: dict[str, Any]) -> None:
    value = json.loads(entry["json"])
    assert implementation("tag", value) == expected(entry, "tagForm")
    assert implementation("digest", value) == expected(entry, "digestForm")


@pytest.mark.parametrize("entry", FILE["answers"], ids=lambda entry: entry["name"])
def test_both_implementations_reproduce_the_tags_and_digests(entry: dict[str, Any]) -> None:
    result = json.loads(entry["result"])
    content, structured, meta = result.get("content", []), result.get("structuredContent"), result.get("_meta")
    # One reading of the recipe: every answer has its tag, whatever `_meta` carries.
    assert entry["tag"] is not None
    assert content_tag(content, structured, meta) == entry["tag"]
    assert second.tag(result) == entry["tag"]
    if entry["digest"] is None:
        with pytest.raises(CanonicalizationError):
            answer_digest(content, structured, meta)
        with pytest.raises(second.NoCanonicalForm):
            second.digest(result)
    else:
        assert answer_digest(content, structured, meta) == entry["digest"]
        assert second.digest(result) == entry["digest"]


def test_the_vectors_cover_what_the_text_singles_out() -> None:
    """Floats, big integers, non-ASCII, nesting to the limit and past it, duplicate names, a rejected input
    of each form, and a key order on which the two forms disagree: the cases a second implementation most
    often gets wrong."""
    names = " ".join(entry["name"] for entry in FILE["values"] + FILE["answers"])
    for word in ("floats", "2^53", "2^64", "non-ASCII", "nested", "surrogate", "BMP", "serverInfo", "duplicate"):
        assert word in names
    for words in ("100 levels deep", "101 levels deep"):
        assert words in names
    assert any(e["tagForm"] != e["digestForm"] for e in FILE["values"] if e["tagForm"] and e["digestForm"])


# -- the two implementations agree beyond the vectors -------------------------------------------------

tag_ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
any_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | tag_ints | finite_floats | any_text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(any_text, children, max_size=5),
    max_leaves=25,
)


@property_test
@given(json_values)
def test_the_tag_form_is_what_orjson_writes(value: Any) -> None:
    assert theirs("tag", value) == ours("tag", value)


@property_test
@given(json_values)
def test_the_digest_form_agrees(value: Any) -> None:
    assert theirs("digest", value) == ours("digest", value)


float_free_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**54), max_value=2**54) | any_text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(any_text, children, max_size=5),
    max_leaves=25,
)


@property_test
@given(float_free_values)
def test_orjsons_shortcut_to_rfc_8785_writes_what_the_writer_does(value: Any) -> None:
    """`jcs` lets orjson write a value without floats, big integers or keys beyond U+FFFF; the bytes
    must be the writer's (and the second implementation's) either way."""
    parts: list[str] = []
    try:
        _write_jcs(value, parts.append)
        written: bytes | None = "".join(parts).encode("utf-8")
    except CanonicalizationError:
        written = None
    assert ours("digest", value) == written == theirs("digest", value)


def test_every_float_exponent() -> None:
    """Each decimal exponent a double can have, with short and long mantissas, both signs, and the
    neighbours of each (the last bit flipped), in both forms."""
    for exponent in range(-324, 309):
        for mantissa in (1.0, 1.5, 2.2250738585072014, 9.87654321, 9.999999999999999):
            number = mantissa * 10.0**exponent if exponent > -300 else mantissa * 1e-300 * 10.0 ** (exponent + 300)
            if not math.isfinite(number) or number == 0:
                continue
            bits = struct.unpack("<q", struct.pack("<d", number))[0]
            for candidate in (number, struct.unpack("<d", struct.pack("<q", bits ^ 1))[0]):
                for signed in (candidate, -candidate):
                    assert theirs("tag", signed) == ours("tag", signed), signed
                    assert theirs("digest", signed) == ours("digest", signed), signed


@property_test
@given(st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1))
def test_the_digest_form_does_not_tell_an_integer_from_the_same_float(number: int) -> None:
    """What makes the digest portable: a client whose JSON library reads `1.0` as 1 (JavaScript's does)
    computes the same bytes as the server that wrote 1.0. The tag form tells them apart, and may: only
    the server that minted a tag ever computes it."""
    assert jcs({"n": number}) == jcs({"n": float(number)})
    assert canonical_json(number) != canonical_json(float(number))


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, 2**53, -(2**53), "\ud800", {1: "a"}, (1, 2), b"x", {"a": [1, {"b": {3}}]}],
    ids=repr,
)
def test_values_without_a_digest_form_raise_canonicalization_error(value: Any) -> None:
    with pytest.raises(CanonicalizationError):
        jcs(value)


# -- one reading of the recipe ------------------------------------------------------------------------


def test_server_info_is_outside_the_tag_as_it_is_outside_the_digest() -> None:
    """The same answer as a server made it and as it arrived on 2026-07-28 (the SDK's serverInfo added, a
    gateway's or another version's) has one tag and one digest: the document both are computed from leaves
    the stamp out."""
    by_name = {entry["name"]: entry for entry in FILE["answers"]}
    made = by_name["read_cell with a _meta key of its own (docs/protocol.md section 2)"]
    received = by_name["as received on 2026-07-28: serverInfo is outside the tag and the digest"]
    assert received["tag"] == made["tag"]
    assert received["digest"] == made["digest"]
    content = [{"type": "text", "text": "x = 1"}]
    mine = {"io.jupyter-mcp/cell_id": "c1"}
    for info in ({"name": "a", "version": "1"}, {"name": "gateway", "version": "2"}):
        meta = {**mine, "io.modelcontextprotocol/serverInfo": info}
        assert content_tag(content, {"kind": "cell"}, meta) == content_tag(content, {"kind": "cell"}, mine)
        assert answer_digest(content, {"kind": "cell"}, meta) == answer_digest(content, {"kind": "cell"}, mine)


def test_duplicate_names_in_json_text_keep_the_last_as_every_parser_here_does() -> None:
    """The forms are defined on parsed values; the parsers mcpcache and the MCP SDK read with agree."""
    import orjson
    import pydantic_core

    text = '{"a":1,"b":2,"a":3}'
    assert json.loads(text) == orjson.loads(text) == pydantic_core.from_json(text) == {"a": 3, "b": 2}
    entry = next(e for e in FILE["values"] if e["name"].startswith("duplicate member names"))
    assert entry["tagForm"] == entry["digestForm"] == '{"a":3,"b":2}'


def _nested(levels: int) -> Any:
    """A value `levels` deep: arrays around an empty object (which is the innermost level)."""
    value: Any = {}
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize("where", ["structuredContent", "meta", "content block"])
def test_one_nesting_limit_counted_in_the_answer_document_for_tags_and_digests(where: str) -> None:
    """`MAX_DEPTH` levels of the whole document have a tag and a digest; one more has neither, wherever
    in the answer the depth is, and with or without a float (RFC 8785's two writers)."""
    from mcpcache.canonical import MAX_DEPTH

    def parts(levels: int, leaf: Any) -> tuple[list[Any], Any, Any]:
        inner: Any = [leaf]
        for _ in range(levels - 1):
            inner = [inner]
        if where == "structuredContent":
            return [], inner, None  # the document (1) holds it: levels + 1
        if where == "meta":
            return [], None, {"example.com/deep": inner}  # the document (1), the meta object (2)
        return [{"type": "text", "text": "t", "deep": inner}], None, None  # document, content, block

    below = {"structuredContent": 1, "meta": 2, "content block": 3}[where]
    for leaf in (1, 1.5):
        content, structured, meta = parts(MAX_DEPTH - below, leaf)
        content_tag(content, structured, meta)
        answer_digest(content, structured, meta)
        assert second.tag({"content": content, "structuredContent": structured, "_meta": meta})
        content, structured, meta = parts(MAX_DEPTH - below + 1, leaf)
        with pytest.raises(CanonicalizationError):
            content_tag(content, structured, meta)
        with pytest.raises(CanonicalizationError):
            answer_digest(content, structured, meta)
        with pytest.raises(second.NoCanonicalForm):
            second.tag({"content": content, "structuredContent": structured, "_meta": meta})
    assert canonical_json(_nested(MAX_DEPTH))
    assert jcs(_nested(MAX_DEPTH))
    for form in (canonical_json, jcs):
        with pytest.raises(CanonicalizationError):
            form(_nested(MAX_DEPTH + 1))
