"""What changed between two answers, written for a model to read: the views of a re-read.

docs/references.md, "Re-reads". The delta engine (`mcpcache.delta.diff`) finds the change; this module
names it as a model reads the answer (`cells[3].source`, not `/cells/3/source`), with the new values
whole (a string edited in a few places is its new text, or for a long text, its changed lines), and
checks, before anything is shown, that applying what it wrote to the earlier answer gives exactly the
new one. A change it cannot write that way is no change view at all: the model gets the full view.

The changes, applied in order (each name as the changes before it left the answer):

- `{"set": NAME, "to": VALUE}`: NAME now holds VALUE (a member may be new).
- `{"insert": NAME, "value": VALUE}`: VALUE is inserted into a list at NAME's index; later items move up.
- `{"remove": NAME}`: NAME is removed (from a list: later items move down).
- `{"edit": NAME, "replace_lines": [{"from": A, "to": B, "with": TEXT}, ...]}`: in the text at NAME,
  lines A to B (counted from 1 in the text before this change, each line with its newline) become TEXT
  ("" deletes them). The ranges are in order and do not overlap.

A NAME starts with a member of the answer (`cells`, or `["odd key"]`), or with `result` when the view
shows the answer under `result`, and goes on with `.member`, `["any member"]` or `[index]`.

Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Final

from mcpcache.delta import diff
from mcpcache.delta.equality import same
from mcpcache.refs.uri import UriError, parse_pointer
from mcpcache.refs.view import RESULT_FIELD, shown_whole

Change = dict[str, Any]
Step = str | int

LINES_FROM: Final = 512
"""A changed string at least this long, with newlines, is shown as its changed lines when that is less
than half of it; a shorter one as its whole new text."""

_IDENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_STEP: Final = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(0|[1-9][0-9]*)\]|\[(\"(?:[^\"\\]|\\.)*\")\]")


class ChangeError(ValueError):
    """Changes that do not apply to the value they are applied to."""


def name_of(steps: list[Step], wrapped: bool) -> str:
    out = RESULT_FIELD if wrapped else ""
    for step in steps:
        if isinstance(step, int):
            out += f"[{step}]"
        elif _IDENT.fullmatch(step):
            out += f".{step}" if out else step
        else:
            out += "[" + json.dumps(step, ensure_ascii=False) + "]"
    return out


def parse_name(name: str, wrapped: bool) -> list[Step]:
    """The steps a NAME stands for: a str is an object's member, an int a list's index."""
    if not isinstance(name, str):
        raise ChangeError("a name is a string")
    if wrapped:
        if not name.startswith(RESULT_FIELD):
            raise ChangeError(f"a name starts with {RESULT_FIELD}")
        rest = name[len(RESULT_FIELD) :]
    else:
        head = _IDENT.match(name)
        rest = "." + name if head else name
    steps: list[Step] = []
    at = 0
    while at < len(rest):
        found = _NAME_STEP.match(rest, at)
        if found is None:
            raise ChangeError(f"cannot read the name {name[:80]!r}")
        member, index, quoted = found.groups()
        if member is not None:
            steps.append(member)
        elif index is not None:
            steps.append(int(index))
        else:
            steps.append(json.loads(quoted))
        at = found.end()
    if not steps and not wrapped:
        raise ChangeError("a name names a member of the answer")
    return steps


class _Working:
    """A value changed in place without touching the one it started from: each container on the way to a
    change is copied once (shallowly), everything else stays shared."""

    def __init__(self, value: Any) -> None:
        self.holder: list[Any] = [value]
        self.owned: dict[int, Any] = {id(self.holder): self.holder}
        """The copies made, by id (held here too, so no id is reused while this lives)."""

    @property
    def value(self) -> Any:
        return self.holder[0]

    def _own(self, parent: Any, key: Step) -> Any:
        child = parent[0] if parent is self.holder else _member(parent, key)
        if not isinstance(child, dict | list):
            raise ChangeError("a name steps into a value that is not a list or an object")
        if id(child) not in self.owned:
            child = dict(child) if isinstance(child, dict) else list(child)
            parent[key] = child
            self.owned[id(child)] = child
        return child

    def parent(self, steps: list[Step]) -> tuple[Any, Step]:
        """The container holding the last step (copied, as is the path to it), and that step."""
        container: Any = self.holder
        key: Step = 0
        for step in steps:
            container = self._own(container, key)
            key = step
        return container, key

    def get(self, steps: list[Step]) -> Any:
        value = self.holder[0]
        for step in steps:
            value = _member(value, step)
        return value

    def apply(self, change: Change, wrapped: bool) -> None:
        if not isinstance(change, dict):
            raise ChangeError("a change is an object")
        if "set" in change:
            parent, key = self.parent(parse_name(change["set"], wrapped))
            if isinstance(parent, list):
                _index(parent, key, len(parent))
            elif not isinstance(key, str):
                raise ChangeError("an object's member is named by a string")
            parent[key] = change["to"]
        elif "insert" in change:
            parent, key = self.parent(parse_name(change["insert"], wrapped))
            if not isinstance(parent, list) or parent is self.holder:
                raise ChangeError("insert names a place in a list")
            parent.insert(_index(parent, key, len(parent) + 1), change["value"])
        elif "remove" in change:
            parent, key = self.parent(parse_name(change["remove"], wrapped))
            if parent is self.holder:
                raise ChangeError("the whole answer cannot be removed")
            if isinstance(parent, list):
                del parent[_index(parent, key, len(parent))]
            elif isinstance(key, str) and key in parent:
                del parent[key]
            else:
                raise ChangeError(f"no member {key!r} to remove")
        elif "edit" in change:
            parent, key = self.parent(parse_name(change["edit"], wrapped))
            text = _member(parent, key) if parent is not self.holder else parent[0]
            if not isinstance(text, str):
                raise ChangeError("edit names a text")
            parent[key if parent is not self.holder else 0] = replace_lines(text, change["replace_lines"])
        else:
            raise ChangeError("a change is set, insert, remove or edit")


def _member(value: Any, step: Step) -> Any:
    if isinstance(value, list) and isinstance(step, int) and 0 <= step < len(value):
        return value[step]
    if isinstance(value, dict) and isinstance(step, str) and step in value:
        return value[step]
    raise ChangeError(f"no {step!r} here")


def _index(items: list[Any], key: Step, bound: int) -> int:
    if not isinstance(key, int) or not 0 <= key < bound:
        raise ChangeError(f"no index {key!r} in a list of {len(items)}")
    return key


def _lines(text: str) -> list[str]:
    """Lines split at "\\n" only, each keeping its newline (str.splitlines also splits at \\r, \\x0b, ...)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def replace_lines(text: str, hunks: Any) -> str:
    """`text` with each hunk's lines (numbered in `text`, from 1) replaced by its text."""
    if not isinstance(hunks, list) or not hunks:
        raise ChangeError("replace_lines is a non-empty list")
    lines = _lines(text)
    out: list[str] = []
    done = 0
    for hunk in hunks:
        first, last, new = (hunk.get("from"), hunk.get("to"), hunk.get("with")) if isinstance(hunk, dict) else (0, 0, 0)
        if not (isinstance(first, int) and isinstance(last, int) and isinstance(new, str)):
            raise ChangeError("a line range has from, to (line numbers) and with (text)")
        if not done < first <= last <= len(lines):
            raise ChangeError(f"lines {first}-{last} are not in order within the text's {len(lines)} lines")
        out.extend(lines[done : first - 1])
        out.append(new)
        done = last
    out.extend(lines[done:])
    return "".join(out)


