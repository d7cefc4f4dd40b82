"""Notebook JSON that keeps every number exactly as it was written, for rewriting a notebook in place.

Rewriting a notebook must change only what the edit changed. A parser that turns numbers into
floats or 64-bit integers does not: orjson reads a 30-digit integer as a float, so writing it back
gives `1.2345678901234568e+29`; and any float parser reads `1e5` and `1.50` as floats that print as
`100000.0` and `1.5`. Here integers are Python ints (exact at any size) and every float keeps the
text it was read from, which `dumps` writes back verbatim.

`dumps` writes what nbformat writes (`json.dumps(indent=1, sort_keys=True, separators=(",", ": "),
ensure_ascii=False)`) and, for values without those kept numbers, exactly the same text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["ExactFloat", "dumps", "loads"]


class ExactFloat(float):
    """A float that remembers the JSON text it was read from, and is written back as that text."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> ExactFloat:
        value = super().__new__(cls, text)
        value.text = text
        return value


class _NegativeZero(int):
    """The JSON integer `-0`: equal to 0, written back as `-0`."""

    __slots__ = ()


def _parse_int(text: str) -> int:
    # JSON integers have no '+' and no leading zeros, so `-0` is the one spelling int() would lose.
    return _NegativeZero(0) if text == "-0" else int(text)


def loads(data: bytes | str) -> Any:
    """Parse JSON keeping every number's exact value and spelling (ValueError if it is not JSON)."""
    return json.loads(data, parse_float=ExactFloat, parse_int=_parse_int)


_encode_string = json.JSONEncoder(ensure_ascii=False).encode


def _number(value: int | float) -> str:
    if isinstance(value, ExactFloat):
        return value.text
    if isinstance(value, _NegativeZero):
        return "-0"
    if isinstance(value, int):
        return int.__repr__(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _write(value: Any, level: int, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_encode_string(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int | float):
        out.append(_number(value))
    elif isinstance(value, Mapping):
        if not value:
            out.append("{}")
            return
        inner = "\n" + " " * (level + 1)
        out.append("{")
        for n, key in enumerate(sorted(value)):
            if not isinstance(key, str):
                raise TypeError(f"notebook JSON keys are strings, not {type(key).__name__}")
            out.append(inner if n == 0 else "," + inner)
            out.append(_encode_string(key))
            out.append(": ")
            _write(value[key], level + 1, out)
        out.append("\n" + " " * level + "}")
    elif isinstance(value, list | tuple):
        if not value:
            out.append("[]")
            return
        inner = "\n" + " " * (level + 1)
        out.append("[")
        for n, item in enumerate(value):
            out.append(inner if n == 0 else "," + inner)
            _write(item, level + 1, out)
        out.append("\n" + " " * level + "]")
    else:
        raise TypeError(f"{type(value).__name__} is not JSON")


def dumps(value: Any) -> str:
    """The value as nbformat writes JSON, with numbers from `loads` spelled as they were read."""
    out: list[str] = []
    _write(value, 0, out)
    return "".join(out)
