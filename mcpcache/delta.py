"""Delta replies: a changed answer sent as the change, not as the whole answer again.

When an answer a client already holds changes a little (one cell of a multi-megabyte notebook edited), a
not-modified reply cannot help and the full answer costs as much as the first time. A delta reply carries
ops that turn the answer the client holds (named by its tag) into the new one. This module is the pure
engine under it: what an answer's *document* is, `diff` to compute ops, `apply` to replay them. It does
no I/O and knows no client, server or gateway; they wrap it.

The format, "json-patch+splice/1" (`FORMAT`), for implementers in any language:

The document of an answer is the JSON object
`{"content": [<content blocks as sent>], "structuredContent": <value>, "_meta": <object>}`, where
`structuredContent` is left out when the answer has none, and `_meta` is the answer's `_meta` without the
cache block (under `io.modelcontextprotocol/cache` unless configured otherwise), left out when that leaves
nothing. `isError` is not part of it: an error is never a base or a target.

Ops are a JSON array, applied in order to a private copy of the base document; any op failing fails all.

- `add`, `remove`, `replace`, `move`, `copy`, `test`: exactly as RFC 6902, with `path` and `from` JSON
  Pointers (RFC 6901) into the document: `/content/0/text`, `/structuredContent/cells/3/source`,
  `/content/2` for a whole block. `test` compares as RFC 6902 4.6 says (numbers by value, so 1 equals
  1.0, but never a number and a boolean). Unknown members of an op are ignored (RFC 6902 section 4).
- `{"op": "splice", "path": P, "offset": i, "remove": n, "insert": s}`: the string at P becomes
  `old[:i] + s + old[i + n:]`. `i` and `n` are integers >= 0, `s` a string, and `i + n` must not exceed
  the string's length. Offsets and lengths count Unicode code points (scalar values), not UTF-8 bytes and
  not UTF-16 code units: a JSON string is a sequence of code points once its escapes are read, so a code
  point count does not depend on how the text was encoded or escaped on the wire, every language can
  count it (Python's `str`; JavaScript must iterate with `codePointAt` or `Array.from`, whose `length`
  counts UTF-16 units; Go `[]rune`; Rust `chars()`), and no offset can cut a character in two, as a
  UTF-16 offset can split a surrogate pair. Consecutive splices are applied one after another: each
  offset is into the string as the previous splice left it.
- The result must be a JSON object (a document), else the delta fails.

Bounds a receiver enforces, so a few bytes of ops cannot cost it out of proportion (each failure is a
`DeltaError`): at most `MAX_OPS` ops; at most `MAX_INSERTED_BYTES` bytes put in by the ops (the compact
JSON of every `add` and `replace` value, every value `copy` duplicates, every `insert` string); at most
`MAX_REWRITTEN` units of rewriting (array elements shifted by an `add`, `remove` or `move` inside an array:
the array's length each time; code points of a string rebuilt by a run of splices).

What `diff` emits is a subset: `add`, `remove`, `replace`, `move` (an array element moved to the other end
of a changed run) and `splice`, with the splices on one string in increasing order, so a receiver can
rebuild the string once per run. Equality is JSON's, not Python's: `1`, `1.0` and `true` differ, and so do
`0.0` and `-0.0`, because their canonical bytes (and so the digest a client checks) differ.

Sharing: `document_of` hands back the answer's own structured content and `_meta` values, `diff`'s ops
hold values of the new document, and `apply` copies only the containers the ops change (the root and the
path down to each change): everything else in its result is the base document's own objects. Neither
function changes what it is given; a caller that will mutate a result, or the base after it, copies first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import orjson
from mcp_types import CallToolResult
from pydantic import BaseModel, ValidationError

from mcpcache.etag import CanonicalizationError, exact_json, meta_without_block, wire_content
from mcpcache.protocol import META_KEY

__all__ = [
    "FORMAT",
    "MAX_INSERTED_BYTES",
    "MAX_OPS",
    "MAX_REWRITTEN",
    "DeltaError",
    "answer_document",
    "apply",
    "diff",
    "document_of",
    "result_of",
]

FORMAT: Final = "json-patch+splice/1"
"""The name and version of the delta format this module reads and writes."""

MAX_OPS: Final = 100_000
"""The most ops one delta may hold. A one-cell edit is two ops; renumbering 300 cells, about 600."""

MAX_INSERTED_BYTES: Final = 64 * 1024 * 1024
"""The most bytes of JSON one delta may put into a document (values added, replaced or copied, strings
inserted). `copy` can double a document with a few bytes of op; this caps what that can grow to."""

MAX_REWRITTEN: Final = 256 * 1024 * 1024
"""The most units of rewriting one delta may cause: each `add`, `remove` or `move` inside an array counts the
array's length (the elements Python, or any array, shifts), each run of splices the length of the string it
rebuilds. Without it, a hundred thousand small ops on a large array or string would cost minutes."""

_DOCUMENT_KEYS: Final = frozenset({"content", "structuredContent", "_meta"})
_OPS: Final = frozenset({"add", "remove", "replace", "move", "copy", "test", "splice"})
_INDEX_RE: Final = re.compile(r"0|[1-9][0-9]{0,17}")
_ESCAPE_RE: Final = re.compile(r"~(?![01])")
_SHOWN: Final = 120
"""Pointers in messages are cut to this many characters: a message is read by a person, not a parser."""


class DeltaError(ValueError):
    """Ops that do not apply (malformed, a bad pointer, a failed test, out of range, too large), or a
    document that is not an answer. The client's answer to any of them is the same: ask again in full."""


