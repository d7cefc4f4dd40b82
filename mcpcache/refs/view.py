"""What a model is shown of a tool result, and how a view too large for it is shortened.

The payload is the value a model reads: the structured content when there is some, else the JSON a
single text block holds, else the text, else the content blocks themselves. A shortened view never
cuts a value into a plausible prefix (a model would forward it as if it were whole): a large member is
replaced by a marker that names what it was, how big it is, and the exact reference that stands for it.
"""

from __future__ import annotations

import decimal
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from pydantic import BaseModel

from mcpcache.refs.uri import CacheUri, pointer_of
from mcpcache.tokens import TokenCount, count_tokens

URI_FIELD = "_cache_uri"
ViewKind = Literal["full", "unchanged", "changed"]
RESULT_FIELD = "result"
UNCHANGED_FIELD = "_unchanged"
CHANGED_FIELD = "_changed"
CHANGES_FIELD = "_changes"
MISSING_URIS_FIELD = "_missing_uris"
OVERRIDDEN_FIELD = "_overridden"
NOTE_FIELDS = (
    URI_FIELD,
    RESULT_FIELD,
    UNCHANGED_FIELD,
    CHANGED_FIELD,
    CHANGES_FIELD,
    MISSING_URIS_FIELD,
    OVERRIDDEN_FIELD,
)
"""Every member name mcpcache's own words to the model use: the full view's (`result`, `_cache_uri`), the
re-read notes' (`_unchanged`, `_changed` + `_changes`), the unresolved reference's (`_missing_uris`) and the
overridden argument's (`_overridden`). An answer with any of them is shown under `result` (`shown_whole`),
so that no server's answer ever has the shape of a note."""


@dataclass(frozen=True)
class Payload:
    value: Any
    is_error: bool


def _plain(value: Any) -> Any:
    """`value` as JSON-able Python, for what orjson refuses: integers past 64 bits keep every digit,
    anything that is not JSON becomes its string form. NaN and infinities become null, as orjson writes them."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)


class Unencodable(ValueError):
    """A value no JSON can be written for here: an integer past Python's 4,300-digit conversion limit,
    nesting deeper than the encoders' recursion limits, a cycle, an object whose string form raises."""


def encode_json(value: Any) -> tuple[bytes, bool]:
    """The compact UTF-8 JSON of `value`, and True when only the standard library could write it.

    A tool result is not refused for holding a number orjson cannot write (the flag matters on the way
    back, because orjson would read such a number as a float and lose digits). What neither encoder can
    write raises Unencodable, and only that.
    """
    try:
        # OPT_NON_STR_KEYS: a host's own result dict may have int keys; the model sees them as strings anyway.
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY), False
    except Exception:  # orjson.JSONEncodeError, or whatever a hostile object's own methods raise
        pass
    try:
        # ensure_ascii: a lone surrogate is written as an escape instead of failing the UTF-8 encoding.
        return json.dumps(_plain(value), separators=(",", ":"), ensure_ascii=True).encode(), True
    except Exception as exc:  # RecursionError, ValueError (digits, cycles), a __str__ that raises...
        raise Unencodable(f"{type(exc).__name__}: {str(exc)[:200]}") from exc


def json_bytes(value: Any) -> bytes:
    return encode_json(value)[0]


def decode_json(body: bytes, exact: bool = False) -> Any:
    """What `encode_json` wrote; `exact` when it needed the standard library (see there)."""
    return json.loads(body) if exact else orjson.loads(body)


def _text_blocks(content: list[Any]) -> list[str] | None:
    texts: list[str] = []
    for block in content:
        kind = block.get("type") if isinstance(block, Mapping) else getattr(block, "type", None)
        text = block.get("text") if isinstance(block, Mapping) else getattr(block, "text", None)
        if kind != "text" or not isinstance(text, str):
            return None
        texts.append(text)
    return texts


