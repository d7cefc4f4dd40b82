"""The work of a delta reply, shared by the server half's driver and the gateway: the diff, the digest,
and the decision that picks the reply, done only as far as the decision needs it.

Whoever holds the two answers (the server in its in-process history, the gateway in its store) hands
over the base's document and a way to build the new one; `delta_choice` diffs them within half the
answer's size, digests the new answer only when the ops came out small enough, and returns
`decide_delta`'s choice. It is synchronous CPU work (a few tens of milliseconds for a 5 MB notebook,
most of it the digest), so a caller on an event loop may run it in a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from mcpcache import delta
from mcpcache.canonical import CanonicalizationError
from mcpcache.delta.tree import TREE_FORMAT, tree_digest
from mcpcache.protocol import META_KEY, CacheBlock
from mcpcache.server.decisions import DeltaChoice, TryDelta, decide_delta, stub_refusal
from mcpcache.server.policies import CachePolicy
from mcpcache.server.stubs import NO_OUTPUT_SCHEMA, StubCheck

__all__ = ["THREAD_FROM_BYTES", "delta_choice"]

THREAD_FROM_BYTES: Final = 256 * 1024
"""Answers from this size on have their delta work (and, in the gateway, their encoding and decoding) done in
a worker thread: tens of milliseconds for a multi-megabyte answer, which the event loop would otherwise spend
not serving other callers."""


def delta_choice(
    tool: str,
    policy: CachePolicy,
    block: CacheBlock,
    plan: TryDelta,
    structured_content: Any,
    *,
    base: Mapping[str, Any] | None,
    new_document: Callable[[], dict[str, Any]],
    answer_size: int | None,
    digest: Callable[[], str],
    meta_key: str = META_KEY,
    stub: StubCheck = NO_OUTPUT_SCHEMA,
    tree: Callable[[list[dict[str, Any]], dict[str, Any]], str] | None = None,
) -> DeltaChoice:
    """The reply for a caller that holds the answer sent under `plan.base`.

    `base`: that answer's document (`mcpcache.delta.answer_document`), None when it is not held.
    `new_document`: builds the new answer's document (called only when there is a base to diff against).
    `answer_size`: the new answer's size, what "half the answer" is measured against (None: it has no
    JSON form). `digest`: the new answer's `mcpcache.etag.answer_digest` (called only for ops small
    enough to send; a `CanonicalizationError` from it means the answer has no digest form). `stub`: the
    tool's output schema; when it refuses the stub, nothing is diffed and the full answer goes. `tree`:
    the new answer's tree digest from the ops and its document (for `plan.format` `json-patch+splice/2`),
    for a caller that keeps the base's leaf hashes; without it the tree digest is computed whole.
    """
    ops: list[dict[str, Any]] | None = None
    ops_size = 0
    found: str | None = None
    refused = stub_refusal(tool, policy, structured_content, stub)
    if base is not None and answer_size is not None and refused is None:
        document = new_document()
        ops = delta.diff(base, document, max_bytes=answer_size // 2)
        if ops is not None:
            ops_size = len(orjson.dumps(ops))
            try:
                if plan.format == TREE_FORMAT:
                    found = tree(ops, document) if tree is not None else tree_digest(document)
                else:
                    found = digest()
            except CanonicalizationError:
                found = None
    return decide_delta(
        tool,
        policy,
        block,
        plan,
        structured_content,
        base_held=base is not None,
        answer_size=answer_size,
        ops=ops,
        ops_size=ops_size,
        digest=found,
        meta_key=meta_key,
        stub=stub,
    )
