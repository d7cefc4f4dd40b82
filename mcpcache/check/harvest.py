"""Arguments for a reading tool, found in what the server's listing tools answered (no I/O).

A server whose reading tools take a name (`read_notebook(notebook_name)`, `read_file(path)`) usually
has a tool that lists those names, and the check calls such tools anyway (they are read-only and need no
arguments). A required property is filled from their answers when a value of the right JSON type sits
under a key that names it:
- the same name, compared without case and punctuation (`path` <- `"path"`, `notebook_name` <- `"NotebookName"`);
- else its last word, when the words before it name the listing tool or the container it came from
  (`notebook_name` <- `"Name"` in the answer of `list_notebooks`).
The first such value wins, exact names before last words. The report says where each value came from,
so a wrong guess is visible; the user's `--args` and `--args-from` always come first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcpcache.check.selection import properties_of, schema_types

_WORDS = re.compile(r"[_\-\s.]+|(?<=[a-z0-9])(?=[A-Z])")


@dataclass(frozen=True)
class Found:
    value: object
    tool: str
    key: str

    def describe(self, prop: str) -> str:
        return f"{prop}={json.dumps(self.value)} (key {self.key!r} in the answer of {self.tool})"


def _norm(text: str) -> str:
    return "".join(char for char in text.lower() if char.isalnum())


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def _fits(value: object, kinds: set[str]) -> bool:
    if isinstance(value, bool):
        return not kinds or "boolean" in kinds
    if isinstance(value, int):
        return not kinds or bool(kinds & {"integer", "number"})
    if isinstance(value, float):
        return not kinds or "number" in kinds
    if isinstance(value, str):
        return bool(value) and (not kinds or "string" in kinds)
    return False


def _documents(result: Mapping[str, Any]) -> Iterator[object]:
    """What an answer says, as JSON: its structured content, and each text block that parses as JSON."""
    if result.get("structuredContent") is not None:
        yield result["structuredContent"]
    content = result.get("content")
    for block in content if isinstance(content, list) else []:
        text = block.get("text") if isinstance(block, Mapping) else None
        if isinstance(text, str) and text[:1] in "[{":
            try:
                yield json.loads(text)
            except ValueError:
                continue


def _scalars(value: object, within: tuple[str, ...] = ()) -> Iterator[tuple[str, object, tuple[str, ...]]]:
    """(key, scalar value, the keys of the containers around it), depth first, in the answer's order."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, Mapping | list):
                yield from _scalars(item, (*within, str(key)))
            else:
                yield str(key), item, within
    elif isinstance(value, list):
        for item in value:
            yield from _scalars(item, within)


def find_arguments(
    schema: object, missing: Sequence[str], answers: Sequence[tuple[str, Mapping[str, Any]]]
) -> dict[str, Found]:
    """Values for the `missing` properties of `schema`, from `answers` ((tool, result JSON), in the order
    they were received). A property with no value found is absent from the result."""
    properties = properties_of(schema)
    found: dict[str, Found] = {}
    for prop in missing:
        kinds = schema_types(properties.get(prop))
        words = [word for word in _WORDS.split(prop) if word]
        last, nouns = (_norm(words[-1]), [_singular(_norm(w)) for w in words[:-1]]) if words else ("", [])
        exact: Found | None = None
        by_last_word: Found | None = None
        for tool, result in answers:
            for document in _documents(result):
                for key, value, within in _scalars(document):
                    if not _fits(value, kinds):
                        continue
                    if exact is None and _norm(key) == _norm(prop):
                        exact = Found(value, tool, key)
                    elif by_last_word is None and nouns and _norm(key) == last:
                        where = _norm(tool) + " " + " ".join(_norm(name) for name in within)
                        if all(noun in where for noun in nouns):
                            by_last_word = Found(value, tool, key)
            if exact is not None:
                break
        if (choice := exact or by_last_word) is not None:
            found[prop] = choice
    return found