def payload_of(result: Any) -> Payload:
    """The value a model reads from `result` (an MCP or FastMCP CallToolResult, or a plain JSON value)."""
    if isinstance(result, (str, int, float, bool, list, dict)) or result is None:
        return Payload(result, False)
    content = getattr(result, "content", None)
    if content is None and getattr(result, "structured_content", None) is None:
        # Not a tool result but a host's own value (a tuple, a model, a dataclass): the model reads its
        # JSON form. Treating it as a result with no content would show the model an empty string.
        body, exact = encode_json(result)
        return Payload(decode_json(body, exact), False)
    is_error = bool(getattr(result, "is_error", False))
    structured = getattr(result, "structured_content", None)
    if structured is not None and not is_error:
        return Payload(structured, False)
    blocks = list(content or [])
    texts = _text_blocks(blocks)
    if texts is not None:
        if len(texts) == 1 and not is_error:
            try:
                return Payload(orjson.loads(texts[0]), False)
            except orjson.JSONDecodeError:
                pass
        return Payload("\n".join(texts), is_error)
    dumped = [
        b.model_dump(by_alias=True, mode="json", exclude_none=True) if isinstance(b, BaseModel) else b for b in blocks
    ]
    return Payload(dumped, is_error)


def shown_whole(payload: Any) -> bool:
    """Whether a view shows the payload under `result`: anything but an object, and an object with a member
    named as one of mcpcache's (`NOTE_FIELDS`), which would otherwise pass for a note or for the view's own."""
    return not isinstance(payload, dict) or any(name in payload for name in NOTE_FIELDS)


def envelope_of(payload: Any, uri: CacheUri | None) -> dict[str, Any]:
    """The object a model is handed: the payload's members plus `_cache_uri`, or the payload under `result`."""
    envelope = {RESULT_FIELD: payload} if shown_whole(payload) else dict(payload)
    if uri is not None:
        envelope[URI_FIELD] = str(uri)
    return envelope


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return f"object with {len(value)} members"
    if isinstance(value, list):
        return f"list of {len(value)} items"
    if isinstance(value, str):
        return f"text of {len(value):,} characters"
    return type(value).__name__


def marker(value: Any, uri: CacheUri, name: str, size: int | None = None) -> str:
    """A string that cannot be mistaken for the value it stands for, and says how to get the value."""
    body = json_bytes(value)
    tokens = count_tokens(body.decode())
    approx = "" if tokens.method == "o200k" else "~"
    quoted = json.dumps(name, ensure_ascii=False)  # unambiguous whatever characters the member's name has
    return (
        f"<elided {_describe(value)} ({quoted}): {len(body) if size is None else size:,} bytes, "
        f"{approx}{tokens.count:,} tokens. It is stored, not lost: to pass it to a tool argument X, give "
        f'"{uri}" as X_uri instead of X>'
    )


@dataclass(frozen=True)
class ModelView:
    """What to show the model for one tool result."""

    envelope: dict[str, Any]
    uri: CacheUri | None
    """The reference to the whole payload, when it was stored."""
    size_bytes: int
    """UTF-8 bytes of the payload's JSON (what the model would read in full)."""
    tokens: TokenCount
    shortened: list[str]
    """JSON pointers of the members replaced by markers."""
    kind: ViewKind = "full"
    """full: the answer (perhaps shortened); unchanged: a note that it is the answer the model read before;
    changed: what changed since the answer the model read before (`mcpcache.refs.changes`)."""
    since: CacheUri | None = None
    """unchanged and changed views: the earlier result they build on (for unchanged, also `uri`)."""

    def text(self) -> str:
        """The envelope as JSON text. Never raises: what no encoder can write (see `Unencodable`) is
        written by `lenient_json`, whole."""
        try:
            return json_bytes(self.envelope).decode()
        except Unencodable:
            return lenient_json(self.envelope)


_TEXT, _VALUE, _LEAVE = 0, 1, 2


def _string_of(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__} that cannot be shown>"


def _int_text(value: int) -> str:
    try:
        return str(int(value))
    except ValueError:  # past the 4,300-digit limit of int -> str; Decimal has no such limit
        return str(decimal.Decimal(int(value)))


