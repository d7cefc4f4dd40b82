"""The inputs of docs/vectors/canonical.json, and how the file is written from them with mcpcache's own
functions: `python tests/support/vectors.py` rewrites it. tests/test_canonical.py checks that both
implementations (mcpcache's and tests/support/second_canonical.py) reproduce every expected output.

Inputs are JSON text, so that `1` and `1.0` stay apart and every escape is explicit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "docs" / "vectors" / "canonical.json"

VALUES: list[tuple[str, str]] = [
    ("literals", "[null,true,false]"),
    ("array order is kept", "[3,1,2]"),
    ("empty containers", '{"b":[],"a":{}}'),
    ("nested objects sort at every depth", '{"z":{"y":[3,{"b":null,"a":true}],"x":[]},"a":{"d":1,"c":2}}'),
    ("keys compare by character, upper case first", '{"b":1,"a":2,"B":3,"aa":4,"a b":5}'),
    ("keys beyond the BMP: the two forms differ", '{"\\uffff":1,"\\ud83d\\ude00":2,"\\u00e9":3,"z":4}'),
    ("integers", "[0,-1,42,9007199254740991,-9007199254740991]"),
    ("integer 2^53+1: tag form only", "9007199254740993"),
    ("integer 2^64-1: tag form only", "18446744073709551615"),
    ("integer -2^63: tag form only", "-9223372036854775808"),
    ("integer 2^64: no form", "18446744073709551616"),
    ("integer -2^63-1: no form", "-9223372036854775809"),
    ("whole floats", "[1.0,-1.0,100.0,0.0,-0.0,1e15,1e16,1e21,1e22]"),
    ("fractions", "[0.1,0.30000000000000004,-12.5,3.14159,123456.789,2.5e-8]"),
    ("small floats around the switch to exponents", "[1e-4,1e-5,1.5e-5,1e-6,1.5e-6,1e-7]"),
    ("large floats around the switch to exponents", "[999999999999999.9,1e16,1.2345678901234568e20,1e21]"),
    ("extremes", "[5e-324,2.2250738585072014e-308,1.7976931348623157e308,-1.7976931348623157e308]"),
    ("shortest digits", "[0.1,0.2,0.7,1.1,9007199254740993.0,4.35,0.000001]"),
    ("shortest digits below a power of two, and a tie broken to even", "[5.960464477539063e-8,999999999999999.8]"),
    ("strings: short escapes", '"quote \\" backslash \\\\ b\\b t\\t n\\n f\\f r\\r"'),
    ("strings: other control characters", '"\\u0000\\u0001\\u001f"'),
    ("strings: left as they are", '"/ \\u007f \\u2028 \\u00e9 \\u20ac \\ud83d\\ude00 \\ufeff"'),
    ("string with an unpaired surrogate: no form", '"\\ud800"'),
    ("non-ASCII in keys and values", '{"na\\u00efve":"caf\\u00e9","\\u65e5\\u672c":"\\u8a9e"}'),
    ("duplicate member names: the last one wins", '{"a":1,"b":2,"a":3}'),
    ("nested 100 levels deep: the deepest with a form", "[" * 99 + "{}" + "]" * 99),
    ("nested 101 levels deep: no form", "[" * 100 + "{}" + "]" * 100),
    (
        "an answer document nested 101 levels deep (the document is level 1): no form",
        '{"content":[],"meta":null,"structuredContent":' + "[" * 99 + "{}" + "]" * 99 + "}",
    ),
]

ANSWERS: list[tuple[str, dict[str, Any] | str]] = [
    (
        "read_cell with a _meta key of its own (docs/protocol.md section 2)",
        {
            "content": [{"type": "text", "text": "x = 1"}],
            "structuredContent": {"kind": "cell"},
            "_meta": {
                "io.jupyter-mcp/cell_id": "c1",
                "io.modelcontextprotocol/cache": {"ttlMs": 5000, "cacheScope": "private"},
            },
        },
    ),
    (
        "the same answer without _meta",
        {"content": [{"type": "text", "text": "x = 1"}], "structuredContent": {"kind": "cell"}},
    ),
    (
        "text only, no structured content",
        {"content": [{"type": "text", "text": "line one\nline two\t\u00e9\u20ac\U0001f600"}]},
    ),
    (
        "floats, nesting and non-ASCII",
        {
            "content": [{"type": "text", "text": '{"rows": 2}'}],
            "structuredContent": {
                "kind": "table",
                "columns": ["na\u00efve", "\u65e5\u672c"],
                "rows": [[1, 1.0, 0.5, 1e-7], [-0.0, 1e21, 123.456, None]],
                "stats": {"mean": 0.30000000000000004, "n": 4},
            },
        },
    ),
    (
        "an integer beyond 2^53: a tag, but no digest",
        {"content": [], "structuredContent": {"kind": "id", "id": 9007199254740993}},
    ),
    (
        "an image block with annotations",
        {
            "content": [
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png", "annotations": {"priority": 0.5}},
                {"type": "text", "text": "caption"},
            ],
            "structuredContent": {"kind": "figure"},
            "_meta": {"example.com/rev": 3},
        },
    ),
    (
        "as received on 2026-07-28: serverInfo is outside the tag and the digest",
        {
            "content": [{"type": "text", "text": "x = 1"}],
            "structuredContent": {"kind": "cell"},
            "_meta": {
                "io.jupyter-mcp/cell_id": "c1",
                "io.modelcontextprotocol/cache": {"ttlMs": 5000, "cacheScope": "private"},
                "io.modelcontextprotocol/serverInfo": {"name": "Jupyter MCP Server", "version": "2.2.4"},
            },
        },
    ),
    (
        "duplicate member names in the JSON text: the last one wins",
        '{"content": [{"type": "text", "text": "old", "text": "x = 1"}], "structuredContent": {"kind": "cell"}, '
        '"_meta": {"io.jupyter-mcp/cell_id": "c0", "io.jupyter-mcp/cell_id": "c1"}}',
    ),
    (
        "structured content nested so that the document is 100 levels deep: the deepest with a tag",
        {"content": [], "structuredContent": {"kind": "deep", "rows": json.loads("[" * 97 + "{}" + "]" * 97)}},
    ),
]

DROPPED = ("io.modelcontextprotocol/cache", "io.modelcontextprotocol/serverInfo")
"""The `_meta` keys outside the answer document: the cache block and the SDK's serverInfo."""


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8")


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


