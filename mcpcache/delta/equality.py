"""Equality as JSON sees it (1, 1.0 and true differ; so do 0.0 and -0.0), which both sides of a delta use."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import orjson


def _strictly_equal(a: Any, b: Any) -> bool:
    """Whether `a` and `b`, already equal by Python's `==`, are also equal as JSON: `==` holds 1, 1.0
    and True equal, and 0.0 and -0.0, which serialize differently. Only non-string scalars need a look,
    so strings (most of an answer's bytes) are skipped without a comparison."""
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is dict or kind is list:
        return _same_types(a, b)
    return kind is not float or a != 0.0 or _copysign(1.0, a) == _copysign(1.0, b)


def _same_types(x: Any, y: Any) -> bool:
    # Recursive rather than with a stack of pairs: measured a third faster on notebook cells, and an
    # answer nests no deeper than its serializer allows (orjson: 255), far inside Python's limit.
    if type(x) is dict:
        for key, v in x.items():
            held = type(v)
            if held is str:
                continue
            w = y[key]
            if held is not type(w):
                return False
            if held is dict or held is list:
                if v and not _same_types(v, w):
                    return False
            elif held is float and v == 0.0 and _copysign(1.0, v) != _copysign(1.0, w):
                return False
        return True
    for v, w in zip(x, y, strict=True):
        held = type(v)
        if held is str:
            continue
        if held is not type(w):
            return False
        if held is dict or held is list:
            if v and not _same_types(v, w):
                return False
        elif held is float and v == 0.0 and _copysign(1.0, v) != _copysign(1.0, w):
            return False
    return True


_copysign = math.copysign


def same(a: Any, b: Any) -> bool:
    """JSON equality, strict about types: `==` does the bulk in C, `_strictly_equal` the types."""
    return a is b or (a == b and _strictly_equal(a, b))


def same_serialized(a: Any, b: Any) -> bool:
    """`same` by the compact JSON bytes first: equal bytes are equal JSON, types and all; unequal bytes
    may still be equal JSON (members in another order, or no JSON form), which `same` then decides."""
    if a is b:
        return True
    try:
        if orjson.dumps(a) == orjson.dumps(b):
            return True
    except orjson.JSONEncodeError:
        pass
    return same(a, b)


def agreeing(old: list[Any], new: list[Any], old_at: int, new_at: int, limit: int, direction: int) -> int:
    """How many elements from `old_at`, `new_at` (forward, or backward from those ends) serialize to the
    same bytes, up to `limit`: runs of elements serialized in one call each, doubling (to 256) while they
    agree and halving where they do not, so a table of thousands of rows costs a few C passes, not a Python
    step per row. Elements after the run may still be equal (members in another order): the caller
    goes on one by one."""
    done, step, growing = 0, 16, True
    try:
        while done < limit:
            size = min(step, limit - done)
            if direction > 0:
                here, there = old[old_at + done : old_at + done + size], new[new_at + done : new_at + done + size]
            else:
                here, there = old[old_at - done - size : old_at - done], new[new_at - done - size : new_at - done]
            if orjson.dumps(here) == orjson.dumps(there):
                done += size
                if growing and step < 256:
                    step *= 2  # capped: the run that fails is compared again, halved, so keep it short
            elif size == 1:
                break
            else:
                step, growing = size // 2, False  # from here a binary search: the difference is within `size`
    except orjson.JSONEncodeError:
        pass
    return done


_SMALL_VALUES: Final = 128
"""Below this many bytes of JSON per value, elements are made of many small values (a table's rows), and
comparing serialized bytes (orjson, about a nanosecond a byte for both sides) beats `==` plus the type
walk (a tenth of that a byte, but over a hundred nanoseconds a value); above it (long strings: notebook
cells), `==` and the walk win."""


def equality_for(items: list[Any]) -> Callable[[Any, Any], bool]:
    """The cheaper exact equality for an array's elements, judged on its first, middle and last."""
    if len(items) < 16:  # also the quick way out for the many short arrays of an answer
        return same
    samples = (items[0], items[len(items) // 2], items[-1])
    if any(type(sample) is not dict and type(sample) is not list for sample in samples):
        return same
    values = 0
    stack = list(samples)
    while stack and values < 4096:
        item = stack.pop()
        values += 1
        if type(item) is dict:
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    try:
        size = sum(len(orjson.dumps(sample)) for sample in samples)
    except orjson.JSONEncodeError:
        return same
    return same_serialized if size < _SMALL_VALUES * values else same


def json_equal(a: Any, b: Any) -> bool:
    """RFC 6902 4.6 equality for `test`: numbers by value (1 equals 1.0), a boolean only a boolean."""
    if a != b:
        return False
    kind, other = type(a), type(b)
    if kind is bool or other is bool:
        return kind is other
    if kind is dict:
        return all(json_equal(value, b[key]) for key, value in a.items())
    if kind is list:
        return all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return True


def kind_of(value: object) -> str:
    """The JSON name of a value's type, for messages."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return f"a {type(value).__name__} (not JSON)"
