"""The tree digest ("tree/1"): a delta's digest that both sides can update for the price of the change.

The whole-answer digest (`mcpcache.etag.answer_digest`) hashes the canonical bytes of the whole answer, so a
one-cell edit of a 5 MB notebook costs each side the canonical form and SHA-256 of 5 MB. The tree digest
hashes the answer as a fixed split into leaves, each with a domain prefix, and the root over the leaves in
order; a side that holds the leaf hashes of the base recomputes only the leaves the ops touch.

The form, for implementers in any language (docs/protocol.md section 11, "The tree digest"; vectors in
docs/vectors/tree-digest.json). `H(x)` is SHA-256, `J(v)` the RFC 8785 bytes of a JSON value, `||`
concatenation, and each prefix below is ASCII followed by one NUL byte:

- the answer's three parts are as the whole-answer digest takes them: the content blocks as sent, the
  structured content (absent reads as null), and `_meta` without the cache block and without
  `io.modelcontextprotocol/serverInfo` (nothing left reads as null);
- each content block `b` whose member `text` is a string `t` (a text block):
  `H("mcpcache-tree/1 text" || J(b without "text") || c0 || c1 || ...)`, with `ci = H("mcpcache-tree/1
  chunk" || Ti)` for the chunks `T0 T1 ...` of the UTF-8 bytes of `t` (`mcpcache.delta.chunks`: boundaries
  defined by the bytes around them, so a splice rehashes one or two chunks); any other block `b`:
  `H("mcpcache-tree/1 block" || J(b))`; content: `C = H("mcpcache-tree/1 content" || h(b0) || h(b1) || ...)`;
- structured content that is an object: each member `k: v` in RFC 8785 order (keys sorted by UTF-16 code
  units), `H("mcpcache-tree/1 member" || J(k) || J(v))` when `v` is not an array, and when it is,
  `H("mcpcache-tree/1 array" || J(k) || e0 || e1 || ...)` with `ei = H("mcpcache-tree/1 element" ||
  J(v[i]))`; the object: `S = H("mcpcache-tree/1 object" || m0 || m1 || ...)`. Structured content that
  is not an object (or absent): `S = H("mcpcache-tree/1 value" || J(value or null))`;
- `_meta`: `M = H("mcpcache-tree/1 meta" || J(meta or null))`;
- the root: `H("mcpcache-tree/1 root" || C || S || M)`, written `sha256-tree1:` and 64 lowercase hex digits.

Every array member of the structured content is split into its elements whatever its length: the rule
needs no threshold both sides must agree on, and an element (a notebook cell, a table row) is the unit an
edit touches. Hashes are fixed-length and keys are JSON strings, so no two splits give the same bytes.

`leaves_of` computes every leaf; `updated` takes a base's leaves and the ops that made the new document and
rehashes only what the ops touched (an op's path names the leaf it changes; array insertions and removals
shift the element hashes as `apply` shifts the elements), then checks the result's shape against the new
document and recomputes anything that does not fit. Both give the same root as computing from scratch,
which tests/delta/test_tree.py checks over random documents and edits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from mcpcache.canonical import CanonicalizationError, jcs
from mcpcache.delta.applying import _tokens
from mcpcache.delta.chunks import Chunks, Splice, chunks_of, rechunked
from mcpcache.delta.spec import DeltaError
from mcpcache.protocol import SERVER_INFO_KEY

__all__ = [
    "TREE_DIGEST_PREFIX",
    "TREE_FORMAT",
    "Leaves",
    "leaves_of",
    "root_of",
    "tree_digest",
    "updated",
]

TREE_FORMAT: Final = "json-patch+splice/2"
"""The delta format whose digest is the tree digest: ops exactly as `json-patch+splice/1`."""

TREE_DIGEST_PREFIX: Final = "sha256-tree1:"

_BLOCK: Final = b"mcpcache-tree/1 block\x00"
_TEXT: Final = b"mcpcache-tree/1 text\x00"
_CONTENT: Final = b"mcpcache-tree/1 content\x00"
_MEMBER: Final = b"mcpcache-tree/1 member\x00"
_ARRAY: Final = b"mcpcache-tree/1 array\x00"
_ELEMENT: Final = b"mcpcache-tree/1 element\x00"
_OBJECT: Final = b"mcpcache-tree/1 object\x00"
_VALUE: Final = b"mcpcache-tree/1 value\x00"
_META: Final = b"mcpcache-tree/1 meta\x00"
_ROOT: Final = b"mcpcache-tree/1 root\x00"

_sha256 = hashlib.sha256

Member = bytes | tuple[bytes, ...]
"""A member's hash (not an array), or its elements' hashes (an array)."""


@dataclass(frozen=True, slots=True)
class Leaves:
    """The leaf hashes of one answer. `members` is None when the structured content is not an object (then
    `value` is its hash); `meta` is the hash of the `_meta` the digest covers; `texts`, beside each block,
    the chunks of its text (None: not a text block)."""

    blocks: tuple[bytes, ...]
    members: dict[str, Member] | None
    value: bytes
    meta: bytes
    texts: tuple[Chunks | None, ...] = ()

    def root(self) -> str:
        return root_of(self)


def _block(block: Any) -> tuple[bytes, Chunks | None]:
    """A block's leaf hash, and its text's chunks when it is a text block."""
    if type(block) is dict:
        text = block.get("text")
        if type(text) is str:
            chunks = chunks_of(text)
            return _text_block(block, chunks), chunks
    return _sha256(_BLOCK + jcs(block)).digest(), None


def _text_block(block: dict[str, Any], chunks: Chunks) -> bytes:
    rest = {key: value for key, value in block.items() if key != "text"}
    return _sha256(_TEXT + jcs(rest) + chunks.hashes).digest()


def _blocks(content: list[Any]) -> tuple[tuple[bytes, ...], tuple[Chunks | None, ...]]:
    pairs = [_block(block) for block in content]
    return tuple(pair[0] for pair in pairs), tuple(pair[1] for pair in pairs)


def _element(value: Any) -> bytes:
    return _sha256(_ELEMENT + jcs(value)).digest()


def _member(key: str, value: Any) -> Member:
    if type(value) is list:
        return tuple(_element(item) for item in value)
    return _sha256(_MEMBER + jcs(key) + jcs(value)).digest()


def _value(structured: Any) -> bytes:
    return _sha256(_VALUE + jcs(structured)).digest()


def digest_meta_of(document_meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The `_meta` the digest covers, from a document's `_meta` (which already lacks the cache block)."""
    if not document_meta:
        return None
    rest = {key: value for key, value in document_meta.items() if key != SERVER_INFO_KEY}
    return rest or None


