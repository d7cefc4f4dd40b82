"""A second implementation of the canonical forms, the tag and the digest, written from the text of
docs/extension.md ("Canonical forms", "The digest") alone: plain Python, no orjson, nothing from
mcpcache. xxhash supplies the xxh3-128 function itself and hashlib SHA-256; the bytes fed to them are
built here. tests/test_canonical.py checks it and mcpcache's own against docs/vectors/canonical.json.
"""

from __future__ import annotations

import hashlib
from decimal import ROUND_FLOOR, Decimal
from typing import Any

import xxhash

CACHE_KEY = "io.modelcontextprotocol/cache"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


class NoCanonicalForm(ValueError):
    pass


def string(text: str) -> str:
    out = ['"']
    for char in text:
        code = ord(char)
        if 0xD800 <= code <= 0xDFFF:
            raise NoCanonicalForm("unpaired surrogate")
        out.append(SHORT_ESCAPES.get(char) or (f"\\u{code:04x}" if code < 0x20 else char))
    return "".join(out) + '"'


def digits(number: float) -> tuple[str, int]:
    """The fewest significant digits d1..dk that read back as `number` (> 0), the closest to it of
    those (the even one when two are equally close), and e with number = d1.d2..dk x 10^e. At each k
    the two candidates are the k-digit decimals just below and just above the exact value (just below
    a power of two only the upper one may read back, so rounding to nearest alone is not enough)."""
    exact = Decimal(number)
    for k in range(1, 18):
        e = exact.adjusted()
        unit = Decimal(1).scaleb(e - k + 1)
        below = (exact / unit).to_integral_value(ROUND_FLOOR)
        readable = [c for c in (below, below + 1) if float(c * unit) == number]
        if readable:
            best = min(readable, key=lambda c: (abs(c * unit - exact), c % 2))
            text = str(best)
            if len(text) > k:  # rounded up to a power of ten: one more place
                text, e = text[:k], e + 1
            return text.rstrip("0") or "0", e
    raise AssertionError("17 digits always read back")


def tag_float(number: float) -> str:
    if number != number or number in (float("inf"), float("-inf")):
        raise NoCanonicalForm("not finite")
    if number == 0:
        return "-0.0" if str(number).startswith("-") else "0.0"
    sign = "-" if number < 0 else ""
    ds, e = digits(abs(number))
    if -5 <= e <= 15:
        if e < 0:
            return f"{sign}0.{'0' * (-e - 1)}{ds}"
        whole, fraction = ds[: e + 1].ljust(e + 1, "0"), ds[e + 1 :]
        return f"{sign}{whole}.{fraction or '0'}"
    return f"{sign}{ds[0]}{'.' + ds[1:] if len(ds) > 1 else ''}e{'+' if e > 0 else '-'}{abs(e)}"


