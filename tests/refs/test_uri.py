"""`mcp+cache://<conv>/<token>[#<JSON pointer>]` exactly as docs/protocol.md section 6 writes it.

The grammar is the first line of defence: whatever a model (or an attacker speaking through one) puts in
an `X_uri` argument goes through `parse` before anything touches a store, so `parse` must refuse every
malformed string with a UriError and nothing else.
"""

from __future__ import annotations

import base64
import contextlib
import re
import secrets

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mcpcache.refs.uri import (
    MAX_URI_LENGTH,
    URI_PATTERN,
    CacheUri,
    PointerError,
    UriError,
    conversation_segment,
    escape_pointer_token,
    is_cache_uri,
    mint,
    parse,
    parse_pointer,
    pointer_of,
    resolve_pointer,
)

MINTED = re.compile(r"mcp\+cache://[A-Za-z0-9_-]{1,64}/[A-Za-z0-9_-]{11}")

# -- the conversation segment -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("conversation_id", "segment"),
    [
        ("conv-42", "conv-42"),
        ("A_z-09", "A_z-09"),
        ("a/b", "a_b"),
        ("a b.c", "a_b_c"),
        ("../../etc/passwd", "______etc_passwd"),
        ("ünïcödé", "_n_c_d_"),
        ("😀", "_"),
        ("", "default"),
        ("x" * 100, "x" * 64),
        ("%2e%2e", "_2e_2e"),
    ],
)
def test_conversation_segment_is_sanitised_and_cut(conversation_id: str, segment: str) -> None:
    assert conversation_segment(conversation_id) == segment
    assert MINTED.fullmatch(str(mint(conversation_id)))
    assert mint(conversation_id).conversation == segment


@given(st.text(max_size=200))
def test_any_conversation_id_mints_a_well_formed_uri(conversation_id: str) -> None:
    minted = mint(conversation_id)
    assert MINTED.fullmatch(str(minted))
    assert parse(str(minted)) == minted
    assert 1 <= len(minted.conversation) <= 64


# -- the token ----------------------------------------------------------------------------------------


def test_token_is_eight_bytes_from_secrets_in_unpadded_base64url(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int | None] = []
    real = secrets.token_urlsafe

    def spy(nbytes: int | None = None) -> str:
        asked.append(nbytes)
        return real(nbytes)

    monkeypatch.setattr(secrets, "token_urlsafe", spy)
    token = mint("c").token
    assert asked == [8]
    assert len(token) == 11
    assert "=" not in token
    assert len(base64.urlsafe_b64decode(token + "=")) == 8


def test_tokens_do_not_repeat() -> None:
    tokens = {mint("c").token for _ in range(5000)}
    assert len(tokens) == 5000


# -- parsing ------------------------------------------------------------------------------------------


def test_parse_round_trips_a_minted_uri() -> None:
    minted = mint("conv-42")
    assert parse(str(minted)) == minted
    assert parse(str(minted)).pointer is None


def test_scheme_is_case_insensitive_and_normalised() -> None:
    minted = mint("c")
    shouted = "MCP+Cache://" + str(minted)[len("mcp+cache://") :]
    assert is_cache_uri(shouted)
    assert parse(shouted) == minted
    assert str(parse(shouted)) == str(minted)


