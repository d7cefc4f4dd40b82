"""Patching a stored answer with a delta reply (docs/protocol.md section 11), with no I/O.

`patch_answer` takes a private copy of the answer the cache stored under the delta's base, replays the ops
on its document (`mcpcache.delta.apply`, which never changes what it is given and is bounded against ops
that would cost out of proportion), turns the result back into an answer, and checks that the answer's
digest is the one the server named. It returns a typed value: `Patched` with the new answer, or
`Unpatched` with the reason a person reads. It never raises for anything a server can send: the driver
(`mcpcache.client.cache`) asks again in full on `Unpatched`, so a delta can cost a second request, never a
wrong answer.

The new answer is built to be what the server would have sent whole, so that the cache keeps it exactly as
it keeps a full answer (other processes and caches reading the store see an ordinary entry):
- its content, structured content and `_meta` (without the cache block) are the patched document's, which
  the digest covers;
- its cache block is the reply's, without the `delta` field (the new tag, ttl and scope: what the full
  answer would have carried);
- the SDK's `serverInfo` entry in `_meta`, which describes the server rather than the answer and which
  the digest leaves out, is the reply's when the reply carries one (as a full answer would), else the
  stored copy's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic_core
from mcp_types import CallToolResult

from mcpcache import delta
from mcpcache.canonical import CanonicalizationError
from mcpcache.delta.applying import _tokens
from mcpcache.delta.spec import DeltaError
from mcpcache.delta.tree import TREE_DIGEST_PREFIX, TREE_FORMAT, Leaves, leaves_of, root_of, updated
from mcpcache.etag import answer_digest
from mcpcache.protocol import DELTA_KEY, SERVER_INFO_KEY, DeltaBlock
from mcpcache.sizes import result_bytes

__all__ = ["PatchResult", "Patched", "Unpatched", "patch_answer"]


@dataclass(frozen=True)
class Patched:
    """The new answer, verified: serve it and keep it as a full answer with its block would be kept.
    `leaves`: its tree digest's leaves, when the delta named it by one (kept for the next delta); `size`:
    its length as the wire carries it (`mcpcache.sizes.result_bytes`), when known without encoding it."""

    result: CallToolResult
    reason: str
    leaves: Leaves | None = None
    size: int | None = None


@dataclass(frozen=True)
class Unpatched:
    """The delta cannot be used; the call is asked again without a tag."""

    reason: str


PatchResult = Patched | Unpatched

_SHOWN = 300
"""A reason quotes at most this much of an error message (it may quote a peer's pointers and values)."""


def patch_answer(
    base: CallToolResult,
    reply_delta: DeltaBlock,
    reply_meta: object,
    meta_key: str,
    *,
    base_leaves: Leaves | None = None,
    base_size: int | None = None,
) -> PatchResult:
    """The answer `reply_delta` turns `base` into (`base`: a private copy of the stored answer whose tag is
    the delta's base; it is not changed, and the result may share its unchanged values), with the reply's
    block; or why not. `reply_meta`: the delta reply's `_meta`, as received. `base_leaves`: the tree
    digest's leaf hashes of exactly `base` (`mcpcache.client.leaves`), if held: only the leaves the ops
    touch are then hashed; without them every leaf is (what the whole-answer digest costs). `base_size`:
    `base`'s length as the wire carries it, if known: the new answer's is then counted from the ops
    (`Patched.size`)."""
    tree = reply_delta.format == TREE_FORMAT
    if reply_delta.digest.startswith(TREE_DIGEST_PREFIX) != tree:
        return Unpatched(f"the delta's digest is not of the form its format {reply_delta.format!r} names")
    try:
        document = delta.document_of(base, meta_key)
        patched = delta.apply(document, reply_delta.ops)
        answer = delta.result_of(patched)
    except DeltaError as exc:
        return Unpatched(f"the delta's ops do not apply to the stored answer: {_cut(str(exc))}")
    except (ValueError, TypeError) as exc:  # the stored copy has no document (a value that is not JSON)
        return Unpatched(f"the stored answer cannot be patched: {_cut(str(exc))}")
    leaves: Leaves | None = None
    try:
        if tree:
            # The leaves of the answer as validated (what is served and stored), not of the raw document.
            if base_leaves is None:
                base_leaves = leaves_of(document)
            leaves = updated(base_leaves, reply_delta.ops, delta.document_of(answer, meta_key))
            digest = root_of(leaves)
        else:
            digest = answer_digest(answer.content, answer.structured_content, answer.meta, meta_key=meta_key)
    except CanonicalizationError as exc:
        return Unpatched(f"the patched answer has no digest form: {_cut(str(exc))}")
    if digest != reply_delta.digest:
        return Unpatched("the patched answer's digest is not the one the server named")
    assert isinstance(reply_meta, Mapping)  # a reply with a parsed delta has a block, so a `_meta` object
    result = answer.model_copy(update={"meta": _new_meta(answer.meta, reply_meta, meta_key)})
    size = None
    if base_size is not None:
        change = _size_change(document, delta.document_of(answer, meta_key), reply_delta.ops)
        if change is not None:
            size = base_size + change + _meta_bytes(result) - _meta_bytes(base)
    return Patched(result, f"patched: {len(reply_delta.ops)} op(s) applied, digest verified", leaves, size)


def _meta_bytes(result: CallToolResult) -> int:
    """What `_meta` adds to an answer's length on the wire (with the rest of it empty)."""
    return result_bytes(CallToolResult(content=[], meta=result.meta))


def _size_change(base: dict[str, Any], new: dict[str, Any], ops: list[Any]) -> int | None:
    """How much longer (in JSON bytes, as the wire carries them) the content and structured content of `new`
    are than those of `base`, which `ops` turned into `new`, counted from what the ops changed only; None
    for ops this does not follow (anything but splices and replaces, or ops whose paths overlap): the
    caller measures the answer whole. Splices count the escaped length of what they remove and insert, a
    replace the JSON of the old and the new value: JSON is written part by part, so lengths add up."""
    change = 0
    spliced: dict[str, tuple[int, int, str]] = {}  # path: (shift, end of the last splice, the base's string)
    paths: list[list[str]] = []
    try:
        for op in ops:
            name, path = op.get("op"), op.get("path")
            if name == "test":
                continue
            tokens = _tokens(path, "size")
            if tokens[:1] == ["_meta"]:
                continue  # counted with the whole `_meta`
            if tokens[:1] not in (["content"], ["structuredContent"]) or len(tokens) < 2:
                return None
            if name == "splice":
                held = spliced.get(path)
                if held is None:
                    if any(_overlap(tokens, other) for other in paths):
                        return None
                    paths.append(tokens)
                    text = _at(base, tokens)
                    if type(text) is not str:
                        return None
                    held = (0, 0, text)
                shift, last, text = held
                offset, removed, insert = op["offset"], op["remove"], op["insert"]
                if offset < last:
                    return None  # a splice behind the last: where it lies in the base is not followed
                start = offset - shift
                change += _escaped(insert) - _escaped(text[start : start + removed])
                spliced[path] = (shift + len(insert) - removed, offset + len(insert), text)
            elif name == "replace" and tokens[0] == "structuredContent":
                if any(_overlap(tokens, other) for other in paths):
                    return None
                paths.append(tokens)
                change += len(pydantic_core.to_json(_at(new, tokens))) - len(pydantic_core.to_json(_at(base, tokens)))
            else:
                return None
    except (DeltaError, KeyError, IndexError, TypeError, ValueError, pydantic_core.PydanticSerializationError):
        return None
    return change


def _overlap(one: list[str], other: list[str]) -> bool:
    shortest = min(len(one), len(other))
    return one[:shortest] == other[:shortest]


def _at(document: Any, tokens: list[str]) -> Any:
    node = document
    for token in tokens:
        if type(node) is list and not token.isdigit():
            raise KeyError(token)
        node = node[int(token)] if type(node) is list else node[token]
    return node


def _escaped(text: str) -> int:
    return len(pydantic_core.to_json(text)) - 2


def _new_meta(patched: Mapping[str, Any] | None, reply_meta: Mapping[str, Any], meta_key: str) -> dict[str, Any]:
    """The new answer's `_meta`: the patched document's, then what the reply carries beside it (the block,
    and serverInfo), in the order the reply has them: a server stamps its answers' `_meta` the same way
    whole or as a delta, so the answer is stored in the very bytes the whole answer would have been."""
    from_reply = {meta_key, SERVER_INFO_KEY} & reply_meta.keys()
    meta = {key: value for key, value in (patched or {}).items() if key not in from_reply}
    for key in reply_meta:
        if key == meta_key:
            # The reply's block as it came, without its `delta` field: the new answer's tag, ttl and scope.
            meta[key] = {name: value for name, value in reply_meta[key].items() if name != DELTA_KEY}
        elif key == SERVER_INFO_KEY:
            meta[key] = reply_meta[key]
    return meta


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
