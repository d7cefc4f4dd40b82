"""Deltas from the tool's raw return value: the change converted, not the whole answer.

A framework such as FastMCP turns a tool's return value V into the answer: structured content
S = convert(V), and one text block T holding the JSON of S. After a one-cell edit of a 5 MB notebook the
conversion (about 25 ms), parsing the base back, diffing it and digesting the new answer cost more than
sending it whole. This module computes the same delta reply from what changed only:

1. V_new is compared with the base's return value V_base (held by the history, used only while it still
   hashes to the base's tag) member by member, and array members element by element (JSON equality:
   `==` in C, types checked), so what changed is found without converting anything;
2. only what changed is converted, by the framework's own conversion applied to a *skeleton* holding the
   changed members (or the changed run of an array member's elements): the conversion of an object
   converts each member on its own, and of an array each element, so the parts are the parts of the
   whole conversion (the framework adapter offers this only for conversions that compose so; FastMCP:
   return annotations without custom serializers);
3. S_new is S_base with those parts replaced (sharing every other part, which nothing here changes);
4. T_new is T_base with the JSON of the changed parts spliced in, at offsets read from the base's
   *layout*: the length, in code points, of the JSON of each member and of each array element. The base's
   layout is computed once per key and proven by rebuilding T_base from the parts; each new layout is the
   base's with the changed lengths;
5. the ops are the splices of T (each narrowed to what differs) and the diff of the changed parts of S;
   the digest is the tree digest with the base's leaf hashes (`mcpcache.delta.tree.updated`), or the
   whole-answer digest for a client that asked for that form.

Anything this module is not sure of (a key added, removed or reordered; a member whose conversion is
absent on one side only; a base with no return value held; a layout that does not rebuild the text)
gives None, and the caller converts the whole answer as usual. What it returns is the answer the full
conversion would have made, byte for byte: tests/server/test_raw_deltas.py compares the two over random
notebooks and edits.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson
import xxhash

from mcpcache import delta
from mcpcache.canonical import CanonicalizationError
from mcpcache.delta.diffing import _prefix_len, _suffix_len
from mcpcache.delta.spec import escape_token
from mcpcache.delta.tree import TREE_FORMAT, leaves_of, root_of, updated
from mcpcache.etag import _check_exact, _feed_json, answer_digest, parsed_raw_tag_sized
from mcpcache.protocol import format_tag
from mcpcache.server.history import Version, version_of

__all__ = ["Conversion", "Layout", "RawDelta", "raw_delta"]

TEXT_PATH = "/content/0/text"


class Conversion(Protocol):
    """How the framework converts a return value, in parts (see the module docstring)."""

    def structured(self, skeleton: dict[str, Any]) -> Any:
        """The structured content the framework makes of a return value holding only these members."""

    def text(self, value: Any) -> str:
        """The JSON the framework writes for a part of the structured content (it writes the whole so)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Where the JSON of each part of the structured content lies in the text (lengths in code points):
    per member in order, the length of `"key":` and of its value's JSON, or for an array member the
    lengths of its elements' JSON."""

    keys: tuple[str, ...]
    heads: tuple[int, ...]
    values: tuple[int | Lengths, ...]


if TYPE_CHECKING:
    Lengths = array[int]
else:
    Lengths = array
"""An array member's element lengths (`array("q")`: eight bytes each, where a tuple of ints takes 36)."""


def _value_length(value: int | Lengths) -> int:
    if type(value) is int:
        return value
    assert isinstance(value, array)
    return 2 + sum(value) + max(len(value) - 1, 0)