def _meta(document_meta: Any) -> bytes:
    return _sha256(_META + jcs(digest_meta_of(document_meta))).digest()


def _check_document(document: Mapping[str, Any]) -> tuple[list[Any], Any, Any]:
    content = document.get("content")
    if type(content) is not list:
        raise CanonicalizationError("a document's content is an array of blocks")
    meta = document.get("_meta")
    if meta is not None and type(meta) is not dict:
        raise CanonicalizationError("a document's _meta is an object")
    return content, document.get("structuredContent"), meta


def leaves_of(document: Mapping[str, Any]) -> Leaves:
    """Every leaf hash of an answer's document (`mcpcache.delta.answer_document`). Raises
    CanonicalizationError when a part has no RFC 8785 form (an integer beyond 2^53, say)."""
    content, structured, meta = _check_document(document)
    blocks, texts = _blocks(content)
    if type(structured) is dict:
        members = {key: _member(key, value) for key, value in structured.items()}
        return Leaves(blocks, members, b"", _meta(meta), texts)
    return Leaves(blocks, None, _value(structured), _meta(meta), texts)


def _member_hash(key: str, member: Member) -> bytes:
    if type(member) is tuple:
        return _sha256(_ARRAY + jcs(key) + b"".join(member)).digest()
    assert type(member) is bytes
    return member


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _ordered(keys: Sequence[str]) -> list[str]:
    # RFC 8785 orders by UTF-16 code units, which differs from code point order only past U+FFFF.
    if all(key.isascii() or max(key) <= "\uffff" for key in keys):
        return sorted(keys)
    return sorted(keys, key=_utf16)


