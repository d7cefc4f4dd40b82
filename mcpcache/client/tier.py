"""The decoded tier: answers kept decoded in this process, in front of whatever store holds them.

Decoding a stored answer costs far more than anything else a hit does (a 10 MB answer: milliseconds of
JSON parsing and as many again in allocation), and the store would have to read and checksum the whole
body first. So the tool cache keeps recently served answers here, decoded, bounded in bytes (counted as
the stored body's length), least recently used first out.

The tier never decides freshness and never replaces the store: every lookup still asks the store (other
processes' writes, freshness ends and expiry live there), for the item's metadata only
(`Store.peek_many`). The tier's copy is used only when the store's current item is exactly the version the
tier holds: same key, same tag and same body checksum (the checksum the store recorded when the body was
saved). Anything else, and the body is loaded when an answer is to be served.

Every serve hands out a private copy (`Decoded.copy`): new containers and new model objects, with the
immutable leaves (strings, numbers) shared; the structured content is copied by a plan of where its
containers are, made once when the answer is held. A caller that mutates what it was given changes its own
copy only, never the tier's, and never what a later caller is served. (`CacheSettings(read_only_views=True)`
hands out the held answer itself, and the caller promises not to change it.)
"""

from __future__ import annotations

import pickle
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from mcp_types import CallToolResult
from pydantic import BaseModel

from mcpcache.client.policy import EntryMeta

_ATOMS: frozenset[type] = frozenset({str, int, float, bool, type(None), bytes})

_SMALL_NODES = 48
"""Below this many stored bytes per comma (roughly: per JSON value), an answer is made of many small
values (rows of a table) and a pickled copy is cheaper to rebuild than a structural one; above it (long
strings: notebooks, documents) the structural copy, which shares the strings, is much cheaper."""


_FEW_BLOCKS = 4
"""At most this many content blocks beside planned structured content: each is copied structurally."""


def _copy_value(value: Any) -> Any:
    kind = type(value)
    # A shallow copy in C, then only the nested containers replaced: most values are strings, and this
    # is about a fifth cheaper than building each container item by item (a 5 MB notebook: 2.3 ms, not
    # 2.9; 5,000 small rows: 12 ms, not 16.6).
    if kind is dict:
        copied = value.copy()
        for key, item in copied.items():
            if (held := type(item)) is not str and held not in _ATOMS:
                copied[key] = _copy_value(item)
        return copied
    if kind is list:
        copied = value.copy()
        for index, item in enumerate(copied):
            if (held := type(item)) is not str and held not in _ATOMS:
                copied[index] = _copy_value(item)
        return copied
    if kind in _ATOMS:
        return value
    if isinstance(value, BaseModel):
        return _copy_model(value)
    if kind is tuple:
        return tuple(_copy_value(v) for v in value)
    # Not a shape a decoded answer has; a deep copy is always private.
    import copy

    return copy.deepcopy(value)


def _copy_model(model: BaseModel, **copied_fields: Any) -> BaseModel:
    """A new model object of the same class, its fields copied (what model_copy(deep=True) gives, without
    deepcopy's memo and reducers); `copied_fields` are private copies the caller already made."""
    new = _new_object(type(model))
    state = model.__dict__.copy()
    for key, value in state.items():  # values replaced in place: the dict does not change size
        if key in copied_fields:
            state[key] = copied_fields[key]
        elif type(value) not in _ATOMS:
            state[key] = _copy_value(value)
    _set_attribute(new, "__dict__", state)
    _set_attribute(new, "__pydantic_fields_set__", set(model.__pydantic_fields_set__))
    extra = model.__pydantic_extra__
    _set_attribute(new, "__pydantic_extra__", None if extra is None else _copy_value(extra))
    private = model.__pydantic_private__
    _set_attribute(new, "__pydantic_private__", None if private is None else _copy_value(private))
    return new


_new_object = object.__new__
_set_attribute = object.__setattr__


_GENERAL = ("general",)
"""A plan for a value that is neither a dict nor a list (a model, a tuple): `_copy_value` copies it."""

_EACH = "each"
"""First item of the plan of a list whose items are all containers of one plan: (_EACH, that plan)."""

_EACH_FROM = 16
"""Shorter lists keep a plan by index: a comprehension costs more than it saves on a few items."""

_FLAT = "flat"
"""First item of the plan of a container whose containers hold atoms only: (_FLAT, their keys)."""

_MODEL = "model"
"""First item of the plan of a pydantic model with no extra or private attributes (a content block, the
answer itself): (_MODEL, (field, plan) for each field that is not an atom). Copying by it skips the type
tests `_copy_model` makes on every field, which are most of what a small answer's copy costs."""