def layout_of(structured: dict[str, Any], text: str, conversion: Conversion) -> Layout | None:
    """The layout of `text`, the framework's JSON of `structured`, proven by rebuilding the text from the
    parts; None when the parts do not rebuild it (the framework writes its JSON some other way)."""
    keys: list[str] = []
    heads: list[int] = []
    values: list[int | Lengths] = []
    pieces: list[str] = []
    for key, value in structured.items():
        head = conversion.text(key) + ":"
        if type(value) is list:
            texts = [conversion.text(item) for item in value]
            pieces.append(head + "[" + ",".join(texts) + "]")
            values.append(array("q", [len(item) for item in texts]))
        else:
            written = conversion.text(value)
            pieces.append(head + written)
            values.append(len(written))
        keys.append(key)
        heads.append(len(head))
    if "{" + ",".join(pieces) + "}" != text:
        return None
    return Layout(tuple(keys), tuple(heads), tuple(values))


@dataclass(frozen=True)
class RawDelta:
    """A delta computed from the raw value, and the new answer's version (to record under its tag)."""

    ops: list[dict[str, Any]]
    ops_size: int
    digest: str
    version: Version
    text_sizes: tuple[int, int]
    """The new text's UTF-8 length and its length as a JSON string (what the answer's size is measured
    from; `mcpcache.server.decisions.text_answer_bytes`)."""


class Digests(bytes):
    """An array member's element hashes, 16 bytes each, end to end (one object, not one per element)."""

    def at(self, index: int) -> bytes:
        return self[16 * index : 16 * index + 16]

    def elements(self) -> int:
        return len(self) // 16


RawLeaves = dict[str, bytes]
"""The return value's parts as hashes (xxh3-128 of their JSON): each member's, and for an array member
each element's (`Digests`). Equal hashes, equal JSON, so an equal part of the structured content."""


def raw_tag_leaves(domain: bytes, value: Any, *, walked: bool = False) -> tuple[str, int, RawLeaves | None]:
    """`mcpcache.etag.raw_tag_sized(domain, value)` (the same tag and length, from the same bytes written
    piece by piece), and the hashes of the value's parts when it is an object (None otherwise): the JSON
    of each part is hashed on its own as it is written, which costs the tag a small fraction more.
    `walked`: the value is known to hold only exact JSON types (`parsed_raw_tag_sized`). Raises
    CanonicalizationError as those do."""
    if not walked:
        _check_exact(value)
    if type(value) is not dict or not value:
        tag, size = parsed_raw_tag_sized(domain, value)
        return tag, size, None
    digest = xxhash.xxh3_128(domain)
    update = digest.update
    hashed = xxhash.xxh3_128_digest
    written = len(value) + 1  # the braces and the commas
    leaves: RawLeaves = {}
    update(b"{")
    try:
        for index, (key, item) in enumerate(value.items()):
            name = orjson.dumps(key) + b":"
            update(b"," + name if index else name)
            written += len(name)
            if type(item) is list:
                parts = [orjson.dumps(element) for element in item]
                # The elements' JSON, as one list's, fed piece by piece: joined, it was two 5 MB copies.
                update(b"[")
                for position, part in enumerate(parts):
                    if position:
                        update(b",")
                    update(part)
                update(b"]")
                written += 2 + sum(len(part) for part in parts) + max(len(parts) - 1, 0)
                leaves[key] = Digests(b"".join(hashed(part) for part in parts))
            else:
                member = xxhash.xxh3_128()

                def both(data: bytes, member: Any = member) -> None:
                    update(data)
                    member.update(data)

                written += _feed_json(both, item, 1)
                leaves[key] = member.digest()
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise CanonicalizationError(str(exc)) from exc
    update(b"}")
    return format_tag(digest.hexdigest()), written, leaves


class _Unsure(Exception):
    """Something the shortcut does not cover: the caller converts the whole answer."""


@dataclass
class _Splice:
    start: int
    end: int
    insert: str


def _common_ends(old: str, new: str) -> tuple[int, int]:
    """How many code points the two strings share at their start, and then at their end."""
    shortest = min(len(old), len(new))
    head = _prefix_len(old, new, 0, 0, shortest)
    return head, _suffix_len(old, new, len(old), len(new), shortest - head)