def root_of(leaves: Leaves) -> str:
    """The digest (`sha256-tree1:` + 64 hex digits) of the answer whose leaves these are."""
    content = _sha256(_CONTENT + b"".join(leaves.blocks)).digest()
    if leaves.members is not None:
        members = leaves.members
        structured = _sha256(
            _OBJECT + b"".join(_member_hash(key, members[key]) for key in _ordered(list(members)))
        ).digest()
    else:
        structured = leaves.value
    return TREE_DIGEST_PREFIX + _sha256(_ROOT + content + structured + leaves.meta).hexdigest()


def tree_digest(document: Mapping[str, Any]) -> str:
    """The tree digest of an answer's document, computed from scratch."""
    return root_of(leaves_of(document))


# Updating: the leaves of the new document from the base's and the ops ----------------------------------

_DIRTY: Final = b""
"""An element or block hash to compute again (no SHA-256 is empty)."""


class _Whole(Exception):
    """An op the update does not follow in detail: the part it touches is recomputed whole."""


class _Block:
    """A block of the base, kept (with its text's chunks and the splices on its text, if a text block)."""

    __slots__ = ("chunks", "digest", "splices")

    def __init__(self, digest: bytes, chunks: Chunks | None) -> None:
        self.digest = digest
        self.chunks = chunks
        self.splices: list[Splice] = []


class _Update:
    """The base's leaves as lists, edited op by op as `apply` edits the document."""

    def __init__(self, base: Leaves, *, strict: bool = False) -> None:
        self.strict = strict
        texts = base.texts or (None,) * len(base.blocks)
        # A block to hash again is `_DIRTY`; every other is a `_Block`.
        self.blocks: list[bytes | _Block] | None = [
            _Block(digest, chunks) for digest, chunks in zip(base.blocks, texts, strict=True)
        ]
        self.members: dict[str, list[bytes] | bytes] | None = (
            None if base.members is None else {key: _editable(m) for key, m in base.members.items()}
        )
        self.meta_dirty = False
        self.structured_whole = base.members is None  # a non-object is one leaf: recomputed if touched
        self.structured_touched = False

    def op(self, op: Any) -> None:
        if type(op) is not dict:
            raise DeltaError("an op is an object")
        name = op.get("op")
        if name == "test":
            return
        path = _tokens(op.get("path", ""), "tree")
        if name == "splice" and self.splice(path, op):
            return
        if name == "move":
            self.edit(_tokens(op.get("from", ""), "tree"), "remove")
            self.edit(path, "add")
        elif name == "copy":
            self.edit(path, "add")
        elif name in ("add", "remove", "replace", "splice"):
            self.edit(path, name)
        else:
            raise DeltaError(f"unknown op {name!r}")

    def splice(self, tokens: list[str], op: dict[str, Any]) -> bool:
        """Note a splice of a text block's text, to rechunk it; False: not one (the block is hashed again)."""
        if len(tokens) != 3 or tokens[0] != "content" or tokens[2] != "text" or self.blocks is None:
            return False
        index, offset, removed, insert = tokens[1], op.get("offset"), op.get("remove"), op.get("insert")
        if not index.isdigit() or (len(index) > 1 and index[0] == "0") or int(index) >= len(self.blocks):
            return False
        block = self.blocks[int(index)]
        if not isinstance(block, _Block) or block.chunks is None or type(insert) is not str:
            return False
        if type(offset) is not int or type(removed) is not int or offset < 0 or removed < 0:
            return False
        block.splices.append((offset, removed, len(insert)))
        return True

    def edit(self, tokens: list[str], name: str) -> None:
        if not tokens:
            raise _Whole
        part = tokens[0]
        if part == "content":
            if len(tokens) == 1:
                self.blocks = None
            elif self.blocks is not None:
                _edit_list(self.blocks, tokens[1], name, deeper=len(tokens) > 2)
        elif part == "structuredContent":
            self.structured_touched = True
            if len(tokens) == 1 or self.structured_whole:
                self.structured_whole = True
                return
            members = self.members
            assert members is not None
            key = tokens[1]
            if len(tokens) == 2:
                if name == "remove":
                    members.pop(key, None)
                else:
                    members[key] = _DIRTY  # added or replaced: computed from the new value
                return
            held = members.get(key)
            if type(held) is list:
                _edit_list(held, tokens[2], name, deeper=len(tokens) > 3)
            else:
                members[key] = _DIRTY
        elif part == "_meta":
            self.meta_dirty = True
        else:
            raise _Whole

    def result(self, base: Leaves, document: Mapping[str, Any]) -> Leaves:
        content, structured, meta = _check_document(document)
        blocks = self.blocks
        if blocks is None or len(blocks) != len(content):
            self.whole()
            new_blocks, texts = _blocks(content)
        else:
            pairs = [_kept(held, content[i]) for i, held in enumerate(blocks)]
            new_blocks, texts = tuple(pair[0] for pair in pairs), tuple(pair[1] for pair in pairs)
        new_meta = _meta(meta) if self.meta_dirty else base.meta
        if not self.structured_touched:
            return Leaves(new_blocks, base.members, base.value, new_meta, texts)
        if type(structured) is not dict:
            self.whole()
            return Leaves(new_blocks, None, _value(structured), new_meta, texts)
        members = self.members
        if self.structured_whole or members is None or members.keys() != structured.keys():
            self.whole()
            return Leaves(new_blocks, {k: _member(k, v) for k, v in structured.items()}, b"", new_meta, texts)
        out: dict[str, Member] = {}
        for key, value in structured.items():
            held = members[key]
            if type(held) is list:
                if type(value) is list and len(held) == len(value):
                    out[key] = tuple(h or _element(value[i]) for i, h in enumerate(held))
                else:
                    self.whole()
                    out[key] = _member(key, value)
            elif isinstance(held, bytes) and held and type(value) is not list:
                out[key] = held
            else:
                if held:  # not marked by an op: it was not expected to have changed shape
                    self.whole()
                out[key] = _member(key, value)
        return Leaves(new_blocks, out, b"", new_meta, texts)

    def whole(self) -> None:
        """A part is hashed whole: refused when the caller holds only what the ops touched."""
        if self.strict:
            raise ValueError("the document's shape is not what the ops leave")