@pytest.mark.parametrize(
    ("fragment", "pointer"),
    [
        ("", ""),
        ("/", "/"),
        ("/rows", "/rows"),
        ("/rows/0/value", "/rows/0/value"),
        ("/a~1b", "/a~1b"),
        ("/m~0n", "/m~0n"),
        ("/a%20b", "/a b"),
        ("/%C3%A9t%C3%A9", "/été"),
        ("/%25", "/%"),
        ("/%7E1", "/~1"),
    ],
)
def test_fragment_is_a_percent_decoded_json_pointer(fragment: str, pointer: str) -> None:
    base = str(mint("c"))
    parsed = parse(f"{base}#{fragment}")
    assert parsed.pointer == pointer
    assert parse(str(parsed)) == parsed


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (None, "string"),
        (42, "string"),
        (["mcp+cache://c/AAAAAAAAAAA"], "string"),
        ("", "not an"),
        ("https://example.com/x", "not an"),
        ("mcp+cache:/c/AAAAAAAAAAA", "both slashes"),
        ("mcp+cache:c/AAAAAAAAAAA", "both slashes"),
        ("MCP+Cache:c/AAAAAAAAAAA", "both slashes"),
        ("mcp+cache:", "both slashes"),
        (" mcp+cache://c/AAAAAAAAAAA", "whitespace"),
        ("\tmcp+cache://c/AAAAAAAAAAA", "whitespace"),
        ("mcp+cache://", "form"),
        ("mcp+cache://c", "form"),
        ("mcp+cache://c/", "token"),
        ("mcp+cache:///AAAAAAAAAAA", "conversation"),
        ("mcp+cache://../AAAAAAAAAAA", "conversation"),
        ("mcp+cache://../x", "conversation"),
        ("mcp+cache://c/../../AAAAAAAAAAA", "token"),
        ("mcp+cache://%2e%2e/AAAAAAAAAAA", "conversation"),
        ("mcp+cache://c/%2e%2e%2fAAAAA", "token"),
        ("mcp+cache://c/AAAAAAAAAA", "token"),
        ("mcp+cache://c/AAAAAAAAAAAA", "token"),
        ("mcp+cache://c/AAAAAAAAAA=", "token"),
        ("mcp+cache://c/AAAAAAAAAA+", "token"),
        ("mcp+cache://c/AAAAAAAAAAA/extra", "token"),
        ("mcp+cache://c/AAAAAAAAAAA?x=1", "token"),
        ("mcp+cache://c/ＡＡＡＡＡＡＡＡＡＡＡ", "token"),
        ("mcp+cache://c/AAAAAAAAAA٣", "token"),
        ("mcp+cache://ç/AAAAAAAAAAA", "conversation"),
        ("mcp+cache://" + "x" * 65 + "/AAAAAAAAAAA", "conversation"),
        ("mcp+cache://c\n/AAAAAAAAAAA", "conversation"),
        ("mcp+cache://c/AAAAAAAAAAA\n", "token"),
        ("mcp+cache://c/AAAAAAAAAAA#rows", "starts with '/'"),
        ("mcp+cache://c/AAAAAAAAAAA#/a~2b", "followed by 0 or 1"),
        ("mcp+cache://c/AAAAAAAAAAA#/a~", "followed by 0 or 1"),
        ("mcp+cache://c/AAAAAAAAAAA#/%FF", "UTF-8"),
        ("mcp+cache://c/AAAAAAAAAAA#" + "/x" * MAX_URI_LENGTH, "at most"),
    ],
)
def test_malformed_references_are_refused_with_a_reason(text: object, complaint: str) -> None:
    with pytest.raises(UriError, match=re.escape(complaint)):
        parse(text)


@given(st.text(alphabet=st.characters(exclude_categories=()), max_size=300))
@example("mcp+cache://c/AAAAAAAAAAA#/%FF%FE")
@example("mcp+cache://c/AAAAAAAAAAA#/\ud800")
@example("mcp+cache://c/AAAAAAAAAAA#%")
@example("mcp+cache://c/AAAAAAAAAAA##")
@settings(max_examples=400)
def test_parse_raises_nothing_but_uri_error_on_arbitrary_text(text: str) -> None:
    try:
        parsed = parse(text)
    except UriError:
        return
    assert is_cache_uri(text)
    assert MINTED.fullmatch(str(parsed.whole))


@given(st.text(alphabet=st.characters(exclude_categories=()), max_size=60))
def test_parse_raises_nothing_but_uri_error_behind_our_prefix(tail: str) -> None:
    for text in ("mcp+cache://" + tail, str(mint("c")) + tail, str(mint("c")) + "#" + tail):
        with contextlib.suppress(UriError):
            parse(text)


pointer_tokens = st.lists(st.text(max_size=12) | st.integers(0, 10_000), max_size=6)


@given(st.text(max_size=80), pointer_tokens)
@settings(max_examples=300)
def test_minted_uris_with_random_pointers_round_trip(conversation_id: str, path: list[str | int]) -> None:
    pointer = pointer_of(path)
    addressed = mint(conversation_id).at(pointer)
    text = str(addressed)
    assert parse(text) == addressed
    assert str(parse(text)) == text
    assert parse_pointer(pointer) == [str(part) for part in path]
    assert re.fullmatch(URI_PATTERN, text)


@given(st.text(max_size=200))
def test_is_cache_uri_tells_our_scheme_from_others(text: str) -> None:
    # Anything starting with `mcp+cache:` is ours (in any case, after any leading whitespace), `//` or not.
    assert is_cache_uri(text) == text.lstrip().lower().startswith("mcp+cache:")
    assert is_cache_uri("mcp+cache:" + text)
    assert is_cache_uri(" \n" + "MCP+CACHE:" + text)