def build() -> dict[str, Any]:
    """The whole file, computed with mcpcache's own functions."""
    from mcpcache.canonical import CanonicalizationError, canonical_json, jcs
    from mcpcache.etag import answer_digest, content_tag

    def attempt(make: Any, value: Any) -> Any:
        try:
            return make(value)
        except CanonicalizationError:
            return None

    values = []
    for name, text in VALUES:
        value = json.loads(text)
        tag_bytes, digest_bytes = attempt(canonical_json, value), attempt(jcs, value)
        values.append(
            {
                "name": name,
                "json": text,
                "tagForm": _text(tag_bytes),
                "tagFormHex": _hex(tag_bytes),
                "digestForm": _text(digest_bytes),
                "digestFormHex": _hex(digest_bytes),
            }
        )
    answers = []
    for name, given in ANSWERS:
        # An answer given as text is kept as written (duplicate names survive only in text).
        text = given if isinstance(given, str) else json.dumps(given, ensure_ascii=False)
        result = json.loads(text)
        meta = result.get("_meta")
        content, structured = result.get("content", []), result.get("structuredContent")
        document = {
            "content": content,
            "meta": {k: v for k, v in (meta or {}).items() if k not in DROPPED} or None,
            "structuredContent": structured,
        }
        answers.append(
            {
                "name": name,
                "result": text,
                "tagForm": _text(canonical_json(document)),
                "tag": content_tag(content, structured, meta),
                "digestForm": _text(attempt(jcs, document)),
                "digest": attempt(lambda parts: answer_digest(*parts), (content, structured, meta)),
            }
        )
    return {
        "about": (
            "Test vectors for the canonical forms and the entity tag of docs/extension.md ('Canonical forms', "
            "'Entity tags') and the digest of docs/seps/deltas.md ('The digest'). Inputs are JSON text ('json', "
            "'result'), parsed keeping the last of duplicate member names; expected outputs are UTF-8 text (and "
            "hex); null means the input has no such form. Every answer has a tag."
        ),
        "values": values,
        "answers": answers,
    }


def write() -> None:
    VECTORS.parent.mkdir(parents=True, exist_ok=True)
    VECTORS.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    write()