def lenient_json(value: Any) -> str:
    """JSON text for any value, whole, without recursion and without raising.

    For what the encoders refuse: integers of any length keep every digit, any depth is written, NaN and
    infinities are null, keys and values JSON has no form for are written as their string form, and a
    container inside itself is written as the string "<cycle>".
    """
    out: list[str] = []
    stack: list[tuple[int, Any]] = [(_VALUE, value)]
    open_ids: set[int] = set()
    while stack:
        kind, item = stack.pop()
        if kind == _TEXT:
            out.append(item)
            continue
        if kind == _LEAVE:
            open_ids.discard(item)
            continue
        if isinstance(item, BaseModel):
            try:
                item = item.model_dump(mode="json", by_alias=True)
            except Exception:
                item = _string_of(item)
        if isinstance(item, Mapping | list | tuple | set | frozenset):
            if id(item) in open_ids:
                out.append('"<cycle>"')
                continue
            is_map = isinstance(item, Mapping)
            try:
                entries = list(item.items()) if isinstance(item, Mapping) else [(None, v) for v in item]
            except Exception:
                out.append(json.dumps(_string_of(item)))
                continue
            open_ids.add(id(item))
            stack.append((_LEAVE, id(item)))
            stack.append((_TEXT, "}" if is_map else "]"))
            for index in range(len(entries) - 1, -1, -1):
                key, member = entries[index]
                stack.append((_VALUE, member))
                comma = "," if index else ""
                if is_map:
                    name = key if isinstance(key, str) else _string_of(key)
                    stack.append((_TEXT, comma + json.dumps(name) + ":"))
                elif comma:
                    stack.append((_TEXT, comma))
            out.append("{" if is_map else "[")
        elif item is None:
            out.append("null")
        elif isinstance(item, bool):
            out.append("true" if item else "false")
        elif isinstance(item, int):
            out.append(_int_text(item))
        elif isinstance(item, float):
            out.append(repr(float(item)) if math.isfinite(item) else "null")
        elif isinstance(item, str):
            out.append(json.dumps(item))
        else:
            out.append(json.dumps(_string_of(item)))
    return "".join(out)


def shorten(payload: Any, envelope: dict[str, Any], uri: CacheUri, budget: int) -> tuple[dict[str, Any], list[str]]:
    """Replace the largest members by markers until the envelope's JSON fits in `budget` bytes.

    Only the payload's own members are candidates, largest first, so what is left is whole; when even
    that does not fit, the whole payload becomes one marker (naming the reference without a fragment).
    """
    size = len(json_bytes(envelope))
    if size <= budget:
        return envelope, []
    shortened: Any
    if isinstance(payload, dict):
        shortened, members = dict(payload), list(payload.items())
    elif isinstance(payload, list):
        shortened, members = list(payload), list(enumerate(payload))
    else:
        shortened, members = payload, []
    sized = sorted(
        ((len(json_bytes(v)), k, v) for k, v in members if isinstance(v, dict | list | str)),
        key=lambda skv: skv[0],
        reverse=True,
    )
    done: list[str] = []
    for value_size, key, value in sized:
        if size <= budget:
            break
        pointer = pointer_of([key])
        text = marker(value, uri.at(pointer), str(key), value_size)
        marker_size = len(json_bytes(text))
        if marker_size >= value_size:
            continue  # a marker bigger than its value would make the view longer, not shorter
        shortened[key] = text
        done.append(pointer)
        # Compact JSON of a container is its members' JSON plus fixed punctuation, so the envelope's size
        # moves by exactly the difference; the result is still measured once below, not trusted.
        size += marker_size - value_size
    if done:
        candidate = envelope_of(shortened, uri)
        if len(json_bytes(candidate)) <= budget:
            return candidate, done
    return {RESULT_FIELD: marker(payload, uri.whole, RESULT_FIELD), URI_FIELD: str(uri)}, [""]