Plan = tuple[Any, ...]
"""Where `_planned` must copy inside a dict or list: (key or index, plan) for each value that is not an atom
(an empty plan: a shallow copy is a private copy); (_EACH, plan) for a list of alike containers (rows of a
table); or `_GENERAL`. Plans are interned while they are made, so a table's rows share one."""


def _plan_of(value: Any, interned: dict[Plan, Plan] | None = None) -> Plan:
    """The plan of a held value, made once when it is held: where its containers are."""
    interned = {} if interned is None else interned
    kind = type(value)
    if kind is dict:
        plan: Plan = tuple((key, _plan_of(item, interned)) for key, item in value.items() if type(item) not in _ATOMS)
        if plan and all(inner == () for _, inner in plan):
            plan = (_FLAT, tuple(key for key, _ in plan))
    elif kind is list:
        inner = [(index, _plan_of(item, interned)) for index, item in enumerate(value) if type(item) not in _ATOMS]
        if len(inner) >= _EACH_FROM and len(inner) == len(value) and all(p is inner[0][1] for _, p in inner):
            plan = (_EACH, inner[0][1])
        else:
            plan = tuple(inner)
    elif isinstance(value, BaseModel) and value.__pydantic_extra__ is None and value.__pydantic_private__ is None:
        fields = value.__dict__.items()
        plan = (_MODEL, tuple((key, _plan_of(item, interned)) for key, item in fields if type(item) not in _ATOMS))
    else:
        return _GENERAL
    return interned.setdefault(plan, plan)


def _planned(value: Any, plan: Plan) -> Any:
    """A private copy of `value` (which has not changed since `plan` was made of it): its containers copied
    where the plan says, every atom shared. It visits containers only, never the atoms beside them: on a
    notebook about twice as fast as `_copy_value`, on a table of 1,500 rows about as fast as rebuilding it
    from marshal's bytes (which makes every string again), which is what was done before."""
    if plan is _GENERAL:
        return _copy_value(value)
    head = plan[0] if plan else None
    if head is _MODEL:
        new = _new_object(type(value))
        state = value.__dict__.copy()
        for key, inner in plan[1]:
            state[key] = _planned(state[key], inner)
        _set_attribute(new, "__dict__", state)
        _set_attribute(new, "__pydantic_fields_set__", set(value.__pydantic_fields_set__))
        _set_attribute(new, "__pydantic_extra__", None)
        _set_attribute(new, "__pydantic_private__", None)
        return new
    if head is _EACH:
        inner = plan[1]
        if not inner:
            return [item.copy() for item in value]
        if inner[0] is _FLAT and len(inner[1]) == 1:
            # Rows of a table with one list or dict each (tags): one comprehension, no call per row.
            (key,) = inner[1]
            return [{**item, key: item[key].copy()} for item in value]
        return [_planned(item, inner) for item in value]
    copied = value.copy()
    if head is _FLAT:
        for key in plan[1]:
            copied[key] = copied[key].copy()
        return copied
    for key, inner in plan:
        # The two commonest inner plans done here, without a call: a container of atoms (a shallow copy),
        # and one whose containers hold atoms only (a notebook's cells and outputs, mostly).
        if not inner:
            copied[key] = copied[key].copy()
        elif inner[0] is _FLAT:
            item = copied[key] = copied[key].copy()
            for name in inner[1]:
                item[name] = item[name].copy()
        else:
            copied[key] = _planned(copied[key], inner)
    return copied


_COMPILED_MOST_NODES = 64
"""Plans of at most this many nodes (a small answer's: the answer, its blocks, a few rows) are compiled to
one function (`_compiled`); larger ones are followed by `_planned`, whose calls cost little beside theirs."""

_COMPILE_AT = 2
"""The copy of a held answer from which its plan is compiled (see `Decoded.copier`)."""

_COMPILED_MOST_PLANS = 256
_COMPILED: dict[Plan, Callable[[Any], Any] | None] = {}
"""Compiled copiers by plan (None: not compiled), emptied when it reaches `_COMPILED_MOST_PLANS`."""


