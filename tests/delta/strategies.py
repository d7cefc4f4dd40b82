"""Hypothesis strategies for delta tests: JSON-like answers and the edits real answers go through.

Strings mix ASCII with characters of every UTF-8 width, astral-plane ones included (a code point that is
two UTF-16 units), and the characters JSON and JSON Pointer escape. Scalars include the pairs Python's
`==` holds equal and JSON does not (1, 1.0 and true; 0.0 and -0.0), because a delta must tell them apart.
Edits are drawn at a random place in the document: array elements inserted, deleted, moved or changed;
strings grown, cut or edited in the middle, in several places at once; members added, removed or renamed;
a value replaced by one of another type.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import strategies as st

CHARACTERS = st.sampled_from(
    [*"abcdefgh   \n\t", '"', "\\", "/", "~", "0", "1", "é", "ß", "€", "中", "😀", "𝄞", "\u200d", "\x00", "\x7f"]
)
WORDS = ("the", "cell", "plot", "é", "naïve", "中文", "😀", "𝄞", "x", "=", "~1", "/", '"', "\\n", "\n", "  ")

short_text = st.text(CHARACTERS, max_size=12)


@st.composite
def long_text(draw: st.DrawFn, max_words: int = 400) -> str:
    """Text long enough for splices (hundreds of code points), made of words so edits keep some shared."""
    words = draw(st.lists(st.sampled_from(WORDS), min_size=0, max_size=max_words))
    return " ".join(words)


texts = short_text | long_text()

scalars = (
    st.none()
    | st.booleans()
    | st.sampled_from([0, 1, -1, 0.0, -0.0, 1.0, 2**63 - 1, -(2**63), 2**64 - 1, 1e308, 5e-324])
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)

keys = st.text(CHARACTERS, max_size=6)

json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(keys, children, max_size=6),
    max_leaves=25,
)

content_blocks = st.lists(
    st.one_of(
        st.builds(lambda text: {"type": "text", "text": text}, texts),
        st.builds(
            lambda data: {"type": "image", "data": data, "mimeType": "image/png"},
            st.text("ABCDEFGHabcdefgh0123456789+/", max_size=300),
        ),
    ),
    max_size=3,
)


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """An answer's document: content blocks, maybe structured content, maybe _meta."""
    document: dict[str, Any] = {"content": draw(content_blocks)}
    if draw(st.booleans()):
        document["structuredContent"] = draw(st.dictionaries(keys, json_values, max_size=6))
    if draw(st.booleans()):
        document["_meta"] = draw(st.dictionaries(st.sampled_from(["a/b", "x~y", "k"]), json_values, max_size=2))
    return document


# Edits --------------------------------------------------------------------------------------------


def _edit_string(draw: st.DrawFn, text: str) -> str:
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["insert", "delete", "replace", "append", "cut", "prepend"]))
        at = draw(st.integers(0, len(text)))
        if kind == "insert":
            text = text[:at] + draw(texts) + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + draw(st.integers(0, 50)) :]
        elif kind == "replace":
            text = text[:at] + draw(short_text) + text[at + draw(st.integers(0, 10)) :]
        elif kind == "append":
            text += draw(texts)
        elif kind == "prepend":
            text = draw(short_text) + text
        else:
            text = text[:at]
    return text


def _other_type(draw: st.DrawFn, value: Any) -> Any:
    """A value of another JSON type; for scalars, often one Python's == holds equal to it."""
    if isinstance(value, bool):
        return draw(st.sampled_from([int(value), float(value), str(value).lower()]))
    if isinstance(value, int) and value in (0, 1):
        return draw(st.sampled_from([bool(value), float(value)]))
    if isinstance(value, float) and value == 0.0:
        return draw(st.sampled_from([-value, 0, False]))
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, list):
        return {str(index): item for index, item in enumerate(value)}
    if isinstance(value, dict):
        return list(value.values())
    return draw(json_values.filter(lambda new: type(new) is not type(value)))


def _edit(draw: st.DrawFn, value: Any) -> Any:
    """`value` with one edit somewhere inside it (a new value; `value` itself is not changed)."""
    descend = draw(st.booleans())
    if isinstance(value, list):
        if value and descend:
            at = draw(st.integers(0, len(value) - 1))
            return [*value[:at], _edit(draw, value[at]), *value[at + 1 :]]
        kind = draw(st.sampled_from(["insert", "delete", "move", "change", "type"]))
        edited = list(value)
        if kind == "insert" or not edited:
            edited.insert(draw(st.integers(0, len(edited))), draw(json_values))
        elif kind == "delete":
            del edited[draw(st.integers(0, len(edited) - 1))]
        elif kind == "move":
            moved = edited.pop(draw(st.integers(0, len(edited) - 1)))
            edited.insert(draw(st.integers(0, len(edited))), moved)
        elif kind == "change":
            at = draw(st.integers(0, len(edited) - 1))
            edited[at] = draw(json_values)
        else:
            return _other_type(draw, value)
        return edited
    if isinstance(value, dict):
        if value and descend:
            key = draw(st.sampled_from(sorted(value)))
            return {**value, key: _edit(draw, value[key])}
        kind = draw(st.sampled_from(["add", "remove", "rename", "type"]))
        edited = dict(value)
        if kind == "add" or not edited:
            edited[draw(keys)] = draw(json_values)
        elif kind == "remove":
            del edited[draw(st.sampled_from(sorted(edited)))]
        elif kind == "rename":
            key = draw(st.sampled_from(sorted(edited)))
            edited[key + draw(keys.filter(bool))] = edited.pop(key)
        else:
            return _other_type(draw, value)
        return edited
    if isinstance(value, str) and draw(st.integers(0, 4)):
        return _edit_string(draw, value)
    return _other_type(draw, value)