def _hunks(old: str, new: str, splices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The changed lines of `old` (whole lines, merged where they touch) and their text in `new`, from the
    splices that turn one into the other (each offset into the text as the splices before it left it)."""
    regions: list[list[int]] = []  # [start, end, shift before, shift after] in `old`'s characters
    shift = 0
    for splice in splices:
        at = splice["offset"] - shift  # where the splice starts in `old`
        removed = splice["remove"]
        last = min(at + removed - 1 if removed else at, len(old) - 1)  # the last character it touches
        start = old.rfind("\n", 0, min(at, last)) + 1
        newline = old.find("\n", last)
        end = newline + 1 if newline >= 0 else len(old)
        grown = len(splice["insert"]) - removed
        if regions and start <= regions[-1][1]:
            regions[-1][1] = max(regions[-1][1], end)
            regions[-1][3] += grown
        else:
            regions.append([start, end, shift, shift + grown])
        shift += grown
    hunks = []
    for start, end, before, after in regions:
        first = old.count("\n", 0, start) + 1
        hunks.append(
            {"from": first, "to": first + len(_lines(old[start:end])) - 1, "with": new[start + before : end + after]}
        )
    return hunks


def _typed(working: _Working, pointer: str) -> list[Step]:
    """The steps of a JSON pointer into the working value: a token into a list is an index."""
    steps: list[Step] = []
    value = working.value
    for token in parse_pointer(pointer):
        if isinstance(value, list):
            index = len(value) if token == "-" else int(token)
            steps.append(index)
            value = value[index] if 0 <= index < len(value) else None
        else:
            steps.append(token)
            value = value.get(token) if isinstance(value, dict) else None
    return steps


def _groups(ops: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Each op alone, except consecutive splices of one string, together."""
    run: list[dict[str, Any]] = []
    for op in ops:
        if op.get("op") == "splice" and run and run[0].get("path") == op.get("path"):
            run.append(op)
            continue
        if run:
            yield run
        run = [op]
    if run:
        yield run


def describe(old: Any, new: Any, *, max_bytes: int) -> list[Change] | None:
    """The changes that turn payload `old` into payload `new`, as a model reads them; None when the
    engine's ops would pass `max_bytes`, when the answer changed as a whole (its kind, or how a view shows
    it), or when what is written does not give back `new` exactly. Both are decoded JSON."""
    wrapped = shown_whole(old)
    if wrapped != shown_whole(new):
        return None  # list to object, or an object gaining a `result` member: the view's shape itself changed
    ops = diff(old, new, max_bytes=max_bytes)
    if ops is None:
        return None
    working = _Working(old)
    changes: list[Change] = []
    try:
        for group in _groups(ops):
            first = group[0]
            kind = first["op"]
            steps = _typed(working, first["path"])
            if not steps and not wrapped:
                return None
            name = name_of(steps, wrapped)
            batch: list[Change]
            if kind == "splice":
                batch = [_edited(working.get(steps), group, name)]
            elif kind == "replace":
                batch = [{"set": name, "to": first["value"]}]
            elif kind == "add":
                parent, _ = working.parent(steps)
                into_list = isinstance(parent, list) and parent is not working.holder
                batch = [
                    {"insert": name, "value": first["value"]} if into_list else {"set": name, "to": first["value"]}
                ]
            elif kind == "remove":
                batch = [{"remove": name}]
            elif kind == "move":
                source = _typed(working, first["from"])
                value = working.get(source)
                removal: Change = {"remove": name_of(source, wrapped)}
                working.apply(removal, wrapped)
                changes.append(removal)
                batch = [{"insert": name_of(_typed(working, first["path"]), wrapped), "value": value}]
            else:
                return None  # nothing else is emitted by `diff`
            for change in batch:
                working.apply(change, wrapped)
                changes.append(change)
    except (ChangeError, UriError, KeyError, TypeError, IndexError, ValueError, AttributeError):
        return None
    return changes if same(working.value, new) else None


def _edited(before: Any, splices: list[dict[str, Any]], name: str) -> Change:
    """The change a run of splices makes to one string: its new text, or for a long text its changed lines."""
    if not isinstance(before, str):
        raise ChangeError("a splice names a text")
    text = before
    for splice in splices:
        offset, removed = splice["offset"], splice["remove"]
        text = text[:offset] + splice["insert"] + text[offset + removed :]
    if len(text) >= LINES_FROM and before and "\n" in before:
        hunks = _hunks(before, text, splices)
        if 2 * sum(len(hunk["with"]) + 24 for hunk in hunks) < len(text):
            return {"edit": name, "replace_lines": hunks}
    return {"set": name, "to": text}


def apply_changes(value: Any, changes: list[Change]) -> Any:
    """`value` (a payload) with `changes` applied in order, as a model would; `value` itself is unchanged.
    Raises ChangeError when they do not apply."""
    working = _Working(value)
    wrapped = shown_whole(value)
    if not isinstance(changes, list):
        raise ChangeError("changes are a list")
    for change in changes:
        working.apply(change, wrapped)
    return working.value
