"""The follow-up proposals' test vectors (docs/vectors/delta-ops.json, stale-serving.json, key-arguments.json):
each file is what mcpcache computes (`python tests/support/sep_vectors.py` rewrites them), and each expected
output is reproduced by a few lines written here from the proposal's text alone, without mcpcache's code, so
that the text stands for the code."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from support import second_canonical as second
from support.sep_vectors import files

LOADED = {path: json.loads(path.read_text(encoding="utf-8")) for path in files()}
DELTAS = next(content for path, content in LOADED.items() if path.name == "delta-ops.json")
STALE = next(content for path, content in LOADED.items() if path.name == "stale-serving.json")
KEYS = next(content for path, content in LOADED.items() if path.name == "key-arguments.json")


def test_the_vector_files_are_what_mcpcache_computes() -> None:
    assert {path: content for path, content in files().items()} == LOADED, (
        "regenerate with: python tests/support/sep_vectors.py"
    )


# -- delta ops, from docs/seps/deltas.md alone ------------------------------------------------------------


def _apply_from_the_text(document: dict[str, Any], ops: list[Any]) -> dict[str, Any] | None:
    """RFC 6902 for the six operations (python-json-patch, an independent implementation), splices by code
    point on the string as the previous op left it; the result must be a document of an answer."""
    current = copy.deepcopy(document)
    try:
        for op in ops:
            if op.get("op") == "splice":
                pointer = jsonpatch.JsonPointer(op["path"])
                old = pointer.resolve(current)
                offset, remove, insert = op["offset"], op["remove"], op["insert"]
                if not isinstance(old, str) or offset + remove > len(old):
                    return None
                current = jsonpatch.apply_patch(
                    current,
                    [{"op": "replace", "path": op["path"], "value": old[:offset] + insert + old[offset + remove :]}],
                )
            else:
                current = jsonpatch.apply_patch(current, [op])
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, KeyError, TypeError):
        return None
    if not isinstance(current, dict) or not set(current) <= {"content", "structuredContent", "_meta"}:
        return None
    return current


@pytest.mark.parametrize("vector", DELTAS["deltas"], ids=lambda vector: vector["name"])
def test_each_delta_vector_follows_from_the_text(vector: dict[str, Any]) -> None:
    made = _apply_from_the_text(vector["base"], vector["ops"])
    assert made == vector["result"]
    if made is None:
        assert vector["name"].startswith("refused: ")
        return
    assert second.digest(made) == vector["digest"]


def test_the_delta_vectors_cover_the_cases_the_text_singles_out() -> None:
    names = " ".join(v["name"] for v in DELTAS["deltas"])
    for words in ("code points", "consecutive splices", "RFC 6902", "block added", "refused"):
        assert words in names
    assert sum(v["result"] is None for v in DELTAS["deltas"]) >= 4


# -- stale windows ----------------------------------------------------------------------------------------

DAY_MS = 24 * 60 * 60 * 1000


def _window_from_the_text(value: object) -> int | None:
    """A whole number of milliseconds, clamped to 0 .. 24 h; anything else (and 0) is no window."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        return None
    return min(max(int(value), 0), DAY_MS) or None


@pytest.mark.parametrize("vector", STALE["blocks"], ids=lambda vector: vector["name"])
def test_each_stale_window_vector_follows_from_the_text(vector: dict[str, Any]) -> None:
    block = vector["block"]
    for name in ("staleWhileRevalidateMs", "staleIfErrorMs"):
        assert _window_from_the_text(block.get(name)) == vector[name], name


# -- key arguments ----------------------------------------------------------------------------------------


def _key_from_the_text(declaration: dict[str, Any], arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    def names(field: str) -> list[str] | None:
        value = declaration.get(field)
        if not isinstance(value, list) or len(value) > 256 or not all(isinstance(n, str) and n for n in value):
            return None
        return value

    if "keyArguments" in declaration and "ignoreArguments" in declaration:
        return True, arguments
    if "keyArguments" in declaration:
        kept = names("keyArguments")
        return (True, arguments) if kept is None else (False, {k: v for k, v in arguments.items() if k in kept})
    dropped = names("ignoreArguments")
    return (True, arguments) if dropped is None else (False, {k: v for k, v in arguments.items() if k not in dropped})


@pytest.mark.parametrize("vector", KEYS["declarations"], ids=lambda vector: vector["name"])
def test_each_key_arguments_vector_follows_from_the_text(vector: dict[str, Any]) -> None:
    malformed, named = _key_from_the_text(vector["declaration"], vector["arguments"])
    assert malformed is vector["malformed"]
    assert second.canonical(named, "tag").decode("utf-8") == vector["keyArguments"]


def test_every_vector_file_says_what_it_is() -> None:
    for path, content in LOADED.items():
        assert isinstance(path, Path)
        assert "docs/seps/" in content["about"], path