@st.composite
def edited_pairs(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A document and the same document after one to four edits (content blocks added and removed too)."""
    old = draw(documents())
    new = copy.deepcopy(old)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["anywhere", "anywhere", "block added", "block removed"]))
        if kind == "block added":
            blocks = draw(content_blocks.filter(bool))
            at = draw(st.integers(0, len(new["content"])))
            new["content"][at:at] = blocks[:1]
        elif kind == "block removed" and new["content"]:
            del new["content"][draw(st.integers(0, len(new["content"]) - 1))]
        else:
            edited = _edit(draw, new)
            # The root stays a document: an edit that turned it into something else is dropped.
            if isinstance(edited, dict) and isinstance(edited.get("content"), list):
                new = edited
    return old, new


# Notebooks ----------------------------------------------------------------------------------------


@st.composite
def cells(draw: st.DrawFn) -> dict[str, Any]:
    cell: dict[str, Any] = {
        "id": draw(st.text("abcdef0123456789", min_size=8, max_size=8)),
        "cell_type": draw(st.sampled_from(["code", "markdown"])),
        "source": draw(long_text(max_words=60)),
    }
    if cell["cell_type"] == "code":
        cell["execution_count"] = draw(st.none() | st.integers(1, 200))
        cell["outputs"] = draw(
            st.lists(
                st.builds(lambda text: {"output_type": "stream", "text": text}, long_text(max_words=40)), max_size=2
            )
        )
    return cell


def notebook_answer(notebook_cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The document of a read_notebook-like answer, as FastMCP sends it: the structured content, and the
    same JSON as text. Cells carry their index, so inserting one renumbers every cell after it."""
    numbered = [{"index": index, **cell} for index, cell in enumerate(notebook_cells)]
    structured = {"kind": "notebook.read", "cell_count": len(numbered), "cells": numbered}
    return {"content": [{"type": "text", "text": orjson.dumps(structured).decode()}], "structuredContent": structured}


@st.composite
def notebook_pairs(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A notebook answer before and after one to three cell edits: inserted, deleted, moved, changed."""
    before = draw(st.lists(cells(), min_size=1, max_size=12))
    after = copy.deepcopy(before)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["insert", "delete", "move", "source", "outputs"]))
        if kind == "insert" or not after:
            after.insert(draw(st.integers(0, len(after))), draw(cells()))
            continue
        at = draw(st.integers(0, len(after) - 1))
        if kind == "delete":
            del after[at]
        elif kind == "move":
            after.insert(draw(st.integers(0, len(after) - 1)), after.pop(at))
        elif kind == "source":
            after[at]["source"] = _edit_string(draw, after[at]["source"])
        else:
            after[at]["outputs"] = draw(
                st.lists(st.builds(lambda text: {"output_type": "stream", "text": text}, texts))
            )
    return notebook_answer(before), notebook_answer(after)


# Tables -------------------------------------------------------------------------------------------

row_values = st.one_of(st.sampled_from([0, 1, 0.0, -0.0, 1.0, True, False, None]), st.integers(-5, 5), short_text)


@st.composite
def rows(draw: st.DrawFn) -> dict[str, Any]:
    return {key: draw(row_values) for key in ("id", "name", "v", "ok")}


@st.composite
def table_pairs(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A table answer (rows of small values, the shape compared by serialized bytes) before and after:
    rows inserted, deleted or changed (often to a value Python's == holds equal), or a row's members
    reordered (equal JSON, different bytes)."""
    before = draw(st.lists(rows(), min_size=16, max_size=60))
    after = copy.deepcopy(before)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["insert", "delete", "change", "retype", "reorder"]))
        at = draw(st.integers(0, len(after) - 1))
        if kind == "insert":
            after.insert(at, draw(rows()))
        elif kind == "delete" and len(after) > 1:
            del after[at]
        elif kind == "change":
            after[at][draw(st.sampled_from(sorted(after[at])))] = draw(row_values)
        elif kind == "retype":
            key = draw(st.sampled_from(sorted(after[at])))
            after[at][key] = _other_type(draw, after[at][key])
        else:
            after[at] = dict(reversed(list(after[at].items())))

    def answer(table: list[dict[str, Any]]) -> dict[str, Any]:
        return {"content": [], "structuredContent": {"rows": table}}

    return answer(before), answer(after)
