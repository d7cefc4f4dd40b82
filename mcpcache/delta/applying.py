"""`apply`: replay a delta's ops on a private copy of the base document, bounded, or fail with DeltaError."""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

import mcpcache.delta.spec as spec
from mcpcache.canonical import CanonicalizationError
from mcpcache.delta.equality import json_equal, kind_of
from mcpcache.delta.spec import OPS, DeltaError, escape_token, shown
from mcpcache.etag import exact_json

_ESCAPE_RE: Final = re.compile(r"~(?![01])")

_INDEX_RE: Final = re.compile(r"0|[1-9][0-9]{0,17}")


def apply(doc: Any, ops: Any) -> dict[str, Any]:
    """The document `ops` turn `doc` into. `doc` is never changed; the result shares with it every
    container the ops do not touch. Raises DeltaError, and only DeltaError, for any ops that do not apply
    in full (see the module docstring for the format and the bounds)."""
    if not isinstance(ops, list):
        raise DeltaError(f"ops must be a JSON array, not {kind_of(ops)}")
    if len(ops) > spec.MAX_OPS:
        raise DeltaError(f"{len(ops)} ops is more than the {spec.MAX_OPS} a delta may hold")
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
        raise DeltaError(f"the ops leave {kind_of(result)}, not a document (an object)")
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
            where = f"op {index} ({name} {shown(op.get('path'))})"
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
                if not json_equal(self.get(path_tokens, where), expected):
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
                    raise DeltaError(f"{where}: {_pointer(tokens[:depth])} is {kind_of(child)}, not a container")
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
        where = f"op {first} (splice {shown(path)})"
        tokens = _tokens(path, where)
        node, key = self.slot(tokens, where)
        text = node[key]
        if type(text) is not str:
            raise DeltaError(f"{where}: the value there is {kind_of(text)}, not a string")
        pieces: list[str] = []
        cursor = built = 0  # text[:cursor] is consumed into pieces, which hold `built` code points
        for index in range(first, end):
            op = ops[index]
            where = f"op {index} (splice {shown(path)})"
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
        if self.inserted > spec.MAX_INSERTED_BYTES:
            raise DeltaError(f"{where}: the ops put in more than {spec.MAX_INSERTED_BYTES} bytes")

    def duplicate(self, value: Any, where: str) -> Any:
        """A new copy of a value (for `copy`), counted like a value the op carried."""
        try:
            data = orjson.dumps(value)
        except orjson.JSONEncodeError as exc:
            raise DeltaError(f"{where}: the value cannot be copied: {exc}") from None
        self.inserted += len(data)
        if self.inserted > spec.MAX_INSERTED_BYTES:
            raise DeltaError(f"{where}: the ops put in more than {spec.MAX_INSERTED_BYTES} bytes")
        return orjson.loads(data)

    def shift(self, units: int, where: str) -> None:
        self.rewritten += units
        if self.rewritten > spec.MAX_REWRITTEN:
            raise DeltaError(f"{where}: the ops rewrite more than {spec.MAX_REWRITTEN} elements and code points")


def _op_name(op: Any, index: int) -> str:
    if not isinstance(op, dict):
        raise DeltaError(f"op {index} is {kind_of(op)}, not an object")
    name = op.get("op")
    if not isinstance(name, str):
        raise DeltaError(f"op {index} has no 'op' member naming the operation")
    if name not in OPS:
        raise DeltaError(f"op {index}: unknown operation {shown(name)}")
    return name


def _is_splice_on(op: Any, path: str) -> bool:
    return isinstance(op, dict) and op.get("op") == "splice" and op.get("path") == path


def _member(op: dict[str, Any], name: str, kind: type, index: int, op_name: str) -> Any:
    if name not in op:
        raise DeltaError(f"op {index} ({op_name}) has no '{name}' member")
    value = op[name]
    if kind is not object and not isinstance(value, kind):
        raise DeltaError(f"op {index} ({op_name}): '{name}' must be a string, not {kind_of(value)}")
    return value


def _count_member(op: dict[str, Any], name: str, index: int) -> int:
    value = _member(op, name, object, index, "splice")
    if type(value) is not int or value < 0:
        raise DeltaError(f"op {index} (splice): '{name}' must be an integer >= 0, not {shown(value)}")
    return value


def _tokens(pointer: str, where: str) -> list[str]:
    """The reference tokens of a JSON Pointer (RFC 6901), unescaped."""
    if not pointer:
        return []
    if pointer[0] != "/":
        raise DeltaError(f"{where}: a JSON Pointer is empty or starts with '/', not {shown(pointer)}")
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
            raise DeltaError(f"{where}: {_pointer(above)} has no member {shown(token)}")
        return token
    if kind is list:
        return _index(node, token, where, above, allow_end=False)
    raise DeltaError(f"{where}: {_pointer(above)} is {kind_of(node)}, not a container")


def _index(node: list[Any], token: str, where: str, above: list[str], *, allow_end: bool) -> int:
    if not _INDEX_RE.fullmatch(token):
        raise DeltaError(f"{where}: {shown(token)} is not an array index in {_pointer(above)}")
    index = int(token)
    if index > len(node) or (index == len(node) and not allow_end):
        raise DeltaError(f"{where}: index {index} is out of range for {_pointer(above)} of {len(node)} elements")
    return index


def _pointer(tokens: list[str]) -> str:
    """A pointer for messages; the root reads as 'the document'."""
    if not tokens:
        return "the document"
    return shown("/" + "/".join(escape_token(token) for token in tokens))