# Documents -------------------------------------------------------------------------------------------


def document_of(result: CallToolResult, meta_key: str = META_KEY) -> dict[str, Any]:
    """The document of an answer: what a delta's ops point into (see the module docstring)."""
    return answer_document(result.content, result.structured_content, result.meta, meta_key)


def answer_document(
    content: Iterable[BaseModel | Mapping[str, Any]],
    structured_content: Any,
    meta: Mapping[str, Any] | None,
    meta_key: str = META_KEY,
) -> dict[str, Any]:
    """`document_of` from an answer's three fields, for a caller that holds them apart (a server adapter's
    own result type) and would otherwise build a `CallToolResult` only to take it apart again."""
    document: dict[str, Any] = {"content": wire_content(content)}
    if structured_content is not None:
        document["structuredContent"] = structured_content
    rest = meta_without_block(meta, meta_key)
    if rest is not None:
        document["_meta"] = rest
    return document


def result_of(document: Mapping[str, Any]) -> CallToolResult:
    """The answer a document describes (no cache block, `isError` false). Raises DeltaError when the
    document is not one: a key other than the three, no content array, or content the SDK rejects."""
    if not isinstance(document, Mapping):
        raise DeltaError(f"a document is a JSON object, not {_kind(document)}")
    unknown = document.keys() - _DOCUMENT_KEYS
    if unknown:
        raise DeltaError(f"a document has only content, structuredContent and _meta, not {sorted(unknown)}")
    if not isinstance(document.get("content"), list):
        raise DeltaError("a document's content must be an array of content blocks")
    try:
        return CallToolResult.model_validate(dict(document))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "/".join(str(part) for part in first["loc"])
        raise DeltaError(f"the document is not an answer: {where}: {first['msg']}") from None


# Equality, as JSON sees it ----------------------------------------------------------------------------


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


def _same(a: Any, b: Any) -> bool:
    """JSON equality, strict about types: `==` does the bulk in C, `_strictly_equal` the types."""
    return a is b or (a == b and _strictly_equal(a, b))


def _same_serialized(a: Any, b: Any) -> bool:
    """`_same` by the compact JSON bytes first: equal bytes are equal JSON, types and all; unequal bytes
    may still be equal JSON (members in another order, or no JSON form), which `_same` then decides."""
    if a is b:
        return True
    try:
        if orjson.dumps(a) == orjson.dumps(b):
            return True
    except orjson.JSONEncodeError:
        pass
    return _same(a, b)


def _agreeing(old: list[Any], new: list[Any], old_at: int, new_at: int, limit: int, direction: int) -> int:
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


