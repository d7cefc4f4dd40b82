"""Re-read views: an answer the model already read, shown as "unchanged" or as what changed.

docs/references.md, "Re-reads". `References.for_model` comes here when it has a `ShownMemory`. This module
does the I/O around the pure parts: it asks the memory what the model holds of this server + tool +
arguments, reads that earlier answer back from the store, and lets `mcpcache.refs.changes` say what
changed. Honest by construction:

- "unchanged" only when the tag is the one the model was shown and the stored earlier answer is the same
  JSON; a changed view only against the answer this conversation was last shown, read back from this
  conversation's own stored payload, only when that answer was shown whole (a shortened view holds
  markers, not members), and only when applying it gives exactly the new answer;
- every reference a view names was read (or written) just before the view was made;
- no tag, an error, a result too small to store, a failed store or any surprise: the full view, and the
  memory forgets the answer (it then builds on nothing until a full view is shown again).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Protocol

import anyio.to_thread

from mcpcache.delta.equality import same
from mcpcache.protocol import MAX_ETAG_LENGTH, opaque_tag, parse_cache_block
from mcpcache.refs.changes import Change, describe
from mcpcache.refs.shown import Seen, ShownMemory, source_key
from mcpcache.refs.uri import CacheUri
from mcpcache.refs.view import (
    CHANGED_FIELD,
    CHANGES_FIELD,
    UNCHANGED_FIELD,
    URI_FIELD,
    ModelView,
    Payload,
    decode_json,
    encode_json,
    json_bytes,
    payload_of,
)
from mcpcache.stores.items import Item
from mcpcache.tokens import OFF_LOOP_CHARS, TokenCount

MAX_TOOL_CHARS = 64
"""A tool's name is quoted in a view up to this many characters."""


class ViewHost(Protocol):
    """What this module needs of `mcpcache.refs.references.References` (which calls it, so it is not imported)."""

    @property
    def conversation_id(self) -> str: ...

    @property
    def threshold_bytes(self) -> int: ...

    async def _full_view(
        self, payload: Payload, body: bytes, exact: bool, *, server: str, tool: str, arguments: Mapping[str, Any] | None
    ) -> ModelView: ...

    async def _held(self, token: str) -> Item | None: ...


def _tool_name(tool: object) -> str:
    name = tool if isinstance(tool, str) else str(tool)
    return name if len(name) <= MAX_TOOL_CHARS else name[: MAX_TOOL_CHARS - 3] + "..."


MAX_UNCHANGED_CHARS = 300


def unchanged_envelope(tool: object, since: CacheUri) -> dict[str, Any]:
    """At most `MAX_UNCHANGED_CHARS` characters of JSON, whatever the tool's name and the conversation's id."""
    for name in (_tool_name(tool), "The tool"):
        note = f"{name} answered exactly as in its earlier result with this _cache_uri, which you already have."
        envelope = {UNCHANGED_FIELD: note, URI_FIELD: str(since)}
        if len(json_bytes(envelope).decode()) <= MAX_UNCHANGED_CHARS:
            break
    return envelope


def changed_envelope(tool: object, since: CacheUri, uri: CacheUri, changes: list[Change]) -> dict[str, Any]:
    name = _tool_name(tool)
    if not changes:
        note = (
            f"{name}'s answer has a new version since its earlier result {since}, but nothing in what you read "
            "of it changed. The whole answer is at _cache_uri."
        )
    else:
        note = (
            f"{name}'s answer changed since its earlier result {since}. Apply _changes in order to that result "
            "to get this answer; the whole answer is at _cache_uri."
        )
        if any("edit" in change for change in changes):
            note += " Line numbers count from 1 in the text as it was before that change."
    return {CHANGED_FIELD: note, CHANGES_FIELD: changes, URI_FIELD: str(uri)}


def _normal_tag(tag: object) -> str | None:
    """What a tag is compared by: an entity tag's opaque part (weak comparison), any other short string as
    it is (a host's own version label), else None (no tag)."""
    if not isinstance(tag, str) or not tag or len(tag) > MAX_ETAG_LENGTH:
        return None
    return opaque_tag(tag) or tag


def tag_in(result: Any) -> str | None:
    """The tag in a tool result's `_meta` cache block, or None."""
    try:
        block = parse_cache_block(getattr(result, "meta", None))
    except Exception:
        return None
    return block.etag if block is not None else None


