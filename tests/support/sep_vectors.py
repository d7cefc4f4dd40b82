"""The inputs of the follow-up proposals' test vectors, and how each file is written with mcpcache's own
functions: `python tests/support/sep_vectors.py` rewrites them. tests/test_sep_vectors.py checks the files
are what mcpcache computes and that the rules each proposal states reproduce every expected output.

- docs/vectors/delta-ops.json (docs/seps/deltas.md): a base answer document, the ops of a delta in
  json-patch+splice/1, and the document they make with its digest, or null when the ops must be refused;
- docs/vectors/stale-serving.json (docs/seps/stale-serving.md): a cache block as sent, and the two windows a
  client reads from it (null: no window);
- docs/vectors/key-arguments.json (docs/seps/key-arguments.md): a tool's declaration and a call's
  arguments, and the arguments that name the answer as canonical JSON (every argument when the
  declaration is malformed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DELTA_OPS = ROOT / "docs" / "vectors" / "delta-ops.json"
STALE = ROOT / "docs" / "vectors" / "stale-serving.json"
KEY_ARGUMENTS = ROOT / "docs" / "vectors" / "key-arguments.json"

BASE = {
    "content": [{"type": "text", "text": "x = 1\nprint(x)"}],
    "structuredContent": {"kind": "cell", "source": "x = 1\nprint(x)", "outputs": []},
    "_meta": {"io.jupyter-mcp/cell_id": "c1"},
}

DELTAS: list[tuple[str, dict[str, Any], list[Any]]] = [
    (
        "a splice in the text and the same in structured content",
        BASE,
        [
            {"op": "splice", "path": "/content/0/text", "offset": 4, "remove": 1, "insert": "2"},
            {"op": "splice", "path": "/structuredContent/source", "offset": 4, "remove": 1, "insert": "2"},
        ],
    ),
    (
        "splice offsets count code points, not UTF-16 units or bytes",
        {"content": [{"type": "text", "text": "\U0001f600 caf\u00e9"}]},
        [{"op": "splice", "path": "/content/0/text", "offset": 2, "remove": 4, "insert": "th\u00e9"}],
    ),
    (
        "consecutive splices: each offset is into the string the previous one left",
        {"content": [{"type": "text", "text": "abcdef"}]},
        [
            {"op": "splice", "path": "/content/0/text", "offset": 0, "remove": 1, "insert": "XY"},
            {"op": "splice", "path": "/content/0/text", "offset": 3, "remove": 2, "insert": ""},
        ],
    ),
    (
        "RFC 6902 operations: add, replace, remove, move, copy, test",
        BASE,
        [
            {"op": "test", "path": "/structuredContent/kind", "value": "cell"},
            {"op": "add", "path": "/structuredContent/outputs/-", "value": {"text": "1\n"}},
            {"op": "replace", "path": "/_meta/io.jupyter-mcp~1cell_id", "value": "c2"},
            {"op": "copy", "from": "/structuredContent/outputs/0", "path": "/structuredContent/first"},
            {"op": "move", "from": "/structuredContent/first", "path": "/structuredContent/last"},
            {"op": "remove", "path": "/structuredContent/last"},
        ],
    ),
    (
        "a content block added and one removed",
        {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        [
            {"op": "remove", "path": "/content/0"},
            {"op": "add", "path": "/content/1", "value": {"type": "text", "text": "c"}},
        ],
    ),
    (
        "refused: a splice past the end of the string",
        BASE,
        [{"op": "splice", "path": "/content/0/text", "offset": 10, "remove": 10, "insert": ""}],
    ),
    (
        "refused: a failed test fails every op",
        BASE,
        [
            {"op": "replace", "path": "/structuredContent/kind", "value": "doc"},
            {"op": "test", "path": "/structuredContent/kind", "value": "cell"},
        ],
    ),
    ("refused: an op on a member that is not there", BASE, [{"op": "remove", "path": "/structuredContent/nope"}]),
    ("refused: an unknown op", BASE, [{"op": "rename", "path": "/content"}]),
    (
        "refused: the result is not an answer document",
        BASE,
        [{"op": "add", "path": "/isError", "value": True}],
    ),
]

BLOCKS: list[tuple[str, dict[str, Any]]] = [
    (
        "both windows",
        {"ttlMs": 5000, "cacheScope": "private", "staleWhileRevalidateMs": 30000, "staleIfErrorMs": 600000},
    ),
    ("no window: the block as before this proposal", {"ttlMs": 5000, "cacheScope": "private"}),
    ("zero says what absence says", {"ttlMs": 0, "staleWhileRevalidateMs": 0, "staleIfErrorMs": 0}),
    ("a negative window reads as 0: no window", {"ttlMs": 0, "staleIfErrorMs": -5}),
    ("a window above 24 hours is clamped to 24 hours", {"ttlMs": 0, "staleWhileRevalidateMs": 90000000}),
    ("a whole number written with a fraction is a whole number", {"ttlMs": 0, "staleIfErrorMs": 1000.0}),
    ("a fraction reads as absent", {"ttlMs": 0, "staleIfErrorMs": 1.5}),
    ("a string reads as absent", {"ttlMs": 0, "staleWhileRevalidateMs": "30000"}),
    ("a boolean reads as absent", {"ttlMs": 0, "staleIfErrorMs": True}),
    ("null reads as absent", {"ttlMs": 0, "staleIfErrorMs": None}),
]

DECLARATIONS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "ignoreArguments: the ignored argument leaves the key",
        {"ignoreArguments": ["request_id"]},
        {"path": "a.ipynb", "request_id": "r1"},
    ),
    (
        "ignoreArguments: an ignored argument sent or absent is one key",
        {"ignoreArguments": ["request_id"]},
        {"path": "a.ipynb"},
    ),
    ("keyArguments: only the named arguments", {"keyArguments": ["path"]}, {"path": "a.ipynb", "trace": True, "n": 3}),
    ("keyArguments: absent is not null", {"keyArguments": ["path"]}, {"path": None, "trace": True}),
    ("keyArguments: absent", {"keyArguments": ["path"]}, {"trace": True}),
    ("keyArguments []: every call has one answer", {"keyArguments": []}, {"path": "a.ipynb"}),
    (
        "top-level names only: nothing inside a value is left out",
        {"ignoreArguments": ["id"]},
        {"q": {"id": 1}, "id": 2},
    ),
    (
        "malformed: both fields",
        {"keyArguments": ["path"], "ignoreArguments": ["request_id"]},
        {"path": "a", "request_id": "r"},
    ),
    ("malformed: not an array", {"ignoreArguments": "request_id"}, {"path": "a", "request_id": "r"}),
    ("malformed: an empty name", {"ignoreArguments": [""]}, {"path": "a", "request_id": "r"}),
    ("malformed: a name that is not a string", {"keyArguments": ["path", 1]}, {"path": "a", "request_id": "r"}),
    ("malformed: more than 256 names", {"ignoreArguments": [f"a{i}" for i in range(257)]}, {"path": "a"}),
]


def build_deltas() -> dict[str, Any]:
    from mcpcache import delta
    from mcpcache.delta.spec import DeltaError
    from mcpcache.etag import answer_digest

    vectors = []
    for name, base, ops in DELTAS:
        try:
            result = delta.result_of(delta.apply(base, ops))
        except DeltaError:
            made: Any = None
            digest = None
        else:
            made = delta.document_of(result)
            digest = answer_digest(result.content, result.structured_content, result.meta)
        vectors.append({"name": name, "base": base, "ops": ops, "result": made, "digest": digest})
    return {
        "about": (
            "Test vectors for the delta format json-patch+splice/1 of docs/seps/deltas.md ('The ops'): ops "
            "applied to a private copy of the base answer document give 'result' (an answer document: content, "
            "structuredContent, _meta without the cache block) whose digest ('The digest') is 'digest'; null "
            "means the ops must be refused, and the client asks again in full."
        ),
        "format": delta.FORMAT,
        "deltas": vectors,
    }


def build_stale() -> dict[str, Any]:
    from mcpcache.protocol import META_KEY, parse_cache_block

    vectors = []
    for name, block in BLOCKS:
        read = parse_cache_block({META_KEY: block})
        assert read is not None
        vectors.append(
            {
                "name": name,
                "block": block,
                "staleWhileRevalidateMs": read.stale_while_revalidate_ms or None,
                "staleIfErrorMs": read.stale_if_error_ms or None,
            }
        )
    return {
        "about": (
            "Test vectors for the stale windows of docs/seps/stale-serving.md ('The stale windows'): the block as "
            "sent, and the window a client reads from it in milliseconds; null means no window (absent, 0 and "
            "malformed all mean no stale serving)."
        ),
        "blocks": vectors,
    }


def build_key_arguments() -> dict[str, Any]:
    from mcpcache.canonical import canonical_json
    from mcpcache.key_arguments import MalformedKeyArguments, key_arguments_of

    vectors = []
    for name, declaration, arguments in DECLARATIONS:
        found = key_arguments_of(declaration)
        malformed = isinstance(found, MalformedKeyArguments)
        named = arguments if found is None or isinstance(found, MalformedKeyArguments) else found.project(arguments)
        vectors.append(
            {
                "name": name,
                "declaration": declaration,
                "arguments": arguments,
                "malformed": malformed,
                "keyArguments": canonical_json(named).decode("utf-8"),
            }
        )
    return {
        "about": (
            "Test vectors for key arguments (docs/seps/key-arguments.md, 'The declaration'): a tool's declaration "
            "and a call's arguments; 'keyArguments' is the tag form (docs/extension.md, 'Canonical forms') of the "
            "arguments that name the answer, every argument when the declaration is malformed."
        ),
        "declarations": vectors,
    }


def files() -> dict[Path, dict[str, Any]]:
    return {DELTA_OPS: build_deltas(), STALE: build_stale(), KEY_ARGUMENTS: build_key_arguments()}


def write() -> None:
    for path, content in files().items():
        path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    write()