def _kept(held: bytes | _Block, block: Any) -> tuple[bytes, Chunks | None]:
    """A block's leaf: the base's when untouched, its text rechunked where spliced, else hashed again."""
    if not isinstance(held, _Block):
        return _block(block)
    if not held.splices:
        return held.digest, held.chunks
    text = block.get("text") if type(block) is dict else None
    chunks = None if held.chunks is None or type(text) is not str else rechunked(held.chunks, held.splices, text)
    if chunks is None:
        return _block(block)
    assert type(block) is dict
    return _text_block(block, chunks), chunks


def _editable(member: Member) -> list[bytes] | bytes:
    return list(member) if isinstance(member, tuple) else member


def _edit_list(hashes: list[Any], token: str, name: str, *, deeper: bool) -> None:
    """Follow one op on an array's element hashes: below an element marks it; at an element, `add`
    inserts, `remove` takes out, anything else marks."""
    if token == "-" and name == "add" and not deeper:
        hashes.append(_DIRTY)
        return
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise _Whole
    index = int(token)
    if deeper or name in ("replace", "splice"):
        if index >= len(hashes):
            raise _Whole
        hashes[index] = _DIRTY
    elif name == "add":
        if index > len(hashes):
            raise _Whole
        hashes.insert(index, _DIRTY)
    else:  # remove
        if index >= len(hashes):
            raise _Whole
        del hashes[index]


def updated(base: Leaves, ops: Sequence[Any], document: Mapping[str, Any], *, strict: bool = False) -> Leaves:
    """The leaves of `document`, the result of applying `ops` to the document whose leaves are `base`:
    only the leaves the ops touched are hashed again. Raises CanonicalizationError as `leaves_of` does.

    `strict`: read nothing of `document` but the leaves the ops touched (and its shape: the content's
    length, the structured content's keys, the length of each array member), for a caller that holds only
    those; where the ops cannot be followed leaf by leaf, raise ValueError rather than hash it all."""
    update = _Update(base, strict=strict)
    try:
        for op in ops:
            update.op(op)
    except (_Whole, DeltaError):
        if strict:
            raise ValueError("the ops cannot be followed leaf by leaf") from None
        return leaves_of(document)
    return update.result(base, document)