def _compiled(plan: Plan) -> Callable[[Any], Any] | None:
    """A function copying a value as `_planned(value, plan)` does, with no call or test per container: for
    a 1 KB answer, most of what the copy costs is `_planned`'s calls and type tests, not the copying. None
    for plans too large, or with a key that is not a str or int."""
    try:
        return _COMPILED[plan]
    except KeyError:
        pass
    if len(_COMPILED) >= _COMPILED_MOST_PLANS:
        _COMPILED.clear()
    function = None
    lines: list[str] = []
    constants: dict[str, Any] = {
        "_planned": _planned,
        "_copy_value": _copy_value,
        "_new": _new_object,
        "_set": _set_attribute,
    }
    if _nodes(plan, _COMPILED_MOST_NODES) is not None:
        names = iter(range(1 << 30))
        out = _emit("value", plan, lines, constants, names)
        source = "def copy(value):\n" + "".join(f"    {line}\n" for line in lines) + f"    return {out}\n"
        # Safe to run: the source holds only names made here and keys written as literals by repr().
        exec(compile(source, "<mcpcache copy plan>", "exec"), constants)
        function = constants["copy"]
    _COMPILED[plan] = function
    return function


def _nodes(plan: Plan, most: int) -> int | None:
    """How many nodes `plan` has, or None past `most` or for a key `_emit` cannot write as a literal."""
    if plan is _GENERAL or not plan:
        return 1
    head = plan[0]
    if head is _EACH:
        return 1
    if head is _FLAT:
        return 1 + len(plan[1]) if all(type(key) in (str, int) for key in plan[1]) else None
    entries = plan[1] if head is _MODEL else plan
    count = 1
    for key, inner in entries:
        if type(key) not in (str, int):
            return None
        below = _nodes(inner, most - count)
        if below is None:
            return None
        count += below
        if count > most:
            return None
    return count


def _emit(source: str, plan: Plan, lines: list[str], constants: dict[str, Any], names: Iterator[int]) -> str:
    """Lines copying the value named `source` (a local name) by `plan`; the name of the copy."""
    out = f"v{next(names)}"
    if plan is _GENERAL:
        lines.append(f"{out} = _copy_value({source})")
        return out
    head = plan[0] if plan else None
    if head is _EACH:
        name = f"p{next(names)}"
        constants[name] = plan
        lines.append(f"{out} = _planned({source}, {name})")
        return out
    if head is _MODEL:
        state = f"v{next(names)}"
        lines.append(f"{state} = {source}.__dict__.copy()")
        for key, inner in plan[1]:
            item = f"v{next(names)}"
            lines.append(f"{item} = {state}[{key!r}]")
            lines.append(f"{state}[{key!r}] = {_emit(item, inner, lines, constants, names)}")
        lines.append(f"{out} = _new(type({source}))")
        lines.append(f"_set({out}, '__dict__', {state})")
        lines.append(f"_set({out}, '__pydantic_fields_set__', set({source}.__pydantic_fields_set__))")
        lines.append(f"_set({out}, '__pydantic_extra__', None)")
        lines.append(f"_set({out}, '__pydantic_private__', None)")
        return out
    lines.append(f"{out} = {source}.copy()")
    if head is _FLAT:
        for key in plan[1]:
            lines.append(f"{out}[{key!r}] = {out}[{key!r}].copy()")
        return out
    for key, inner in plan:
        item = f"v{next(names)}"
        lines.append(f"{item} = {out}[{key!r}]")
        lines.append(f"{out}[{key!r}] = {_emit(item, inner, lines, constants, names)}")
    return out


def copy_result(result: CallToolResult) -> CallToolResult:
    """A private structural copy of an answer: new containers and models, immutable leaves shared."""
    copied = _copy_model(result)
    assert isinstance(copied, CallToolResult)
    return copied


@dataclass(frozen=True, slots=True)
class Decoded:
    """One answer held decoded, with the stored version it is the decoding of."""

    tag: str | None
    checksum: str
    size: int
    """The stored body's length: what the tier's bound counts, and what a hit reports as saved."""
    result: CallToolResult
    """Never handed out: every serve gets `copy()`."""
    pickled: bytes | None
    """For answers of many small values: the pickled answer, rebuilt on every serve instead."""
    server: str = ""
    """The server the answer came from, and the mark of its call (`CallIdentity.call_mark_key`): what an
    invalidation drops the held copy by, whatever its protocol era or arm."""
    call: str = ""
    answer: int = 0
    """The answer's bytes as sent (`EntryMeta.size`), when they differ from `size`: what a caller sharing
    the held answer is told it saved."""
    plan: Plan | None = None
    """Where the containers of the answer are, for answers copied structurally."""
    copier: Callable[[Any], Any] | None = None
    """The plan compiled (`_compiled`), once the answer is copied a second time and if the plan is small
    enough: compiling takes up to about 2 ms, which an answer served once (a miss of a new shape) should not
    pay. Set after construction (by `object.__setattr__`), as `copies` is."""
    copies: int = 0

    def copy(self) -> CallToolResult:
        if self.plan is not None:
            copier = self.copier
            if copier is None:
                copies = self.copies + 1
                _set_attribute(self, "copies", copies)
                if copies >= _COMPILE_AT:
                    plan = self.plan
                    copier = _compiled(plan) or (lambda value: _planned(value, plan))
                    _set_attribute(self, "copier", copier)
            copied = _planned(self.result, self.plan) if copier is None else copier(self.result)
            assert isinstance(copied, CallToolResult)
            return copied
        if self.pickled is not None:
            copied = pickle.loads(self.pickled)
            assert isinstance(copied, CallToolResult)
            return copied
        return copy_result(self.result)