def _equality_for(items: list[Any]) -> Callable[[Any, Any], bool]:
    """The cheaper exact equality for an array's elements, judged on its first, middle and last."""
    if len(items) < 16:  # also the quick way out for the many short arrays of an answer
        return _same
    samples = (items[0], items[len(items) // 2], items[-1])
    if any(type(sample) is not dict and type(sample) is not list for sample in samples):
        return _same
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
        return _same
    return _same_serialized if size < _SMALL_VALUES * values else _same


def _json_equal(a: Any, b: Any) -> bool:
    """RFC 6902 4.6 equality for `test`: numbers by value (1 equals 1.0), a boolean only a boolean."""
    if a != b:
        return False
    kind, other = type(a), type(b)
    if kind is bool or other is bool:
        return kind is other
    if kind is dict:
        return all(_json_equal(value, b[key]) for key, value in a.items())
    if kind is list:
        return all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return True


def _kind(value: object) -> str:
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


# diff ------------------------------------------------------------------------------------------------


def diff(old: Any, new: Any, *, max_bytes: int) -> list[dict[str, Any]] | None:
    """Ops that turn document `old` into document `new`, or None when their compact JSON (what
    `orjson.dumps(ops)` gives) would be longer than `max_bytes`. Stops as soon as it knows.

    Cheap by construction: equal subtrees are found with `==` (in C) plus a type check on their
    non-string scalars, or, for arrays of many small values (a table's rows), by comparing serialized
    runs of elements; objects are compared key by key; arrays by their common prefix and suffix, then
    the changed run in the middle aligned to an insertion, deletion or move where that matches better
    than pairing elements in place; strings by common prefix and suffix in chunks, then the changed middle
    resynchronised on short anchors found with `str.find`, so a long string with a few scattered changes
    becomes a few splices. The cost is one pass over what is equal plus a few tens of microseconds per
    place that changed. The ops hold values of `new`, not copies. `old` and `new` are JSON: no NaN or
    infinity (which have no JSON form, and which orjson would write as null).
    """
    differ = _Differ(max_bytes)
    try:
        differ.value(old, new, "")
    except _OverBudget:
        return None
    except (orjson.JSONEncodeError, RecursionError):
        return None  # a value with no JSON form, or nested past any serializer's limit: nothing to send
    if max(differ.size, 2) > max_bytes:
        return None
    return differ.ops


class _OverBudget(Exception):
    """The ops grew past the caller's bound (or a receiver's): no delta."""


_SHORT_STRING: Final = 48
"""Below this many shared code points, a changed string is replaced: a splice's own members cost about this."""

_RESYNC_MIN: Final = 256
"""Changed runs of strings shorter than this on either side become one splice without looking for anchors."""

_ANCHOR: Final = 32
"""Code points in an anchor: long enough to be rare in a notebook's JSON, short enough to fit between
changes."""

_CONFIRM: Final = 32
"""An anchor found is taken only if the strings agree for this much more after it (or to the run's end)."""

_LEVELS: Final = ((8, 256), (64, 4096), (512, 65_536), (4096, 1 << 20), (32_768, 1 << 24))
"""(gap, window) pairs tried in turn to resynchronise after a difference: the anchor starts `gap` code
points past the difference, and is looked for within `window` of it, so a change longer than `gap` or
a shift longer than `window` is caught at a later level."""

_MAX_ALIGN: Final = 4096
"""Changed runs of arrays longer than this are paired in place, without searching for a better alignment."""

_WHOLE_MIN: Final = 8
"""A container is replaced whole, when that is smaller, only after more than this many of its own members
were replaced, added or removed (and more than half of them): a cheap sign that it might be."""


class _Differ:
    __slots__ = ("max_bytes", "ops", "rewritten", "size")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.ops: list[dict[str, Any]] = []
        self.size = 1  # "[", then each op and the "," or "]" after it
        self.rewritten = 0

    def emit(self, op: dict[str, Any]) -> None:
        self.size += len(orjson.dumps(op)) + 1
        if self.size > self.max_bytes or len(self.ops) >= MAX_OPS:
            raise _OverBudget
        self.ops.append(op)

    def rewrite(self, units: int) -> None:
        self.rewritten += units
        if self.rewritten > MAX_REWRITTEN:
            raise _OverBudget

    def mark(self) -> tuple[int, int, int]:
        return len(self.ops), self.size, self.rewritten

    def replace_if_smaller(self, since: tuple[int, int, int], new: Any, path: str) -> None:
        """Swap the ops emitted since `since` for one replace of the whole value, when that is smaller."""
        count, size, rewritten = since
        op = {"op": "replace", "path": path, "value": new}
        if len(orjson.dumps(op)) + 1 < self.size - size:
            del self.ops[count:]
            self.size, self.rewritten = size, rewritten
            self.emit(op)

    def value(self, old: Any, new: Any, path: str) -> bool:
        """Ops for one value; True when they replace it whole.

        Containers are not compared with `==` before their members are: on the path to a change that
        would compare everything before the change twice. An object compares member by member, an array
        element by element (with `==` in C on each), so an equal container costs one pass too."""
        kind = type(old)
        if kind is type(new):
            if kind is dict:
                self.object(old, new, path)
                return False
            if kind is list:
                self.array(old, new, path)
                return False
            if kind is str:
                if old != new:
                    self.string(old, new, path)
                return False
        if _same(old, new):
            return False
        self.emit({"op": "replace", "path": path, "value": new})
        return True

    def object(self, old: dict[str, Any], new: dict[str, Any], path: str) -> None:
        since = self.mark()
        whole = 0
        for key in old:
            if key not in new:
                self.emit({"op": "remove", "path": f"{path}/{_escape(key)}"})
                whole += 1
        missing = _MISSING
        for key, value in new.items():
            held = old.get(key, missing)
            if held is missing:
                self.emit({"op": "add", "path": f"{path}/{_escape(key)}", "value": value})
                whole += 1
                continue
            # Equal strings and scalars are passed over here, before their pointer is built: most are.
            kind = type(held)
            if kind is str:
                if held == value:
                    continue
            elif kind is not dict and kind is not list and _same(held, value):
                continue
            whole += self.value(held, value, f"{path}/{_escape(key)}")
        if whole > _WHOLE_MIN and 2 * whole > len(new):
            self.replace_if_smaller(since, new, path)

    def array(self, old: list[Any], new: list[Any], path: str) -> None:
        old_len, new_len = len(old), len(new)
        shortest = min(old_len, new_len)
        same = _equality_for(old)
        start = _agreeing(old, new, 0, 0, shortest, 1) if same is _same_serialized else 0
        while start < shortest and same(old[start], new[start]):
            start += 1
        if start == old_len == new_len:
            return
        tail = _agreeing(old, new, old_len, new_len, shortest - start, -1) if same is _same_serialized else 0
        while tail < shortest - start and same(old[old_len - 1 - tail], new[new_len - 1 - tail]):
            tail += 1
        old_run, new_run = old[start : old_len - tail], new[start : new_len - tail]
        since = self.mark()
        whole = self.run(old_run, new_run, path, start, old_len)
        if whole > _WHOLE_MIN and 2 * whole > new_len:
            self.replace_if_smaller(since, new, path)

    def run(self, old: list[Any], new: list[Any], path: str, base: int, length: int) -> int:
        """Ops turning the changed run `old` (at `base` of an array of `length`) into `new`: first the
        structural ops of the best alignment (insert or delete a block, or move an element end to end),
        then each element paired with the one now in its place. Returns how many whole elements the ops
        replaced, added or removed."""
        m, n = len(old), len(new)
        whole = 0
        paired: list[Any]  # what stands at each position of the run once the structural ops are done
        if m == n:
            paired = list(old)
            move = _best_move(old, new) if 2 <= m <= _MAX_ALIGN else 0
            if move:
                source, target = (0, m - 1) if move > 0 else (m - 1, 0)
                self.rewrite(2 * length - 1)  # a receiver removes, then inserts
                self.emit({"op": "move", "from": f"{path}/{base + source}", "path": f"{path}/{base + target}"})
                paired.insert(target, paired.pop(source))
        elif n > m:
            at = _best_block(old, new) if m <= _MAX_ALIGN else m
            inserted = n - m
            for offset in range(inserted):
                self.rewrite(length + offset)
                self.emit({"op": "add", "path": f"{path}/{base + at + offset}", "value": new[at + offset]})
            paired = [*old[:at], *new[at : at + inserted], *old[at:]]
            whole += inserted
        else:
            at = _best_block(new, old) if n <= _MAX_ALIGN else n
            deleted = m - n
            for offset in range(deleted):
                self.rewrite(length - offset)
                self.emit({"op": "remove", "path": f"{path}/{base + at}"})
            paired = [*old[:at], *old[at + deleted :]]
            whole += deleted
        for index, (held, value) in enumerate(zip(paired, new, strict=True)):
            if held is not value:
                whole += self.value(held, value, f"{path}/{base + index}")
        return whole

    def string(self, old: str, new: str, path: str) -> None:
        old_len, new_len = len(old), len(new)
        shortest = min(old_len, new_len)
        head = _prefix_len(old, new, 0, 0, shortest)
        tail = _suffix_len(old, new, old_len, new_len, shortest - head)
        if head + tail < _SHORT_STRING:
            self.emit({"op": "replace", "path": path, "value": new})
            return
        since = self.mark()
        self.rewrite(new_len)
        old_end, new_end = old_len - tail, new_len - tail
        if old_end - head < _RESYNC_MIN or new_end - head < _RESYNC_MIN:
            self.splice(path, head, old_end - head, new[head:new_end])
        else:
            self.splices(old, new, path, head, old_end, new_end)
        # Scattered changes can cost more than the string; the string's length is a floor of its replace.
        if self.size - since[1] > new_len:
            self.replace_if_smaller(since, new, path)

    def splice(self, path: str, offset: int, remove: int, insert: str) -> None:
        self.emit({"op": "splice", "path": path, "offset": offset, "remove": remove, "insert": insert})

    def splices(self, old: str, new: str, path: str, start: int, old_end: int, new_end: int) -> None:
        """Splices for the changed runs `old[start:old_end]` and `new[start:new_end]`, left to right.

        Invariant: the string as the ops so far leave it is `new[:j] + old[i:]`, so a splice at `(i, j)`
        has offset `j`. At each difference an anchor after it is looked up on the other side; the region
        before the anchor is spliced and the scan goes on from the anchor. The finds are bounded by a
        budget proportional to the runs, so unrelated strings cost a few passes, then one splice.
        """
        i = j = start
        budget = 4 * (old_end - start + new_end - start) + (1 << 16)
        while True:
            same = _prefix_len(old, new, i, j, min(old_end - i, new_end - j))
            i += same
            j += same
            if i == old_end or j == new_end or budget <= 0:
                break
            found, scanned = _resync(old, new, i, old_end, j, new_end)
            budget -= scanned
            if found is None:
                break
            to_i, to_j = found
            back = _suffix_len(old, new, to_i, to_j, min(to_i - i, to_j - j))
            self.splice(path, j, to_i - back - i, new[j : to_j - back])
            i, j = to_i - back, to_j - back
        if i < old_end or j < new_end:
            self.splice(path, j, old_end - i, new[j:new_end])


def _similarity(a: Any, b: Any) -> float:
    """How alike two array elements are, from 0 to 1, cheaply: objects by the share of members that look
    alike (a notebook cell renumbered is still its cell), anything else all or nothing. Only steers the
    alignment, so it may be wrong at no cost but size: the ops are exact whatever it says."""
    if a is b:
        return 1.0
    if type(a) is dict and type(b) is dict:
        if not a or not b:
            return 1.0 if a == b else 0.0
        missing = _MISSING
        alike = 0
        for key, value in a.items():
            other = b.get(key, missing)
            if other is value or _looks_alike(value, other):
                alike += 1
        return alike / max(len(a), len(b))
    return 1.0 if _looks_alike(a, b) else 0.0


def _looks_alike(a: Any, b: Any) -> bool:
    """Equal, or so nearly that comparing further is not worth it: long strings by length and ends,
    containers by length. Constant time, whatever their size."""
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is str:
        text: str = a
        other: str = b
        if len(text) != len(other):
            return False
        return text == other if len(text) <= 64 else text[:32] == other[:32] and text[-32:] == other[-32:]
    if kind is list or kind is dict:
        return len(a) == len(b)
    return bool(a == b)


_MISSING: Final = object()


def _best_block(short: list[Any], long: list[Any]) -> int:
    """Where in `short` a block of `len(long) - len(short)` elements was inserted to give `long` (or,
    read the other way, deleted): the position that pairs the remaining elements most alike."""
    shift = len(long) - len(short)
    before = [_similarity(x, long[index]) for index, x in enumerate(short)]
    after = [_similarity(x, long[index + shift]) for index, x in enumerate(short)]
    best_at, best = len(short), sum(before)
    score = best
    # Scanning from the end keeps the last-found maximum nearest the front: ties go to the earliest block.
    for at in range(len(short) - 1, -1, -1):
        score += after[at] - before[at]
        if score >= best:
            best_at, best = at, score
    return best_at


def _best_move(old: list[Any], new: list[Any]) -> int:
    """1 when the run is best read as its first element moved to the end, -1 as its last moved to the
    front, 0 when pairing in place matches as well (within one element)."""
    m = len(old)
    in_place = sum(_similarity(x, y) for x, y in zip(old, new, strict=True))
    if in_place >= m - 1:
        return 0
    to_end = _similarity(old[0], new[-1]) + sum(_similarity(old[i + 1], new[i]) for i in range(m - 1))
    to_front = _similarity(old[-1], new[0]) + sum(_similarity(old[i], new[i + 1]) for i in range(m - 1))
    best = max(to_end, to_front)
    if best <= in_place + 1:
        return 0
    return 1 if to_end >= to_front else -1


def _resync(old: str, new: str, i: int, old_end: int, j: int, new_end: int) -> tuple[tuple[int, int] | None, int]:
    """After a difference at `old[i]`, `new[j]`: the nearest `(i', j')` past it where the strings agree
    again, found by looking up an anchor of one string in the other at growing distances; and how many
    code points the lookups scanned."""
    scanned = 0
    for gap, window in _LEVELS:
        # An anchor from `new` looked up in `old` catches deletions and substitutions (the old run is as
        # long or longer); one from `old` looked up in `new`, insertions.
        deleted = None
        at = j + gap
        if at + _ANCHOR <= new_end:
            stop = min(old_end, i + window + gap + _ANCHOR)
            scanned += stop - i
            hit = _anchored(new, old, at, i, stop, new_end, old_end)
            if hit >= 0:
                if hit - i <= gap:
                    return (hit, at), scanned  # nothing at this level can be nearer
                deleted = (hit, at)
        inserted = None
        at = i + gap
        if at + _ANCHOR <= old_end:
            stop = min(new_end, j + window + gap + _ANCHOR)
            scanned += stop - j
            hit = _anchored(old, new, at, j, stop, old_end, new_end)
            if hit >= 0:
                inserted = (at, hit)
        if deleted is not None and (inserted is None or deleted[0] - i + gap <= inserted[1] - j + gap):
            return deleted, scanned
        if inserted is not None:
            return inserted, scanned
    return None, scanned


def _anchored(source: str, target: str, at: int, start: int, stop: int, source_end: int, target_end: int) -> int:
    """Where in `target[start:stop]` the anchor `source[at:at + _ANCHOR]` is found with the strings agreeing
    for `_CONFIRM` more code points after it (or to the end of a run); -1 when not among the first few
    places it occurs."""
    anchor = source[at : at + _ANCHOR]
    after = at + _ANCHOR
    for _ in range(3):
        hit = target.find(anchor, start, stop)
        if hit < 0:
            return -1
        wanted = min(_CONFIRM, source_end - after, target_end - hit - _ANCHOR)
        if target.startswith(source[after : after + wanted], hit + _ANCHOR):
            return hit
        start = hit + 1
    return -1


def _prefix_len(a: str, b: str, i: int, j: int, limit: int) -> int:
    """How many code points `a[i:]` and `b[j:]` share at their start, up to `limit`: slices compared in
    growing chunks (C-speed), then halved inside the chunk that differs, never a Python loop per code
    point beyond the last few."""
    done, step = 0, 32
    while done < limit:
        size = min(step, limit - done)
        if a.startswith(b[j + done : j + done + size], i + done):
            done += size
            step = min(step * 4, 1 << 16)
            continue
        low, high = 0, size  # the first `low` agree; the first `high` do not
        while high - low > 8:
            middle = (low + high) // 2
            if a.startswith(b[j + done + low : j + done + middle], i + done + low):
                low = middle
            else:
                high = middle
        while low < high and a[i + done + low] == b[j + done + low]:
            low += 1
        return done + low
    return limit


def _suffix_len(a: str, b: str, a_end: int, b_end: int, limit: int) -> int:
    """How many code points `a[:a_end]` and `b[:b_end]` share at their end, up to `limit`."""
    done, step = 0, 32
    while done < limit:
        size = min(step, limit - done)
        if a.endswith(b[b_end - done - size : b_end - done], 0, a_end - done):
            done += size
            step = min(step * 4, 1 << 16)
            continue
        low, high = 0, size
        while high - low > 8:
            middle = (low + high) // 2
            if a.endswith(b[b_end - done - middle : b_end - done - low], 0, a_end - done - low):
                low = middle
            else:
                high = middle
        while low < high and a[a_end - done - low - 1] == b[b_end - done - low - 1]:
            low += 1
        return done + low
    return limit


def _escape(key: str) -> str:
    """A member name as a JSON Pointer token (RFC 6901: `~` first, then `/`)."""
    if "~" in key or "/" in key:
        return key.replace("~", "~0").replace("/", "~1")
    return key


# apply -----------------------------------------------------------------------------------------------


def apply(doc: Any, ops: Any) -> dict[str, Any]:
    """The document `ops` turn `doc` into. `doc` is never changed; the result shares with it every
    container the ops do not touch. Raises DeltaError, and only DeltaError, for any ops that do not apply
    in full (see the module docstring for the format and the bounds)."""
    if not isinstance(ops, list):
        raise DeltaError(f"ops must be a JSON array, not {_kind(ops)}")
    if len(ops) > MAX_OPS:
        raise DeltaError(f"{len(ops)} ops is more than the {MAX_OPS} a delta may hold")
    try:
        result = _Apply(doc).run(ops)
    except DeltaError:
        raise
    except RecursionError:
        raise DeltaError("a value is nested too deeply") from None
    except MemoryError:
        raise
    except Exception as exc:  # the contract is one exception type; a slip here must not become another
        raise DeltaError(f"ops do not apply: {type(exc).__name__}: {exc}") from exc
    if type(result) is not dict:
        raise DeltaError(f"the ops leave {_kind(result)}, not a document (an object)")
    return result


Key = str | int


class _Apply:
    """One application. The document hangs from `holder[0]`, so replacing the root is one more assignment
    into a container; `owned` holds (by id, and alive, so no id is reused) the containers this
    application made and may therefore change in place. Any other container is copied, shallowly, the
    first time an op writes into it or below it."""

    __slots__ = ("holder", "inserted", "owned", "rewritten")

    def __init__(self, doc: Any) -> None:
        self.holder: list[Any] = [doc]
        self.owned: dict[int, Any] = {id(self.holder): self.holder}
        self.inserted = 0
        self.rewritten = 0

    def run(self, ops: list[Any]) -> Any:
        index, count = 0, len(ops)
        while index < count:
            op = ops[index]
            name = _op_name(op, index)
            if name == "splice":
                path = _member(op, "path", str, index, name)
                end = index + 1
                while end < count and _is_splice_on(ops[end], path):
                    end += 1
                self.splices(ops, index, end, path)
                index = end
                continue
            where = f"op {index} ({name} {_shown(op.get('path'))})"
            path_tokens = _tokens(_member(op, "path", str, index, name), where)
            if name == "add":
                value = _member(op, "value", object, index, name)
                self.count(value, where)
                self.add(path_tokens, value, where)
            elif name == "remove":
                self.remove(path_tokens, where)
            elif name == "replace":
                value = _member(op, "value", object, index, name)
                self.count(value, where)
                self.replace(path_tokens, value, where)
            elif name == "move":
                from_tokens = _tokens(_member(op, "from", str, index, name), where)
                if from_tokens == path_tokens:
                    self.get(from_tokens, where)  # RFC 6902 4.4: "from" must exist, even for a no-op
                elif from_tokens == path_tokens[: len(from_tokens)]:
                    raise DeltaError(f"{where}: a value cannot be moved into itself")
                else:
                    self.add(path_tokens, self.remove(from_tokens, where), where)
            elif name == "copy":
                from_tokens = _tokens(_member(op, "from", str, index, name), where)
                self.add(path_tokens, self.duplicate(self.get(from_tokens, where), where), where)
            else:  # test
                expected = _member(op, "value", object, index, name)
                if not _json_equal(self.get(path_tokens, where), expected):
                    raise DeltaError(f"{where}: the value there is not the one tested for")
            index += 1
        return self.holder[0]

    # Reading and writing at a pointer -----------------------------------------------------------------

    def get(self, tokens: list[str], where: str) -> Any:
        node = self.holder[0]
        for depth, token in enumerate(tokens):
            node = node[_existing(node, token, where, tokens[:depth])]
        return node

    def parent(self, tokens: list[str], where: str) -> tuple[Any, str | None]:
        """The container holding the value at `tokens`, made private, and the last token unchecked
        (whether it must exist depends on the op); for the root, the holder and None."""
        node: Any = self.holder
        key: Key = 0
        for depth, token in enumerate(tokens):
            child = node[key]
            if id(child) not in self.owned:
                if type(child) is dict or type(child) is list:
                    child = child.copy()
                    node[key] = child
                    self.owned[id(child)] = child
                else:
                    raise DeltaError(f"{where}: {_pointer(tokens[:depth])} is {_kind(child)}, not a container")
            node = child
            if depth == len(tokens) - 1:
                return node, token
            key = _existing(node, token, where, tokens[:depth])
        return self.holder, None

    def slot(self, tokens: list[str], where: str) -> tuple[Any, Key]:
        """The private container holding the existing value at `tokens`, and its key there."""
        node, token = self.parent(tokens, where)
        if token is None:
            return node, 0
        return node, _existing(node, token, where, tokens[:-1])

    def add(self, tokens: list[str], value: Any, where: str) -> None:
        node, token = self.parent(tokens, where)
        if token is None:
            node[0] = value
        elif type(node) is dict:
            node[token] = value
        else:
            self.shift(len(node), where)
            if token == "-":
                node.append(value)
            else:
                node.insert(_index(node, token, where, tokens[:-1], allow_end=True), value)

    def remove(self, tokens: list[str], where: str) -> Any:
        if not tokens:
            raise DeltaError(f"{where}: the whole document cannot be removed")
        node, key = self.slot(tokens, where)
        if type(node) is list:
            self.shift(len(node), where)
        return node.pop(key)

    def replace(self, tokens: list[str], value: Any, where: str) -> None:
        node, key = self.slot(tokens, where)
        node[key] = value

    def splices(self, ops: list[Any], first: int, end: int, path: str) -> None:
        """A run of splices on one string, rebuilt once while the offsets go forward (as `diff` writes
        them): pieces of the string before the run, and the inserts, joined at the end. An offset behind
        the last splice flushes the pieces and starts again, which gives the same string as one rebuild
        per splice."""
        where = f"op {first} (splice {_shown(path)})"
        tokens = _tokens(path, where)
        node, key = self.slot(tokens, where)
        text = node[key]
        if type(text) is not str:
            raise DeltaError(f"{where}: the value there is {_kind(text)}, not a string")
        pieces: list[str] = []
        cursor = built = 0  # text[:cursor] is consumed into pieces, which hold `built` code points
        for index in range(first, end):
            op = ops[index]
            where = f"op {index} (splice {_shown(path)})"
            offset = _count_member(op, "offset", index)
            removed = _count_member(op, "remove", index)
            insert = _member(op, "insert", str, index, "splice")
            self.count(insert, where)
            length = built + len(text) - cursor
            if offset + removed > length:
                raise DeltaError(
                    f"{where}: the range [{offset}, {offset + removed}) is outside the string's {length} code points"
                )
            if offset < built:
                text = self.rebuilt(pieces, text, cursor, where)
                pieces, cursor, built = [], 0, 0
            at = cursor + offset - built
            pieces.append(text[cursor:at])
            pieces.append(insert)
            built += at - cursor + len(insert)
            cursor = at + removed
        node[key] = self.rebuilt(pieces, text, cursor, where)

    def rebuilt(self, pieces: list[str], text: str, cursor: int, where: str) -> str:
        pieces.append(text[cursor:])
        result = "".join(pieces)
        self.shift(len(result), where)
        return result

    # Bounds ---------------------------------------------------------------------------------------------

    def count(self, value: Any, where: str) -> None:
        """Count a value the op puts in (its compact JSON); it must be JSON."""
        try:
            size = len(exact_json(value))
        except CanonicalizationError as exc:
            raise DeltaError(f"{where}: the value is not JSON: {exc}") from None
        self.inserted += size
        if self.inserted > MAX_INSERTED_BYTES:
            raise DeltaError(f"{where}: the ops put in more than {MAX_INSERTED_BYTES} bytes")

    def duplicate(self, value: Any, where: str) -> Any:
        """A new copy of a value (for `copy`), counted like a value the op carried."""
        try:
            data = orjson.dumps(value)
        except orjson.JSONEncodeError as exc:
            raise DeltaError(f"{where}: the value cannot be copied: {exc}") from None
        self.inserted += len(data)
        if self.inserted > MAX_INSERTED_BYTES:
            raise DeltaError(f"{where}: the ops put in more than {MAX_INSERTED_BYTES} bytes")
        return orjson.loads(data)

    def shift(self, units: int, where: str) -> None:
        self.rewritten += units
        if self.rewritten > MAX_REWRITTEN:
            raise DeltaError(f"{where}: the ops rewrite more than {MAX_REWRITTEN} elements and code points")


def _op_name(op: Any, index: int) -> str:
    if not isinstance(op, dict):
        raise DeltaError(f"op {index} is {_kind(op)}, not an object")
    name = op.get("op")
    if not isinstance(name, str):
        raise DeltaError(f"op {index} has no 'op' member naming the operation")
    if name not in _OPS:
        raise DeltaError(f"op {index}: unknown operation {_shown(name)}")
    return name


def _is_splice_on(op: Any, path: str) -> bool:
    return isinstance(op, dict) and op.get("op") == "splice" and op.get("path") == path


def _member(op: dict[str, Any], name: str, kind: type, index: int, op_name: str) -> Any:
    if name not in op:
        raise DeltaError(f"op {index} ({op_name}) has no '{name}' member")
    value = op[name]
    if kind is not object and not isinstance(value, kind):
        raise DeltaError(f"op {index} ({op_name}): '{name}' must be a string, not {_kind(value)}")
    return value


def _count_member(op: dict[str, Any], name: str, index: int) -> int:
    value = _member(op, name, object, index, "splice")
    if type(value) is not int or value < 0:
        raise DeltaError(f"op {index} (splice): '{name}' must be an integer >= 0, not {_shown(value)}")
    return value


def _tokens(pointer: str, where: str) -> list[str]:
    """The reference tokens of a JSON Pointer (RFC 6901), unescaped."""
    if not pointer:
        return []
    if pointer[0] != "/":
        raise DeltaError(f"{where}: a JSON Pointer is empty or starts with '/', not {_shown(pointer)}")
    tokens = pointer[1:].split("/")
    if "~" in pointer:
        if _ESCAPE_RE.search(pointer):
            raise DeltaError(f"{where}: in a JSON Pointer '~' is followed by '0' or '1'")
        tokens = [token.replace("~1", "/").replace("~0", "~") for token in tokens]
    return tokens


def _existing(node: Any, token: str, where: str, above: list[str]) -> Key:
    """The key of an existing member or element of `node` named by `token`."""
    kind = type(node)
    if kind is dict:
        if token not in node:
            raise DeltaError(f"{where}: {_pointer(above)} has no member {_shown(token)}")
        return token
    if kind is list:
        return _index(node, token, where, above, allow_end=False)
    raise DeltaError(f"{where}: {_pointer(above)} is {_kind(node)}, not a container")


def _index(node: list[Any], token: str, where: str, above: list[str], *, allow_end: bool) -> int:
    if not _INDEX_RE.fullmatch(token):
        raise DeltaError(f"{where}: {_shown(token)} is not an array index in {_pointer(above)}")
    index = int(token)
    if index > len(node) or (index == len(node) and not allow_end):
        raise DeltaError(f"{where}: index {index} is out of range for {_pointer(above)} of {len(node)} elements")
    return index


def _pointer(tokens: list[str]) -> str:
    """A pointer for messages; the root reads as 'the document'."""
    if not tokens:
        return "the document"
    return _shown("/" + "/".join(_escape(token) for token in tokens))


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
