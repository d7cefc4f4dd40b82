"""`diff`: the ops that turn one answer's document into another's, cheaply, within a byte budget."""

from __future__ import annotations

from typing import Any, Final

import orjson

import mcpcache.delta.spec as spec
from mcpcache.delta.equality import agreeing, equality_for, same, same_serialized
from mcpcache.delta.spec import escape_token


def diff(old: Any, new: Any, *, max_bytes: int, path: str = "") -> list[dict[str, Any]] | None:
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

    `path`: a JSON Pointer the ops' paths start with, for a caller that diffs one part of a document (the
    ops then apply to the document, not to `old`).
    """
    differ = _Differ(max_bytes)
    try:
        differ.value(old, new, path)
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
        if self.size > self.max_bytes or len(self.ops) >= spec.MAX_OPS:
            raise _OverBudget
        self.ops.append(op)

    def rewrite(self, units: int) -> None:
        self.rewritten += units
        if self.rewritten > spec.MAX_REWRITTEN:
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
        if same(old, new):
            return False
        self.emit({"op": "replace", "path": path, "value": new})
        return True

    def object(self, old: dict[str, Any], new: dict[str, Any], path: str) -> None:
        if not _order_kept(old, new):
            # Ops keep the members they leave and append the ones they add, so `new`'s own order (which a
            # serializer writes, and the answer served must have, byte for byte) comes only whole.
            self.emit({"op": "replace", "path": path, "value": new})
            return
        since = self.mark()
        whole = 0
        for key in old:
            if key not in new:
                self.emit({"op": "remove", "path": f"{path}/{escape_token(key)}"})
                whole += 1
        missing = _MISSING
        for key, value in new.items():
            held = old.get(key, missing)
            if held is missing:
                self.emit({"op": "add", "path": f"{path}/{escape_token(key)}", "value": value})
                whole += 1
                continue
            # Equal strings and scalars are passed over here, before their pointer is built: most are.
            kind = type(held)
            if kind is str:
                if held == value:
                    continue
            elif kind is not dict and kind is not list and same(held, value):
                continue
            whole += self.value(held, value, f"{path}/{escape_token(key)}")
        if whole > _WHOLE_MIN and 2 * whole > len(new):
            self.replace_if_smaller(since, new, path)

    def array(self, old: list[Any], new: list[Any], path: str) -> None:
        old_len, new_len = len(old), len(new)
        shortest = min(old_len, new_len)
        same = equality_for(old)
        start = agreeing(old, new, 0, 0, shortest, 1) if same is same_serialized else 0
        while start < shortest and same(old[start], new[start]):
            start += 1
        if start == old_len == new_len:
            return
        tail = agreeing(old, new, old_len, new_len, shortest - start, -1) if same is same_serialized else 0
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


def _order_kept(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether ops on `old` (removes, replaces in place, adds at the end) can leave `new`'s member order:
    its members that `old` has, in `old`'s order, then the others."""
    if old.keys() == new.keys():
        return list(old) == list(new)
    kept = [key for key in old if key in new]
    return list(new) == kept + [key for key in new if key not in old]


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