def _tokens_in(meta: Mapping[str, Any], size: int) -> TokenCount:
    raw = meta.get("tokens")
    if isinstance(raw, Mapping):
        count, method = raw.get("count"), raw.get("method")
        if isinstance(count, int) and not isinstance(count, bool) and method in ("o200k", "estimate"):
            return TokenCount(count, method)
    return TokenCount(size // 4, "estimate")


async def view(
    refs: ViewHost,
    memory: ShownMemory,
    result: Any,
    server: str,
    tool: str,
    arguments: Mapping[str, Any] | None,
    tag: str | None,
) -> ModelView:
    """`References.for_model` with a memory of what was shown (see the module docstring)."""
    conversation = refs.conversation_id
    key = source_key(server, tool, arguments)
    turn = memory.next_turn(conversation)
    try:
        payload = payload_of(result)
        body, exact = encode_json(payload.value)
        normal = _normal_tag(tag if tag is not None else tag_in(result))
        seen: Seen | None = None
        if key is not None and normal is not None and not payload.is_error and len(body) >= refs.threshold_bytes:
            recalled = memory.recall(conversation, key, turn)
            seen = recalled if isinstance(recalled, Seen) else None
        if seen is not None and seen.shown.tag == normal:
            unchanged = await _unchanged(refs, seen, tool, body, exact)
            if unchanged is not None and memory.intact(seen):
                return unchanged
        full = await refs._full_view(payload, body, exact, server=server, tool=tool, arguments=arguments)
        if key is None:
            return full
        if full.uri is None or normal is None:
            memory.drop(conversation, key)
            return full
        if seen is not None:
            changed = await _changed(refs, seen, tool, full, body, exact)
            if changed is not None and memory.intact(seen):
                changed_view, size = changed
                memory.remember_changes(conversation, key, seen.shown, normal, full.uri, size)
                return changed_view
        memory.remember_full(conversation, key, normal, full.uri, turn, shortened=bool(full.shortened))
        return full
    except BaseException:
        # Whatever the model is shown instead (the whole result, or nothing), it is not what the memory holds.
        if key is not None:
            memory.drop(conversation, key)
        raise


async def _unchanged(refs: ViewHost, seen: Seen, tool: str, body: bytes, exact: bool) -> ModelView | None:
    """The unchanged view, when the stored earlier answer is still there and is this one."""
    since = seen.shown.uri
    held = await refs._held(since.token)
    if held is None:
        return None
    if held.body != body:
        # The same tag with other bytes: members in another order are the same JSON; anything else is not.
        try:
            if not same(decode_json(held.body, held.meta.get("codec") == "json"), decode_json(body, exact)):
                return None
        except Exception:
            return None
    tokens = _tokens_in(held.meta, len(body))
    return ModelView(unchanged_envelope(tool, since), since, len(body), tokens, [], "unchanged", since)


async def _changed(
    refs: ViewHost, seen: Seen, tool: str, full: ModelView, body: bytes, exact: bool
) -> tuple[ModelView, int] | None:
    """The changed view and its size, when it is at most half the full view (counting the changed views
    already shown on top of the same full view)."""
    shown = seen.shown
    assert full.uri is not None
    if shown.shortened:
        # The model's copy has markers where the earlier answer's large members were: a change inside one
        # cannot be applied to it (an edit of a text's first line would replace the marker's one line).
        return None
    full_size = len(json_bytes(full.envelope)) if full.shortened else len(body)
    budget = full_size // 2 - shown.changes_bytes
    if budget <= 0:
        return None
    held = await refs._held(shown.uri.token)  # read after the new answer was stored: a trim may have taken it
    if held is None:
        return None
    try:
        old = decode_json(held.body, held.meta.get("codec") == "json")
        new = decode_json(body, exact)
    except Exception:
        return None
    if len(held.body) + len(body) < OFF_LOOP_CHARS:
        changes = describe(old, new, max_bytes=budget)
    else:
        # The diff and the check that the changes give the new answer back are Python over the whole answer:
        # in a worker thread the event loop runs between its steps.
        work = functools.partial(describe, old, new, max_bytes=budget)
        changes = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    if changes is None:
        return None
    envelope = changed_envelope(tool, shown.uri, full.uri, changes)
    size = len(json_bytes(envelope))
    if 2 * (shown.changes_bytes + size) > full_size:
        return None
    return ModelView(envelope, full.uri, full.size_bytes, full.tokens, [], "changed", shown.uri), size