def raw_delta(
    base: Version,
    raw: Any,
    leaves: RawLeaves,
    conversion: Conversion,
    *,
    format: str,
    max_bytes: int,
) -> RawDelta | None:
    """The delta from `base` (whose derived state holds its return value's `RawLeaves`) to the answer the
    framework would make of `raw` (whose `RawLeaves` are `leaves`), in `format`; None when the shortcut
    does not apply or the ops would be longer than `max_bytes`."""
    try:
        return _RawDelta(base, raw, leaves, conversion, format, max_bytes).run()
    except (_Unsure, CanonicalizationError, orjson.JSONDecodeError, orjson.JSONEncodeError, RecursionError):
        return None
    except Exception:
        # The framework's conversion refused a part (a NaN, say): the whole conversion meets it as usual.
        return None


class _RawDelta:
    def __init__(
        self, base: Version, raw: Any, leaves: RawLeaves, conversion: Conversion, format: str, max_bytes: int
    ) -> None:
        self.base = base
        self.raw = raw
        self.leaves = leaves
        self.conversion = conversion
        self.format = format
        self.max_bytes = max_bytes
        self.text = ""
        self.ops: list[dict[str, Any]] = []
        self.size = 2  # the ops' JSON: "[]", then each op and its comma

    def run(self) -> RawDelta | None:
        base, derived = self.base, self.base.derived
        old_leaves, new_leaves, new_raw = derived.raw, self.leaves, self.raw
        if base.structured_in_text != "plain" or base.meta is not None or len(base.content) != 1:
            raise _Unsure
        block = base.content[0]
        if not isinstance(block, dict) or block.keys() != {"type", "text"} or block["type"] != "text":
            raise _Unsure
        if type(old_leaves) is not dict or type(new_raw) is not dict or list(old_leaves) != list(new_leaves):
            raise _Unsure
        text: str = block["text"]
        self.text = text
        if derived.layout is None:
            self.prepare(text)
        layout = derived.layout
        if not isinstance(layout, Layout) or not set(layout.keys) <= old_leaves.keys():
            raise _Unsure  # every part of the structured content must come from a member of the value

        new_values = list(layout.values)
        splices: list[_Splice] = []
        sparse: dict[str, Any] = {}  # the new structured content's changed parts, in place (see `finish`)
        at = 1  # past "{"
        for index, key in enumerate(layout.keys):
            value_at = at + layout.heads[index]
            length = layout.values[index]
            old, new = old_leaves[key], new_leaves[key]
            if old != new:
                sparse[key], new_values[index] = self.member(key, old, new, new_raw[key], value_at, length, splices)
            else:
                sparse[key] = [None] * len(length) if isinstance(length, array) else None
            at = value_at + _value_length(length) + 1
        # A changed member absent from the structured content (a key the conversion drops) must stay so.
        for key, old in old_leaves.items():
            if key not in sparse and old != new_leaves[key] and key in self.conversion.structured({key: new_raw[key]}):
                raise _Unsure
        return self.finish(text, sparse, layout, tuple(new_values), splices)

    def prepare(self, text: str) -> None:
        """The base's layout and sizes (and, for the tree digest, its leaves): computed once per key, from
        the structured content parsed from the text for the purpose and let go after."""
        derived = self.base.derived
        structured = orjson.loads(text)
        if type(structured) is not dict:
            raise _Unsure
        layout = layout_of(structured, text, self.conversion)
        if layout is None:
            raise _Unsure
        derived.text_sizes = _text_sizes(text)
        if derived.leaves is None:
            derived.leaves = leaves_of({"content": [{"type": "text", "text": text}], "structuredContent": structured})
        derived.layout = layout

    def emit(self, op: dict[str, Any]) -> None:
        self.size += len(orjson.dumps(op)) + 1
        if self.size > self.max_bytes:
            raise _OverBudget
        self.ops.append(op)

    def diff(self, old: Any, new: Any, path: str) -> None:
        ops = delta.diff(old, new, max_bytes=self.max_bytes - self.size, path=path)
        if ops is None:
            raise _OverBudget
        for op in ops:
            self.emit(op)

    def member(
        self,
        key: str,
        old: bytes,
        hashes: bytes,
        new: Any,
        value_at: int,
        length: int | Lengths,
        splices: list[_Splice],
    ) -> tuple[Any, int | Lengths]:
        """The member's new structured value (for an array, a list holding only the changed run's new
        elements, in place), its new length(s), its splice of the text and the ops on its structured value.
        `old`, `hashes`: the base's and the new value's hashes of the member (`RawLeaves`); `new`: its value."""
        conversion, text = self.conversion, self.text
        path = f"/structuredContent/{escape_token(key)}"
        if isinstance(length, array):
            if not isinstance(old, Digests) or not isinstance(hashes, Digests) or type(new) is not list:
                raise _Unsure
            if old.elements() != len(length) or hashes.elements() != len(new):
                raise _Unsure
            start, old_end, new_end = _changed_run(old, hashes)
            if start == old_end == new_end:
                raise _Unsure  # unequal, yet no element differs: not a case the splices below cover
            made = conversion.structured({key: new[start:new_end]})
            if type(made) is not dict or made.keys() != {key} or type(made[key]) is not list:
                raise _Unsure
            run = made[key]
            if len(run) != new_end - start:
                raise _Unsure
            texts = [conversion.text(item) for item in run]
            # Where the run's JSON lies: element i starts past "[" and the elements and commas before it.
            first = value_at + 1 + sum(length[:start]) + start
            old_run = length[start:old_end]
            run_length = sum(old_run) + max(len(old_run) - 1, 0)
            held = orjson.loads("[" + text[first : first + run_length] + "]")
            if (
                len(held) != old_end - start
                or ",".join(conversion.text(item) for item in held) != text[first : first + run_length]
            ):
                raise _Unsure  # the layout does not place the run where its JSON is
            splices.append(_array_splice(first, run_length, start, old_end, len(length), ",".join(texts)))
            common = min(len(held), len(run))
            for offset in range(common):
                self.diff(held[offset], run[offset], f"{path}/{start + offset}")
            for offset in range(common, len(run)):
                self.emit({"op": "add", "path": f"{path}/{start + offset}", "value": run[offset]})
            for _ in range(common, len(held)):
                self.emit({"op": "remove", "path": f"{path}/{start + common}"})
            lengths = length[:start] + array("q", [len(item) for item in texts]) + length[old_end:]
            sparse: list[Any] = [None] * len(lengths)
            sparse[start : start + len(run)] = run
            return sparse, lengths
        made = conversion.structured({key: new})
        if type(made) is not dict or made.keys() != {key} or type(made[key]) is list:
            raise _Unsure  # absent on one side only, or an array now: the layout's shape changes
        value = made[key]
        written = conversion.text(value)
        held_text = text[value_at : value_at + length]
        held = orjson.loads(held_text)
        if type(held) is list or conversion.text(held) != held_text:
            raise _Unsure
        splices.append(_Splice(value_at, value_at + length, written))
        self.diff(held, value, path)
        return value, len(written)

    def finish(
        self,
        text: str,
        sparse: dict[str, Any],
        layout: Layout,
        new_values: tuple[int | Lengths, ...],
        splices: list[_Splice],
    ) -> RawDelta | None:
        pieces: list[str] = []
        text_ops: list[dict[str, Any]] = []
        cursor = shift = 0
        sizes = self.base.derived.text_sizes
        assert sizes is not None  # measured by `prepare`
        utf8, escaped = sizes
        for splice in splices:
            old = text[splice.start : splice.end]
            old_sizes, new_sizes = _text_sizes(old), _text_sizes(splice.insert)
            utf8 += new_sizes[0] - old_sizes[0]
            escaped += new_sizes[1] - old_sizes[1]
            head, tail = _common_ends(old, splice.insert)
            removed = len(old) - head - tail
            insert = splice.insert[head : len(splice.insert) - tail]
            if removed or insert:
                op = {"op": "splice", "path": TEXT_PATH, "offset": splice.start + head + shift, "remove": removed}
                text_ops.append({**op, "insert": insert})
            pieces.append(text[cursor : splice.start])
            pieces.append(splice.insert)
            cursor = splice.end
            shift += len(splice.insert) - (splice.end - splice.start)
        pieces.append(text[cursor:])
        for op in text_ops:
            self.emit(op)
        ops = text_ops + self.ops[: len(self.ops) - len(text_ops)]  # the text's splices first, then the rest
        new_text = "".join(pieces)
        block = {"type": "text", "text": new_text}
        # `version_of` reads the structured content from the text ("plain"): it needs only to see an object.
        version = version_of([block], {}, None, finite=True, structured_in_text="plain")
        if version is None or version.structured_in_text != "plain":
            return None
        if self.format == TREE_FORMAT:
            base_leaves = self.base.derived.leaves
            if base_leaves is None:  # a base made for a client that asked for the whole-answer digest
                parsed = orjson.loads(text)
                base_leaves = self.base.derived.leaves = leaves_of(
                    {"content": [{"type": "text", "text": text}], "structuredContent": parsed}
                )
            # Only the changed parts of the structured content are read: the ops mark every one of them.
            leaves = updated(base_leaves, ops, {"content": [block], "structuredContent": sparse}, strict=True)
            version.derived.leaves = leaves
            digest = root_of(leaves)
        else:
            digest = answer_digest([block], orjson.loads(new_text), None)
        version.derived.layout = Layout(layout.keys, layout.heads, new_values)
        version.derived.text_sizes = (utf8, escaped)
        return RawDelta(ops, self.size, digest, version, (utf8, escaped))


