"""The client's patch step for all answers and edits (`mcpcache.client.patching.patch_answer`): a delta made
by the server half's engine (diff, then the digest of the new answer) always rebuilds the new answer
exactly, in the form a full answer has; and a delta with any byte flipped on the way is always caught
(refused) or harmless (the very same answer), never a wrong answer and never an exception.

Answers are JSON-like documents with content blocks, structured content and `_meta`, non-ASCII and astral
text included; edits insert, delete, move and change cells and members, grow and cut text blocks, add and
remove blocks (tests/delta/strategies.py)."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from mcp_types import CallToolResult

from delta.strategies import edited_pairs, notebook_pairs, table_pairs
from mcpcache.canonical import CanonicalizationError
from mcpcache.client.patching import Patched, Unpatched, patch_answer
from mcpcache.delta import FORMAT, DeltaError, diff, result_of
from mcpcache.etag import answer_digest
from mcpcache.protocol import META_KEY, SERVER_INFO_KEY, DeltaBlock, parse_cache_block
from mcpcache.sizes import result_bytes

property_test = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=150)

OLD_TAG = 'W/"0123456789abcdef0123456789abcdef"'
NEW_TAG = 'W/"fedcba9876543210fedcba9876543210"'
OLD_BLOCK = {"cacheScope": "private", "ttlMs": 5000, "etag": OLD_TAG}
NEW_BLOCK = {"cacheScope": "private", "ttlMs": 5000, "etag": NEW_TAG}
SERVER_INFO = {"name": "a server", "version": "1"}

pairs = edited_pairs() | notebook_pairs() | table_pairs()


def answer(document: dict[str, Any], block: dict[str, Any]) -> CallToolResult | None:
    """The answer a document describes, stamped with `block` (None: the document is no answer, or has no
    digest form, so no server would send a delta to or from it)."""
    try:
        result = result_of(document)
        answer_digest(result.content, result.structured_content, result.meta)
    except (DeltaError, CanonicalizationError):
        return None
    meta = {**(result.meta or {}), META_KEY: block, SERVER_INFO_KEY: SERVER_INFO}
    return result.model_copy(update={"meta": meta})


def delta_reply_meta(new: CallToolResult, wire_ops: bytes) -> dict[str, Any]:
    """The `_meta` of the delta reply a server sends, with its ops as the bytes `wire_ops`."""
    digest = answer_digest(new.content, new.structured_content, new.meta)
    delta = {"base": OLD_TAG, "format": FORMAT, "ops": orjson.loads(wire_ops), "digest": digest}
    return {META_KEY: {**NEW_BLOCK, "delta": delta}, SERVER_INFO_KEY: SERVER_INFO}


def wire(result: CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def patched_from(base: CallToolResult, reply_meta: dict[str, Any]) -> Patched | Unpatched:
    block = parse_cache_block(reply_meta)
    assert block is not None
    delta = block.delta
    assert isinstance(delta, DeltaBlock)
    return patch_answer(base, delta, reply_meta, META_KEY, base_size=result_bytes(base))


@property_test
@given(pairs)
@example(({"content": [], "structuredContent": {"a": 1}}, {"content": [], "structuredContent": {"a": 1.0}}))
@example(({"content": [{"type": "text", "text": "é😀"}]}, {"content": [{"type": "text", "text": "é😀x"}]}))
def test_a_delta_rebuilds_the_new_answer_as_sent_whole(pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    old_document, new_document = pair
    base, new = answer(old_document, OLD_BLOCK), answer(new_document, NEW_BLOCK)
    assume(base is not None)
    assume(new is not None)
    assert base is not None
    assert new is not None
    before = orjson.dumps(wire(base))
    ops = diff(old_document, new_document, max_bytes=1 << 40)
    assert ops is not None
    made = patched_from(base, delta_reply_meta(new, orjson.dumps(ops)))
    assert isinstance(made, Patched), made
    assert wire(made.result) == wire(new)  # the block and serverInfo included
    assert orjson.dumps(wire(base)) == before  # the base was not changed
    # Counted from the ops, when they are splices and replaces: exactly what encoding it measures.
    assert made.size is None or made.size == result_bytes(made.result)


def test_the_size_of_an_answer_after_splices_and_replaces_is_counted_from_the_ops() -> None:
    text = '{"cells":[{"source":"x = 1"},{"source":"y = \\"\u00e9\\""}]}'
    old = {"content": [{"type": "text", "text": text}], "structuredContent": {"cells": [{"source": "x = 1"}]}}
    new_text = text.replace("x = 1", 'x = "2"\n')
    new = {"content": [{"type": "text", "text": new_text}], "structuredContent": {"cells": [{"source": "x = 2"}]}}
    base, after = answer(old, OLD_BLOCK), answer(new, NEW_BLOCK)
    assert base is not None
    assert after is not None
    ops = [
        {"op": "splice", "path": "/content/0/text", "offset": text.index("x = 1") + 4, "remove": 1, "insert": '"2"\n'},
        {"op": "replace", "path": "/structuredContent/cells/0/source", "value": "x = 2"},
    ]
    made = patched_from(base, delta_reply_meta(after, orjson.dumps(ops)))
    assert isinstance(made, Patched), made
    assert wire(made.result) == wire(after)
    assert made.size == result_bytes(made.result)


@property_test
@given(pairs, st.data())
def test_a_flipped_byte_in_the_ops_is_always_caught(
    pair: tuple[dict[str, Any], dict[str, Any]], data: st.DataObject
) -> None:
    old_document, new_document = pair
    base, new = answer(old_document, OLD_BLOCK), answer(new_document, NEW_BLOCK)
    assume(base is not None)
    assume(new is not None)
    assert base is not None
    assert new is not None
    ops = diff(old_document, new_document, max_bytes=1 << 40)
    assert ops is not None
    damaged = bytearray(orjson.dumps(ops))
    at = data.draw(st.integers(0, len(damaged) - 1), label="at")
    damaged[at] ^= data.draw(st.integers(1, 255), label="xor")
    try:
        reply_meta = delta_reply_meta(new, bytes(damaged))
    except orjson.JSONDecodeError:
        return  # no longer JSON: the transport would not deliver it as a reply
    if not isinstance(reply_meta[META_KEY]["delta"]["ops"], list):
        return  # the client reads such a block as a malformed delta and never applies it
    made = patched_from(base, reply_meta)
    if isinstance(made, Patched):
        # Harmless damage only (a flip inside a member nobody reads, say): the very same answer.
        assert wire(made.result) == wire(new)
    else:
        assert made.reason