@pytest.mark.parametrize(
    "value",
    [
        "https://example.com/data.json",
        "http://mcp+cache.example/x",
        "mcp+cachex://c/AAAAAAAAAAA",
        "mcp-cache://c/AAAAAAAAAAA",
        "file:///etc/passwd",
        "data:application/json,{}",
        "mcp+cache",
        "mcp+cach://c/AAAAAAAAAAA",
        "x mcp+cache://c/AAAAAAAAAAA",
        None,
        7,
        b"mcp+cache://c/AAAAAAAAAAA",
        ["mcp+cache://c/AAAAAAAAAAA"],
    ],
)
def test_other_schemes_and_values_are_not_ours(value: object) -> None:
    assert not is_cache_uri(value)


@pytest.mark.parametrize(
    "value",
    ["mcp+cache://../x", "mcp+cache:c/AAAAAAAAAAA", "mcp+cache:/c/AAAAAAAAAAA", " mcp+cache://c/AAAAAAAAAAA"],
)
def test_a_malformed_reference_in_our_scheme_is_still_ours_to_refuse(value: str) -> None:
    assert is_cache_uri(value)
    with pytest.raises(UriError):
        parse(value)


# -- JSON pointers (RFC 6901) ------------------------------------------------------------------------

DOCUMENT = {
    "foo": ["bar", "baz"],
    "": 0,
    "a/b": 1,
    "c%d": 2,
    "e^f": 3,
    "g|h": 4,
    "i\\j": 5,
    'k"l': 6,
    " ": 7,
    "m~n": 8,
}


@pytest.mark.parametrize(
    ("pointer", "value"),
    [
        # RFC 6901 section 5, verbatim.
        ("", DOCUMENT),
        ("/foo", ["bar", "baz"]),
        ("/foo/0", "bar"),
        ("/", 0),
        ("/a~1b", 1),
        ("/c%d", 2),
        ("/e^f", 3),
        ("/g|h", 4),
        ("/i\\j", 5),
        ('/k"l', 6),
        ("/ ", 7),
        ("/m~0n", 8),
    ],
)
def test_rfc6901_examples(pointer: str, value: object) -> None:
    assert resolve_pointer(DOCUMENT, pointer) == value


@pytest.mark.parametrize(
    ("fragment", "value"),
    [
        # RFC 6901 section 6: the same pointers as URI fragments.
        ("#", DOCUMENT),
        ("#/foo", ["bar", "baz"]),
        ("#/foo/0", "bar"),
        ("#/", 0),
        ("#/a~1b", 1),
        ("#/c%25d", 2),
        ("#/e%5Ef", 3),
        ("#/g%7Ch", 4),
        ("#/i%5Cj", 5),
        ("#/k%22l", 6),
        ("#/%20", 7),
        ("#/m~0n", 8),
    ],
)
def test_rfc6901_fragment_examples(fragment: str, value: object) -> None:
    parsed = parse(str(mint("c")) + fragment)
    assert parsed.pointer is not None
    assert resolve_pointer(DOCUMENT, parsed.pointer) == value


def test_escapes_are_undone_in_the_right_order() -> None:
    # "~01" is "~1" literally, not "/": ~1 is replaced first, then ~0.
    assert parse_pointer("/~01") == ["~1"]
    assert escape_pointer_token("~1/") == "~01~1"
    assert pointer_of(["a/b", "m~n", 3]) == "/a~1b/m~0n/3"


@pytest.mark.parametrize(
    ("pointer", "complaint"),
    [
        ("/foo/2", "no item"),
        ("/foo/01", "no item"),
        ("/foo/-", "no item"),
        ("/foo/-1", "no item"),
        ("/nope", "no member"),
        ("/foo/0/x", "cannot step into a str"),
        ("/ /x", "cannot step into a int"),
    ],
)
def test_a_pointer_to_nothing_is_a_pointer_error(pointer: str, complaint: str) -> None:
    with pytest.raises(PointerError, match=re.escape(complaint)):
        resolve_pointer(DOCUMENT, pointer)


def test_at_refuses_a_bad_pointer_and_whole_drops_it() -> None:
    minted = mint("c")
    with pytest.raises(UriError):
        minted.at("rows")
    assert minted.at("/rows").whole == minted
    assert isinstance(minted.at("/rows"), CacheUri)