class _OverBudget(_Unsure):
    """The ops would be longer than the budget: the full answer goes."""


def _array_splice(first: int, run_length: int, start: int, old_end: int, count: int, inserted: str) -> _Splice:
    """The splice of an array's text replacing elements `[start, old_end)` (of `count`, whose JSON starts at
    `first` and spans `run_length`) with `inserted` (the new elements' JSON, joined): the commas around a
    run inserted into, or removed from, either end of the array, or the whole of it, go with it."""
    if old_end > start and inserted:
        return _Splice(first, first + run_length, inserted)
    if old_end == start:  # only inserted
        if start < count:
            return _Splice(first, first, inserted + ",")
        if start > 0:
            return _Splice(first - 1, first - 1, "," + inserted)
        return _Splice(first, first, inserted)
    if start == 0 and old_end == count:  # every element removed
        return _Splice(first, first + run_length, "")
    if old_end < count:  # removed, with the comma after
        return _Splice(first, first + run_length + 1, "")
    return _Splice(first - 1, first + run_length, "")  # removed at the end, with the comma before


def _text_sizes(text: str) -> tuple[int, int]:
    """The UTF-8 length of `text`, compact JSON, and its length written as a JSON string (unquoted): its
    quotes and backslashes escaped, the only characters compact JSON holds that a string escapes."""
    utf8 = len(text.encode())
    return utf8, utf8 + text.count('"') + text.count("\\")


def _changed_run(old: Digests, new: Digests) -> tuple[int, int, int]:
    """(start, end in old, end in new) of the run of elements whose hashes differ, past the common ends."""
    old_count, new_count = old.elements(), new.elements()
    shortest = min(old_count, new_count)
    start = 0
    while start < shortest and old.at(start) == new.at(start):
        start += 1
    tail = 0
    while tail < shortest - start and old.at(old_count - 1 - tail) == new.at(new_count - 1 - tail):
        tail += 1
    return start, old_count - tail, new_count - tail
