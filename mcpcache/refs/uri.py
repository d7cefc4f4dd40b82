"""`mcp+cache://<conv>/<token>[#<JSON pointer>]`: minting, strict parsing, and pointer lookup.

docs/protocol.md section 6. The conversation segment is cosmetic (the stored entry keeps the exact id and a
reference resolves only where it was minted); the token is what names the entry, 8 bytes from
`secrets`, so guessing one is hopeless. Parsing is strict and bounded: anything that is not exactly this
shape is malformed, with a reason, and never reaches a store.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

SCHEME = "mcp+cache"
PREFIX = f"{SCHEME}://"
OURS = f"{SCHEME}:"
"""Anything that starts with this (any case, after any leading whitespace) is ours: resolved if it is a
well-formed reference in the right place, refused otherwise, never handed to a tool as a plain string."""
TOKEN_CHARS = 11
MAX_URI_LENGTH = 2048
"""A longer string is not a reference anybody minted; it is refused before any other work."""

_CONV = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TOKEN = re.compile(r"[A-Za-z0-9_-]{11}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
URI_PATTERN = r"^mcp\+cache://[A-Za-z0-9_-]{1,64}/[A-Za-z0-9_-]{11}(#.*)?$"
"""For tool schemas: what a model may put in an `X_uri` argument."""


class UriError(ValueError):
    """A string in the mcp+cache scheme that is not a well-formed reference."""


def conversation_segment(conversation_id: str) -> str:
    """Characters outside [A-Za-z0-9_-] become `_`, cut to 64, `default` when nothing is left."""
    return _UNSAFE.sub("_", conversation_id)[:64] or "default"


def new_token() -> str:
    return secrets.token_urlsafe(8)


@dataclass(frozen=True)
class CacheUri:
    conversation: str
    """The cosmetic conversation segment, as written in the URI."""
    token: str
    pointer: str | None = None
    """An RFC 6901 JSON pointer into the stored payload ("" is the whole payload), or None."""

    def __str__(self) -> str:
        base = f"{PREFIX}{self.conversation}/{self.token}"
        if self.pointer is None:
            return base
        return f"{base}#{quote(self.pointer, safe='/~!$&()*+,;=:@')}"

    def at(self, pointer: str) -> CacheUri:
        """The same entry, addressing `pointer` inside it."""
        parse_pointer(pointer)
        return CacheUri(self.conversation, self.token, pointer)

    @property
    def whole(self) -> CacheUri:
        return CacheUri(self.conversation, self.token)


def mint(conversation_id: str) -> CacheUri:
    return CacheUri(conversation_segment(conversation_id), new_token())


def is_cache_uri(value: object) -> bool:
    """True for any string in our scheme, well-formed or not (a malformed one is still ours to refuse).

    That is any string starting with `mcp+cache:`, in any case (a URI scheme is case-insensitive), also
    after leading whitespace: `mcp+cache:conv/tok` or ` mcp+cache://conv/tok` is not another scheme but a
    reference written wrong, and passing it on would hand the tool a string where the model meant data.
    """
    if not isinstance(value, str):
        return False
    head = value[: len(OURS)] if not value[:1].isspace() else value.lstrip()[: len(OURS)]
    return head.lower() == OURS


def parse(value: object) -> CacheUri:
    """The reference `value` names, or UriError saying what is wrong with it."""
    if not isinstance(value, str):
        raise UriError(f"a reference is a string, not {type(value).__name__}")
    if len(value) > MAX_URI_LENGTH:
        raise UriError(f"a reference is at most {MAX_URI_LENGTH} characters, this one has {len(value)}")
    if not is_cache_uri(value):
        raise UriError(f"not an {PREFIX} reference")
    if value[:1].isspace():
        raise UriError("a reference has no whitespace before it")
    if value[: len(PREFIX)].lower() != PREFIX:
        raise UriError(f"a reference starts with {PREFIX} (with both slashes), then <conversation>/<token>")
    rest = value[len(PREFIX) :]
    rest, hash_mark, fragment = rest.partition("#")
    conversation, slash, token = rest.partition("/")
    if not slash:
        raise UriError("a reference has the form mcp+cache://<conversation>/<token>")
    if not _CONV.fullmatch(conversation):
        raise UriError("the conversation segment must be 1-64 characters of A-Z a-z 0-9 _ -")
    if not _TOKEN.fullmatch(token):
        raise UriError(f"the token must be exactly {TOKEN_CHARS} characters of A-Z a-z 0-9 _ -")
    pointer = None
    if hash_mark:
        try:
            pointer = unquote(fragment, errors="strict") if "%" in fragment else fragment
        except UnicodeDecodeError as exc:
            raise UriError("the fragment's percent-encoding is not UTF-8") from exc
        parse_pointer(pointer)
    return CacheUri(conversation, token, pointer)


def parse_pointer(pointer: str) -> list[str]:
    """The reference tokens of an RFC 6901 pointer ("" is the whole document)."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise UriError(f"a JSON pointer starts with '/', got {pointer!r}")
    parts = pointer[1:].split("/")
    for part in parts:
        if re.search(r"~(?![01])", part):
            raise UriError(f"'~' in a JSON pointer must be followed by 0 or 1: {pointer!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in parts]


def escape_pointer_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def pointer_of(path: list[str | int]) -> str:
    return "".join("/" + escape_pointer_token(str(part)) for part in path)


class PointerError(LookupError):
    """The pointer names nothing in the stored payload."""


def resolve_pointer(document: Any, pointer: str) -> Any:
    value = document
    for part in parse_pointer(pointer):
        if isinstance(value, dict):
            if part not in value:
                raise PointerError(f"no member {part!r}")
            value = value[part]
        elif isinstance(value, list):
            if not re.fullmatch(r"0|[1-9][0-9]*", part) or int(part) >= len(value):
                raise PointerError(f"no item {part!r} in a list of {len(value)}")
            value = value[int(part)]
        else:
            raise PointerError(f"cannot step into a {type(value).__name__} with {part!r}")
    return value