def digest_float(number: float) -> str:
    """ECMAScript Number::toString, as RFC 8785 prescribes (n = e + 1 in its terms)."""
    if number != number or number in (float("inf"), float("-inf")):
        raise NoCanonicalForm("not finite")
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    ds, e = digits(abs(number))
    k, n = len(ds), e + 1
    if k <= n <= 21:
        return sign + ds + "0" * (n - k)
    if 0 < n <= 21:
        return sign + ds[:n] + "." + ds[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + ds
    return f"{sign}{ds[0]}{'.' + ds[1:] if k > 1 else ''}e{'+' if e > 0 else '-'}{abs(e)}"


MAX_DEPTH = 100


def write(value: Any, form: str, room: int = MAX_DEPTH) -> str:
    """`room`: how many more levels of arrays and objects the value may hold."""
    if type(value) in (list, dict) and room < 1:
        raise NoCanonicalForm("nested too deeply")
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if type(value) is int:
        low, high = (-(2**63), 2**64 - 1) if form == "tag" else (-(2**53 - 1), 2**53 - 1)
        if not low <= value <= high:
            raise NoCanonicalForm("integer out of range")
        return str(value)
    if type(value) is float:
        return tag_float(value) if form == "tag" else digest_float(value)
    if type(value) is str:
        return string(value)
    if type(value) is list:
        return "[" + ",".join(write(item, form, room - 1) for item in value) + "]"
    if type(value) is dict:
        order = sorted(value) if form == "tag" else sorted(value, key=lambda name: name.encode("utf-16-be"))
        return "{" + ",".join(f"{string(name)}:{write(value[name], form, room - 1)}" for name in order) + "}"
    raise NoCanonicalForm(f"{type(value).__name__} is not JSON")


def canonical(value: Any, form: str) -> bytes:
    """`form`: "tag" or "digest"."""
    return write(value, form).encode("utf-8")


def answer_document(result: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (result.get("_meta") or {}).items() if k not in (CACHE_KEY, SERVER_INFO_KEY)}
    return {
        "content": result.get("content", []),
        "meta": meta or None,
        "structuredContent": result.get("structuredContent"),
    }


def tag(result: dict[str, Any]) -> str:
    document = answer_document(result)
    return 'W/"' + xxhash.xxh3_128_hexdigest(canonical(document, "tag")) + '"'


def digest(result: dict[str, Any]) -> str:
    document = answer_document(result)
    return "sha256:" + hashlib.sha256(canonical(document, "digest")).hexdigest()


def tree_digest(result: dict[str, Any]) -> str:
    """The tree digest ("tree/1"), from the text of docs/protocol.md ("The tree digest") alone."""

    def h(prefix: str, *parts: bytes) -> bytes:
        return hashlib.sha256(prefix.encode() + b"\x00" + b"".join(parts)).digest()

    def j(value: Any) -> bytes:
        return canonical(value, "digest")

    def block_hash(block: Any) -> bytes:
        if type(block) is dict and type(block.get("text")) is str:
            rest = {key: value for key, value in block.items() if key != "text"}
            chunks = (h("mcpcache-tree/1 chunk", chunk) for chunk in text_chunks(block["text"]))
            return h("mcpcache-tree/1 text", j(rest), *chunks)
        return h("mcpcache-tree/1 block", j(block))

    document = answer_document(result)
    content = h("mcpcache-tree/1 content", *(block_hash(block) for block in document["content"]))
    structured = document["structuredContent"]
    if type(structured) is dict:
        members = []
        for name in sorted(structured, key=lambda key: key.encode("utf-16-be")):
            value = structured[name]
            if type(value) is list:
                elements = (h("mcpcache-tree/1 element", j(item)) for item in value)
                members.append(h("mcpcache-tree/1 array", j(name), *elements))
            else:
                members.append(h("mcpcache-tree/1 member", j(name), j(value)))
        structured_hash = h("mcpcache-tree/1 object", *members)
    else:
        structured_hash = h("mcpcache-tree/1 value", j(structured))
    meta = h("mcpcache-tree/1 meta", j(document["meta"]))
    return "sha256-tree1:" + h("mcpcache-tree/1 root", content, structured_hash, meta).hex()


TREE_MARKS = 0x63E7DD428A71B5CA91366E74D1D09929
TREE_PATTERN = (1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1)


def text_chunks(text: str) -> list[bytes]:
    """A text's chunks for the tree digest, byte by byte as docs/protocol.md words the rule."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise NoCanonicalForm("a lone surrogate") from None
    marks = [(TREE_MARKS >> byte) & 1 if byte < 0x80 else 0 for byte in data]
    width, low, high = len(TREE_PATTERN), 4096, 65536
    chunks, start, n = [], 0, len(data)
    while start < n:
        end = None
        # The first occurrence of the pattern that ends at or after start + low and at or before
        # min(n, start + high).
        for stop in range(start + low, min(n, start + high) + 1):
            if tuple(marks[stop - width : stop]) == TREE_PATTERN:
                end = stop
                break
        if end is None:
            if n - start <= high:
                end = n
            else:
                end = start + high
                while data[end] & 0xC0 == 0x80:  # the last character boundary at or before start + high
                    end -= 1
        chunks.append(data[start:end])
        start = end
    return chunks
