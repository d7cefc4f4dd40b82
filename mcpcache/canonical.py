"""The two canonical JSON forms of docs/extension.md ("Canonical forms"): the bytes behind a tag, and the
bytes behind a delta's digest.

- `canonical_json`, the tag form: keys sorted by code point, no whitespace, strings as UTF-8, an integer
  in decimal, a float in its shortest round-trip digits (`1.0`, `0.00001`, `1e-6`, `1e+16`). The text
  of the proposal defines it on its own; orjson with sorted keys writes exactly that form for every
  JSON value, which is why the code uses it (the vectors in docs/vectors/canonical.json and an
  independent implementation in tests/support/second_canonical.py pin the two together). Tags are
  opaque to clients, so this form only has to be stable on the server, and it is the one deployed tags
  were made with.
- `jcs`, the digest form: RFC 8785 (JSON Canonicalization Scheme). A client must recompute a digest
  from the answer it holds, in whatever language it is written, and most JSON libraries cannot tell
  `1` from `1.0` after parsing; RFC 8785 writes every number as the IEEE 754 double it denotes, so
  they agree. An integer beyond 2^53 has no exact double, so it has no digest form here (the server
  then sends no delta), rather than two answers sharing a digest.

Both forms are defined on JSON values, not text: an object has one member per name (a parser that meets
a name twice keeps the last, as Python's `json`, orjson and ECMAScript's `JSON.parse` do), and a value
nested deeper than `MAX_DEPTH` levels has neither form.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any

import orjson

__all__ = ["MAX_DEPTH", "CanonicalizationError", "canonical_json", "jcs", "shortest_digits"]

MAX_EXACT_INT = 2**53 - 1
"""The largest integer every JSON implementation reads exactly (RFC 7493, I-JSON)."""

MAX_DEPTH = 100
"""The deepest a value may be nested and keep a canonical form, in either form: an array or object is one
level deeper than the value holding it, the outermost counting as 1 (a scalar is 0). For an answer it is
counted in the whole answer document (`{"content": [...], "meta": ..., "structuredContent": ...}`, itself
level 1), so a tag and a digest of one answer exist together or not at all. The JSON-RPC message carrying
such an answer is one level deeper again, within the default limits of common parsers (128 in Rust's
serde_json, 200 in pydantic-core, which the MCP Python SDK reads messages with)."""


class CanonicalizationError(ValueError):
    """The value has no canonical JSON form (NaN, infinity, a non-JSON type, a huge int, a non-str key,
    a lone surrogate)."""


# -- the tag form ------------------------------------------------------------------------------------


def _reject_non_finite(value: Any, room: int | None = None) -> None:
    """Raise CanonicalizationError for a NaN or an infinity anywhere in `value`, or (given `room`) for
    nesting deeper than `room` levels.

    orjson writes NaN and infinities as null, which would give a NaN answer the tag of a null one. The
    walk goes one level at a time, so that counting levels costs no more than visiting the values, and
    checks exact types first because answers are mostly strings, which need no look inside."""
    level = [value]
    depth = 0
    while level:
        below: list[Any] = []
        nested = False
        for item in level:
            kind = type(item)
            if kind is str or kind is int or kind is bool or item is None:
                continue
            if kind is dict:
                below.extend(item.values())
                nested = True
            elif kind is list:
                below.extend(item)
                nested = True
            elif isinstance(item, float):
                if not math.isfinite(item):
                    raise CanonicalizationError(f"non-finite number {item!r} has no JSON form")
            elif isinstance(item, dict):
                below.extend(item.values())
                nested = True
            elif isinstance(item, list | tuple):
                below.extend(item)
                nested = True
        if nested:
            depth += 1
            if room is not None and depth > room:
                raise CanonicalizationError(f"nested more than {MAX_DEPTH} levels deep")
        level = below


def _dump(value: Any, room: int = MAX_DEPTH) -> bytes:
    """The tag form of `value`, which may be nested at most `room` levels deep (less than `MAX_DEPTH` for
    a piece of an answer document, which sits inside the document's own levels)."""
    # orjson refuses what the form leaves undefined: a non-str key, an integer outside -2^63 .. 2^64-1,
    # a lone surrogate, nesting beyond its own limit (254). A Python value that is not JSON (a tuple, a
    # datetime) gets orjson's own JSON for it, which is stable; the form itself is defined on JSON values.
    try:
        out = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise CanonicalizationError(str(exc)) from exc
    _reject_non_finite(value, room)
    return out


def canonical_json(value: Any) -> bytes:
    """The tag form: UTF-8 JSON, keys sorted by code point, no whitespace, arrays in order, numbers in
    their shortest round-trip form. Raises CanonicalizationError (also for nesting beyond `MAX_DEPTH`)."""
    return _dump(value)


# -- numbers -----------------------------------------------------------------------------------------


def shortest_digits(number: float) -> tuple[str, int]:
    """(digits, point) of a finite non-zero float's magnitude: the fewest significant digits that read
    back as the same double (the nearest such, as Python's repr and RFC 8785 both choose), with the
    value equal to 0.<digits> x 10^point. 1.5 -> ("15", 1); 0.0001 -> ("1", -3); 1e+16 -> ("1", 17)."""
    mantissa, _, exponent = repr(abs(number)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    return stripped.rstrip("0"), point


def _es_number(number: float) -> str:
    """ECMAScript's Number::toString, which RFC 8785 section 3.2.2.3 prescribes."""
    if not math.isfinite(number):
        raise CanonicalizationError(f"non-finite number {number!r} has no JSON form")
    if number == 0:
        return "0"  # -0 too
    sign = "-" if number < 0 else ""
    digits, n = shortest_digits(number)
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    exponent = n - 1
    mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{mantissa}e{'+' if exponent > 0 else '-'}{abs(exponent)}"


# -- the digest form (RFC 8785) ------------------------------------------------------------------------


def _utf16_key(key: str) -> bytes:
    # RFC 8785 sorts property names by their UTF-16 code units; big-endian UTF-16 bytes compare the same.
    return key.encode("utf-16-be", "surrogatepass")


def _write_jcs(value: Any, out: Callable[[str], object], room: int = MAX_DEPTH) -> None:
    """Write `value`'s RFC 8785 form; `room`: how many more levels of nesting it may hold."""
    kind = type(value)
    if (kind is list or kind is dict) and room < 1:
        raise CanonicalizationError(f"nested more than {MAX_DEPTH} levels deep")
    if kind is str:
        out(encode_basestring(value))
    elif value is None:
        out("null")
    elif kind is bool:
        out("true" if value else "false")
    elif kind is int:
        if abs(value) > MAX_EXACT_INT:
            raise CanonicalizationError(f"integer {value} is beyond 2^53: no exact IEEE 754 double")
        out(str(value))
    elif kind is float:
        out(_es_number(value))
    elif kind is list:
        out("[")
        for index, item in enumerate(value):
            if index:
                out(",")
            _write_jcs(item, out, room - 1)
        out("]")
    elif kind is dict:
        for key in value:
            if type(key) is not str:
                raise CanonicalizationError(f"object key {key!r} is not a string")
        out("{")
        for index, key in enumerate(sorted(value, key=_utf16_key)):
            if index:
                out(",")
            out(encode_basestring(key))
            out(":")
            _write_jcs(value[key], out, room - 1)
        out("}")
    else:
        raise CanonicalizationError(f"{kind.__name__} is not a JSON type")


def _orjson_writes_jcs(value: Any) -> bool:
    """Whether orjson's sorted output is already RFC 8785 for `value`: the two escape strings and write
    integers alike, and differ only on floats, integers beyond 2^53 and the order of keys holding a
    character beyond U+FFFF (code point order there, UTF-16 order in RFC 8785). A float anywhere,
    anything but an exact JSON type, or nesting beyond `MAX_DEPTH` (which the writer refuses) sends the
    value to the writer below. One level at a time, as `_reject_non_finite` walks."""
    level = [value]
    depth = 0
    while level:
        below: list[Any] = []
        nested = False
        for item in level:
            kind = type(item)
            if kind is str or kind is bool or item is None:
                continue
            if kind is int:
                if not -MAX_EXACT_INT <= item <= MAX_EXACT_INT:
                    return False
            elif kind is list:
                below.extend(item)
                nested = True
            elif kind is dict:
                for key in item:
                    if type(key) is not str or (not key.isascii() and max(key) > "\uffff"):
                        return False
                below.extend(item.values())
                nested = True
            else:
                return False
        if nested:
            depth += 1
            if depth > MAX_DEPTH:
                return False
        level = below
    return True


def jcs(value: Any) -> bytes:
    """RFC 8785 canonical bytes of a JSON value (dict with str keys, list, str, int, float, bool, None;
    exact types only). Raises CanonicalizationError, also for an integer beyond 2^53, a lone surrogate
    (RFC 8785 requires I-JSON) and nesting beyond `MAX_DEPTH`."""
    if _orjson_writes_jcs(value):
        # Twenty-odd times faster than the writer below on a multi-megabyte answer of strings.
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError as exc:
            raise CanonicalizationError(str(exc)) from exc
    parts: list[str] = []
    try:
        _write_jcs(value, parts.append)
    except RecursionError as exc:
        raise CanonicalizationError("nested too deeply") from exc
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalizationError("a string holds a lone surrogate") from exc