def _many_small_values(body: bytes) -> bool:
    return len(body) >= 4096 and len(body) < _SMALL_NODES * (body.count(b",") + 1)


def hold(
    result: CallToolResult,
    body: bytes,
    tag: str | None,
    checksum: str,
    *,
    server: str = "",
    call: str = "",
    answer: int = 0,
) -> Decoded:
    """What the tier keeps for `result` (which the caller must not hand out afterwards), stored as `body`."""
    pickled = plan = None
    if type(result.structured_content) is dict and len(result.content) <= _FEW_BLOCKS:
        # Structured content (most answers, FastMCP's and the SDK's alike): its containers copied by a plan
        # made once, every string shared; the few models around it copied structurally.
        plan = _plan_of(result)
    elif _many_small_values(body):
        try:
            pickled = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # an answer holding something pickle cannot take: the structural copy serves it
            pickled = None
    return Decoded(tag, checksum, len(body), result, pickled, server, call, answer, plan)


class DecodedTier:
    """Decoded answers by store key, bounded by `max_bytes` of stored answer (0: holds nothing)."""

    def __init__(self, max_bytes: int) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"decoded_tier_bytes must be an int >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.bytes = 0
        self._held: OrderedDict[str, Decoded] = OrderedDict()
        self._read: dict[str, tuple[object, EntryMeta]] = {}
        """The stored metadata last parsed for a held answer, with what it parsed to (see `entry_of`)."""

    def __len__(self) -> int:
        return len(self._held)

    def holds(self, key: str) -> bool:
        return key in self._held

    def get(self, key: str, tag: str | None, checksum: str) -> Decoded | None:
        """The answer held for `key` if it is exactly the stored version (tag and checksum); a held answer
        of another version is dropped (the store has moved on)."""
        held = self._held.get(key)
        if held is None:
            return None
        if held.tag != tag or held.checksum != checksum or not checksum:
            self.discard(key)
            return None
        self._held.move_to_end(key)
        return held

    def entry_of(self, key: str, raw: object) -> EntryMeta | None:
        """`EntryMeta.from_json(raw)`, for the stored metadata of a held answer: parsed again only when it is
        not what was parsed last time (comparing two small dicts costs a fraction of checking every field)."""
        last = self._read.get(key)
        if last is not None and last[0] == raw:
            return last[1]
        entry = EntryMeta.from_json(raw)
        if entry is not None and key in self._held:
            self._read[key] = (raw, entry)
        return entry

    def size_of(self, key: str) -> int | None:
        """The bytes as sent of the answer held for `key`, if any (not counted as a use)."""
        held = self._held.get(key)
        return None if held is None else held.answer or held.size

    def admits(self, size: int) -> bool:
        """Whether an answer of `size` stored bytes would be kept (the tier is on and it fits)."""
        return 0 < size <= self.max_bytes

    def put(self, key: str, decoded: Decoded) -> None:
        self.discard(key)
        if decoded.size > self.max_bytes or not decoded.checksum:
            return
        self._held[key] = decoded
        self.bytes += decoded.size
        while self.bytes > self.max_bytes:
            gone, evicted = self._held.popitem(last=False)
            self._read.pop(gone, None)
            self.bytes -= evicted.size

    def discard(self, key: str) -> None:
        self._read.pop(key, None)
        held = self._held.pop(key, None)
        if held is not None:
            self.bytes -= held.size

    def discard_if(self, doomed: Callable[[Decoded], bool]) -> int:
        """Drop every held answer `doomed` picks; returns how many."""
        keys = [key for key, held in self._held.items() if doomed(held)]
        for key in keys:
            self.discard(key)
        return len(keys)

    def clear(self) -> None:
        self._held.clear()
        self._read.clear()
        self.bytes = 0
