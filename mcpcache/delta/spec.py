"""Delta replies: a changed answer sent as the change, not as the whole answer again.

When an answer a client already holds changes a little (one cell of a multi-megabyte notebook edited), a
not-modified reply cannot help and the full answer costs as much as the first time. A delta reply carries
ops that turn the answer the client holds (named by its tag) into the new one. This module is the pure
engine under it: what an answer's *document* is, `diff` to compute ops, `apply` to replay them. It does
no I/O and knows no client, server or gateway; they wrap it.

The format, "json-patch+splice/1" (`FORMAT`), for implementers in any language:

The document of an answer is the JSON object
`{"content": [<content blocks as sent>], "structuredContent": <value>, "_meta": <object>}`, where
`structuredContent` is left out when the answer has none, and `_meta` is the answer's `_meta` without the
cache block (under `io.modelcontextprotocol/cache` unless configured otherwise), left out when that leaves
nothing. `isError` is not part of it: an error is never a base or a target.

Ops are a JSON array, applied in order to a private copy of the base document; any op failing fails all.

- `add`, `remove`, `replace`, `move`, `copy`, `test`: exactly as RFC 6902, with `path` and `from` JSON
  Pointers (RFC 6901) into the document: `/content/0/text`, `/structuredContent/cells/3/source`,
  `/content/2` for a whole block. `test` compares as RFC 6902 4.6 says (numbers by value, so 1 equals
  1.0, but never a number and a boolean). Unknown members of an op are ignored (RFC 6902 section 4).
- `{"op": "splice", "path": P, "offset": i, "remove": n, "insert": s}`: the string at P becomes
  `old[:i] + s + old[i + n:]`. `i` and `n` are integers >= 0, `s` a string, and `i + n` must not exceed
  the string's length. Offsets and lengths count Unicode code points (scalar values), not UTF-8 bytes and
  not UTF-16 code units: a JSON string is a sequence of code points once its escapes are read, so a code
  point count does not depend on how the text was encoded or escaped on the wire, every language can
  count it (Python's `str`; JavaScript must iterate with `codePointAt` or `Array.from`, whose `length`
  counts UTF-16 units; Go `[]rune`; Rust `chars()`), and no offset can cut a character in two, as a
  UTF-16 offset can split a surrogate pair. Consecutive splices are applied one after another: each
  offset is into the string as the previous splice left it.
- The result must be a JSON object (a document), else the delta fails.

Bounds a receiver enforces, so a few bytes of ops cannot cost it out of proportion (each failure is a
`DeltaError`): at most `MAX_OPS` ops; at most `MAX_INSERTED_BYTES` bytes put in by the ops (the compact
JSON of every `add` and `replace` value, every value `copy` duplicates, every `insert` string); at most
`MAX_REWRITTEN` units of rewriting (array elements shifted by an `add`, `remove` or `move` inside an array:
the array's length each time; code points of a string rebuilt by a run of splices).

What `diff` emits is a subset: `add`, `remove`, `replace`, `move` (an array element moved to the other end
of a changed run) and `splice`, with the splices on one string in increasing order, so a receiver can
rebuild the string once per run. Equality is JSON's, not Python's: `1`, `1.0` and `true` differ, and so do
`0.0` and `-0.0`, because their canonical bytes (and so the digest a client checks) differ.

Sharing: `document_of` hands back the answer's own structured content and `_meta` values, `diff`'s ops
hold values of the new document, and `apply` copies only the containers the ops change (the root and the
path down to each change): everything else in its result is the base document's own objects. Neither
function changes what it is given; a caller that will mutate a result, or the base after it, copies first.
"""

from __future__ import annotations

from typing import Final

FORMAT: Final = "json-patch+splice/1"
"""The name and version of the delta format this module reads and writes."""

MAX_OPS: Final = 100_000
"""The most ops one delta may hold. A one-cell edit is two ops; renumbering 300 cells, about 600."""

MAX_INSERTED_BYTES: Final = 64 * 1024 * 1024
"""The most bytes of JSON one delta may put into a document (values added, replaced or copied, strings
inserted). `copy` can double a document with a few bytes of op; this caps what that can grow to."""

MAX_REWRITTEN: Final = 256 * 1024 * 1024
"""The most units of rewriting one delta may cause: each `add`, `remove` or `move` inside an array counts the
array's length (the elements Python, or any array, shifts), each run of splices the length of the string it
rebuilds. Without it, a hundred thousand small ops on a large array or string would cost minutes."""

DOCUMENT_KEYS: Final = frozenset({"content", "structuredContent", "_meta"})
OPS: Final = frozenset({"add", "remove", "replace", "move", "copy", "test", "splice"})
SHOWN: Final = 120
"""Pointers in messages are cut to this many characters: a message is read by a person, not a parser."""


class DeltaError(ValueError):
    """Ops that do not apply (malformed, a bad pointer, a failed test, out of range, too large), or a
    document that is not an answer. The client's answer to any of them is the same: ask again in full."""


# Pointers, and how a message shows them --------------------------------------------------------------


def escape_token(key: str) -> str:
    """A member name as a JSON Pointer token (RFC 6901: `~` first, then `/`)."""
    if "~" in key or "/" in key:
        return key.replace("~", "~0").replace("/", "~1")
    return key


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."
