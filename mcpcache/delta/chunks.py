"""The chunks of a text block in the tree digest: content-defined, so a splice rehashes one or two of them.

A text block is most often one large string (FastMCP writes the JSON of the whole structured content into
it: 5 MB for a 5 MB notebook). Hashed as one leaf, a one-cell edit costs each side the whole string again.
Split into chunks whose boundaries depend only on the bytes around them, an edit changes the chunk it falls
in (and the boundaries resynchronise right after it), so a side holding the base's chunk hashes rehashes a
few kilobytes.

The rule (docs/protocol.md section 11, "The tree digest"), over the text's UTF-8 bytes `T` (length `n`):

- each byte has a *mark*: an ASCII byte `b` is 1 when bit `b` of `MARKS` is set, else 0; any other byte 0;
- a chunk starting at byte `p` ends at `e`: right after the first occurrence of `PATTERN` in the marks
  that ends at or after `p + MIN_BYTES` and at or before `min(n, p + MAX_BYTES)`; if there is none, at `n`
  when `n - p <= MAX_BYTES`, else at the last character boundary at or before `p + MAX_BYTES`. The first
  chunk starts at 0, each next one where the last ended; an empty text has no chunk.

`PATTERN` ends with a 1, which only an ASCII byte has, so a chunk always ends between characters. The end
of a chunk depends only on the bytes from its start to at most 3 bytes past its end (and on whether the text
ends within `MAX_BYTES` of its start), so after a splice the chunks before the 4 characters ahead of it are
kept, and the chunks after it are found again as soon as the new chain of ends lands on an old one.

Marks, not a rolling hash: `bytes.translate` and `bytes.find` run in C (the whole of a 5 MB text is
chunked in about the time RFC 8785 and SHA-256 took over it as one leaf), where a hash per byte in Python
would cost a second. The pattern mixes six 1s and six 0s, so it turns up about once in 4 KB whether a text
marks 30% or 70% of its bytes, and never in a run of one byte. A text the pattern never turns up in (one
byte repeated, or text in a script outside ASCII) is cut every `MAX_BYTES`: its digest is the same on
both sides, but a splice there rehashes the chunks up to the next pattern.
"""

from __future__ import annotations

import hashlib
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Final

from mcpcache.canonical import CanonicalizationError

__all__ = ["CHUNK_PREFIX", "MARKS", "MAX_BYTES", "MIN_BYTES", "PATTERN", "Chunks", "chunks_of", "rechunked"]

MIN_BYTES: Final = 4096
MAX_BYTES: Final = 65536
MARKS: Final = 0x63E7DD428A71B5CA91366E74D1D09929
"""Bit `b` set: ASCII byte `b` marks 1 (the first 16 bytes of SHA-256("mcpcache-tree/1 marks"), little-endian)."""
PATTERN: Final = bytes((1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1))

CHUNK_PREFIX: Final = b"mcpcache-tree/1 chunk\x00"

_WIDTH: Final = len(PATTERN)
_CONTINUATION: Final = 2
"""The mark a UTF-8 continuation byte gets here (0 for the rule): counted to turn bytes into code points."""
_TABLE: Final = bytes((MARKS >> b) & 1 if b < 0x80 else (_CONTINUATION if b < 0xC0 else 0) for b in range(256))
_CONTINUATIONS: Final = bytes((_CONTINUATION,))
_FIRST_WINDOW: Final = MIN_BYTES + 16384
"""Code points read ahead for the next end during an update, before reading up to `MAX_BYTES`."""

_sha256 = hashlib.sha256

if TYPE_CHECKING:
    Ends = array[int]
else:
    Ends = array


@dataclass(frozen=True, slots=True)
class Chunks:
    """A text's chunks: where each ends (in code points, from the text's start) and their hashes (32 bytes
    each, end to end)."""

    ends: Ends
    hashes: bytes


def _utf8(text: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError as exc:  # a lone surrogate: no JSON text holds one
        raise CanonicalizationError(f"a text is not Unicode: {exc.reason}") from None


def _end(data: bytes, marks: bytes, p: int, final: bool) -> int:
    """Where the chunk starting at byte `p` of `data` ends. `final`: `data` runs to the text's end; if not,
    it holds more than `MAX_BYTES` bytes past `p`."""
    n = len(data)
    found = marks.find(PATTERN, p + MIN_BYTES - _WIDTH, min(n, p + MAX_BYTES))
    if found >= 0:
        return found + _WIDTH
    if final and n - p <= MAX_BYTES:
        return n
    e = p + MAX_BYTES
    while data[e] & 0xC0 == 0x80:  # data[e] exists: more than MAX_BYTES bytes follow p
        e -= 1
    return e


def _hash(data: bytes | memoryview) -> bytes:
    digest = _sha256(CHUNK_PREFIX)
    digest.update(data)
    return digest.digest()


def chunks_of(text: str) -> Chunks:
    """Every chunk of `text`. Raises CanonicalizationError for a text that is not Unicode."""
    data = _utf8(text)
    marks = data.translate(_TABLE)
    view = memoryview(data)
    plain = text.isascii()
    ends = array("q")
    hashes: list[bytes] = []
    p = at = 0
    while p < len(data):
        e = _end(data, marks, p, True)
        hashes.append(_hash(view[p:e]))
        at += e - p if plain else e - p - marks.count(_CONTINUATIONS, p, e)
        ends.append(at)
        p = e
    return Chunks(ends, b"".join(hashes))


Splice = tuple[int, int, int]
"""(offset, code points removed, code points inserted), in the text as the splices before it left it."""


def rechunked(base: Chunks, splices: list[Splice], text: str) -> Chunks | None:
    """The chunks of `text`, the result of `splices` on the text whose chunks are `base`: only the chunks
    the splices touch (and those up to where the ends fall in step again) are hashed. None when the splices
    do not fit `base` or `text` (the caller computes them all)."""
    lengths = [b - a for a, b in zip([0, *base.ends][:-1], base.ends, strict=True)]
    hashes: list[bytes | None] = [base.hashes[32 * i : 32 * i + 32] for i in range(len(lengths))]
    for offset, removed, inserted in splices:
        ends = list(accumulate(lengths))
        total = ends[-1] if ends else 0
        if offset + removed > total:
            return None
        if not ends:
            lengths, hashes = [inserted], [None]
            continue
        # The chunks from the one holding the character 4 before the splice to the one holding its last.
        first = bisect_right(ends, max(offset - 4, 0))
        last = bisect_right(ends, max(offset - 4, offset + removed - 1, 0))
        first, last = min(first, len(ends) - 1), min(last, len(ends) - 1)
        span = sum(lengths[first : last + 1]) - removed + inserted
        lengths[first : last + 1] = [span]
        hashes[first : last + 1] = [None]
    if sum(lengths) != len(text):
        return None
    return _walked(lengths, hashes, text)


def _walked(lengths: list[int], hashes: list[bytes | None], text: str) -> Chunks:
    """The chunks, hashing again from each changed segment (None) until an end lands on a segment's start
    (every segment consumed on the way, kept or not, is hashed again)."""
    ends = array("q")
    out: list[bytes] = []
    at = index = 0  # `at`: where segment `index` starts, an end of the new chunks
    count = len(lengths)
    while index < count:
        held = hashes[index]
        if held is not None:
            at += lengths[index]
            ends.append(at)
            out.append(held)
            index += 1
            continue
        reached = at + lengths[index]  # where the segments consumed so far end
        index += 1
        while at < reached:
            length, digest = _next_chunk(text, at)
            at += length
            ends.append(at)
            out.append(digest)
            while index < count and reached < at:
                reached += lengths[index]
                index += 1
            # Equal: in step, what follows is chunked from here as before (or is changed, and is walked).
    return Chunks(ends, b"".join(out))


def _next_chunk(text: str, at: int) -> tuple[int, bytes]:
    """The length (code points) and hash of the chunk of `text` starting at code point `at`."""
    for reach in (_FIRST_WINDOW, MAX_BYTES + 1):
        window = text[at : at + reach]
        final = at + len(window) >= len(text)
        data = _utf8(window)
        marks = data.translate(_TABLE)
        if not final and len(data) <= MAX_BYTES:
            # Too short to decide a cut at MAX_BYTES: only a pattern found here is certain.
            found = marks.find(PATTERN, MIN_BYTES - _WIDTH, len(data))
            if found < 0:
                continue
            e = found + _WIDTH
        else:
            e = _end(data, marks, 0, final)
        length = e if window.isascii() else e - marks.count(_CONTINUATIONS, 0, e)
        return length, _hash(memoryview(data)[:e])
    raise AssertionError("a window of MAX_BYTES + 1 code points holds more than MAX_BYTES bytes")
