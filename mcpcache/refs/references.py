"""Results by reference, host side: store large results, hand the model a URI, resolve it before dispatch.

docs/protocol.md section 6. `References.for_model` stores a large result before anything is cut and returns
the view the model sees (`_cache_uri` added, oversized members replaced by named markers when the view
has a byte budget). `References.resolve` turns every `X_uri` argument holding our URIs into `X` before a
call is sent, or returns the error envelope to hand the model instead of calling the tool.

What the store keeps per reference: the payload, the exact conversation id, the source (server, tool,
arguments), the time it was made, its size in bytes and in o200k tokens. Besides the payload, a small
receipt is kept longer (in its own group), so a reference whose payload was evicted or cleared is
reported as "evicted" with its source, and the model can call the source again.

Resolving is bounded before anything is read: the references of one call may name at most
`max_resolved_bytes` of JSON (counted from the sizes recorded at minting), each payload is read and
decoded once however often it is named, and every value placed in the call is its own copy.

Every read and write of a view or a resolution goes through the store fence (`mcpcache.stores.fence`, as the
tool cache's do): a deadline on each operation, a circuit after a missed one, and one line per outage. A
failing store shows the model the whole result and refuses a resolution with the store's reason; it never
fails the host's call and never stalls it past the deadline.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio.to_thread

from mcpcache.refs import rereads
from mcpcache.refs.shown import ShownMemory
from mcpcache.refs.uri import CacheUri, PointerError, UriError, is_cache_uri, mint, parse, resolve_pointer
from mcpcache.refs.view import (
    MISSING_URIS_FIELD,
    ModelView,
    Payload,
    Unencodable,
    decode_json,
    encode_json,
    envelope_of,
    json_bytes,
    lenient_json,
    payload_of,
    shorten,
)
from mcpcache.stores.base import Store
from mcpcache.stores.fence import DEFAULT_FENCE, FencedStore, FenceSettings
from mcpcache.stores.items import Item
from mcpcache.stores.opening import default_store
from mcpcache.tokens import OFF_LOOP_CHARS, TokenCount, count_tokens_async

logger = logging.getLogger("mcpcache.refs")

DEFAULT_THRESHOLD_BYTES = 4096
DEFAULT_MAX_URIS_PER_CALL = 256
"""More references than this in one call is not a model passing data along; it is refused."""
DEFAULT_MAX_RESOLVED_BYTES = 64 * 1024 * 1024
"""The JSON bytes the references of one call may place in it (each occurrence counted)."""
MAX_NAME_CHARS = 200
"""Argument names and URIs are quoted in an error envelope up to this many characters, then cut with a note."""
MAX_DETAIL_CHARS = 500
_SHOWN_NAME_CHARS = MAX_NAME_CHARS + 100
"""Argument names are cut where they are found (so the note tells their real length) and may then gain a
suffix (`[3]`, `_uri`); this second, looser cut on the way out is only a safety net."""
MAX_SOURCE_CHARS = 1000
"""A source's arguments are repeated in an envelope whole only up to this much JSON."""
URI_SUFFIX = "_uri"
RECEIPTS_GROUP = "ref-receipts"
GROUP_PREFIX = "refs:"
RECEIPT_TTL_S = 90 * 24 * 3600.0
"""How long a reference is remembered (to tell "evicted" from "unknown") after its payload is gone."""

MissReason = Literal["unknown", "evicted", "other_conversation", "malformed", "too_large"]

_FIX_HINTS: dict[str, str] = {
    "evicted": "The data behind {uri} was evicted. Call {tool} again with the same arguments to get a fresh "
    "_cache_uri, then retry this call with it.",
    "unknown": "No result is stored under {uri}, and none is remembered (it was never minted, or it was "
    "evicted long ago). Use the _cache_uri exactly as a previous tool result gave it, or call the tool that "
    "produced the data again.",
    "other_conversation": "{uri} belongs to another conversation and cannot be used here. Call the tool that "
    "produced the data again in this conversation.",
    "malformed": "{uri} is not a well-formed mcp+cache:// reference ({detail}). Copy the _cache_uri exactly.",
}


def cut(text: str, limit: int = MAX_NAME_CHARS) -> str:
    """`text` if it is short, else its first `limit` characters and a note saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... (cut, {len(text):,} chars)"


def _bounded(value: Any, limit: int) -> Any:
    """`value` (a JSON value) if its JSON fits in `limit` bytes, else a note saying how big it was."""
    try:
        size = len(json_bytes(value))
    except Unencodable:
        return "<not repeated here: no JSON form>"
    if size <= limit:
        return value
    return f"<not repeated here: {size:,} bytes of JSON>"


def _conversation_group(conversation_id: str) -> str:
    # Hashed: a group name must stay short and the raw id may be anything.
    return GROUP_PREFIX + hashlib.sha256(conversation_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _payload_key(token: str) -> str:
    return "r:" + token


def _receipt_key(token: str) -> str:
    return "rr:" + token


@dataclass(frozen=True)
class Source:
    server: str
    tool: str
    arguments: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"server": self.server, "tool": self.tool, "arguments": dict(self.arguments)}

    def bounded_json(self) -> dict[str, Any]:
        """`to_json` for an error envelope: names cut, large or numerous arguments summarised."""
        arguments: Any = dict(self.arguments)
        if _bounded(arguments, MAX_SOURCE_CHARS) is not arguments:
            shown: dict[str, Any] = {}
            for index, (name, value) in enumerate(arguments.items()):
                if index == 20:
                    shown["..."] = f"{len(arguments) - 20} more arguments, not repeated here"
                    break
                shown[cut(str(name))] = _bounded(value, MAX_NAME_CHARS)
            arguments = shown
        return {"server": cut(self.server), "tool": cut(self.tool), "arguments": arguments}


@dataclass(frozen=True)
class Missing:
    argument: str
    uri: str
    reason: MissReason
    detail: str = ""
    source: Source | None = None
    hint: str = ""
    """What to tell the model when the reason's usual fix does not apply (not part of `to_json`)."""

    def to_json(self) -> dict[str, Any]:
        """For the error envelope: every string cut to a bounded length, with a note where it was cut."""
        out: dict[str, Any] = {
            "argument": cut(self.argument, _SHOWN_NAME_CHARS),
            "uri": cut(self.uri),
            "reason": self.reason,
        }
        if self.detail:
            out["detail"] = cut(self.detail, MAX_DETAIL_CHARS)
        if self.source is not None:
            out["source"] = self.source.bounded_json()
        return out


@dataclass(frozen=True)
class Resolution:
    """Either the arguments to send (`ok`), or the envelope to give the model instead of calling."""

    arguments: dict[str, Any] | None
    error: dict[str, Any] | None = None
    resolved: dict[str, list[str]] = field(default_factory=dict)
    """Argument name (X) -> the URIs its value came from."""
    overridden: list[str] = field(default_factory=list)
    """Arguments given both inline and by reference; the reference won."""

    @property
    def ok(self) -> bool:
        return self.arguments is not None


class ResolutionError(Exception):
    pass


class _StoreFailed(OSError):
    """The store did not keep a payload: it failed or missed its deadline (the message says which)."""


class PayloadTooLarge(ValueError):
    """The payload is bigger than the conversation's cap or the store's byte bound: storing it would
    mint a reference to nothing (the store drops an item larger than its bound without a word)."""


@dataclass(frozen=True)
class StoredReference:
    uri: CacheUri
    conversation_id: str
    source: Source
    created_at: float
    size_bytes: int
    tokens: TokenCount


class References:
    """The reference store of one conversation.

    store: where payloads live (default: a SQLite file in the user's cache directory, so a reference
        survives a restart of the host).
    conversation_id: references resolve only in the conversation that minted them.
    threshold_bytes: results whose JSON is at least this big are stored and referenced.
    max_view_bytes: the model's view of a result is shortened (with named markers) to at most this many
        bytes; None never shortens. At least `threshold_bytes`, so nothing is cut that was not stored.
    max_conversation_bytes: payload bytes one conversation may hold; the least recently used go first.
    max_uris_per_call: more `mcp+cache:` strings than this in one call's arguments refuses the call.
    max_resolved_bytes: the JSON bytes the references of one call may resolve to, every occurrence
        counted (the same reference twice counts twice), and also the bytes of the stored results they
        are read from; past it the call is refused before any payload is read.
    shown: remember what the model was shown, so a re-read is shown as "unchanged" or as its changes
        (`mcpcache.refs.shown`; docs/references.md, "Re-reads"). Off (None) by default: with it, the host
        must call `shown.forget(...)` whenever the model's context loses a tool result it was shown.
    fence: how long a store operation may take before the store counts as failing (1 s, plus 0.05 s per MB
        it moves), and how long a store that missed that is left alone (5 s); see `FenceSettings`.
    """

    def __init__(
        self,
        store: Store | None = None,
        *,
        conversation_id: str = "default",
        threshold_bytes: int = DEFAULT_THRESHOLD_BYTES,
        max_view_bytes: int | None = None,
        max_conversation_bytes: int | None = 256 * 1024 * 1024,
        max_uris_per_call: int = DEFAULT_MAX_URIS_PER_CALL,
        max_resolved_bytes: int = DEFAULT_MAX_RESOLVED_BYTES,
        clock: Callable[[], float] = time.time,
        shown: ShownMemory | None = None,
        fence: FenceSettings = DEFAULT_FENCE,
    ) -> None:
        if not isinstance(conversation_id, str):
            raise TypeError("conversation_id must be a string")
        if threshold_bytes < 0:
            raise ValueError("threshold_bytes must be >= 0")
        if max_view_bytes is not None and max_view_bytes < threshold_bytes:
            raise ValueError(
                f"max_view_bytes ({max_view_bytes}) must be at least threshold_bytes ({threshold_bytes}): "
                "a view may only be cut where the full result was stored"
            )
        if max_conversation_bytes is not None and max_conversation_bytes <= 0:
            raise ValueError("max_conversation_bytes must be positive or None")
        if isinstance(max_resolved_bytes, bool) or not isinstance(max_resolved_bytes, int) or max_resolved_bytes <= 0:
            raise ValueError("max_resolved_bytes must be a positive int")
        self.store = store if store is not None else default_store("refs.db")
        self.conversation_id = conversation_id
        self.threshold_bytes = threshold_bytes
        self.max_view_bytes = max_view_bytes
        self.max_conversation_bytes = max_conversation_bytes
        self.max_uris_per_call = max_uris_per_call
        self.max_resolved_bytes = max_resolved_bytes
        self.clock = clock
        self.shown = shown
        self.fence = fence
        self._group = _conversation_group(conversation_id)
        self._fenced = FencedStore(
            self.store,
            who="reference store",
            meanwhile="results are shown whole and references are not resolved",
            logger=logger,
            settings=fence,
            most_bytes=max(self._room() or 0, max_resolved_bytes),
        )

    def for_conversation(self, conversation_id: str) -> References:
        """The same store and settings, for another conversation."""
        return References(
            self.store,
            conversation_id=conversation_id,
            threshold_bytes=self.threshold_bytes,
            max_view_bytes=self.max_view_bytes,
            max_conversation_bytes=self.max_conversation_bytes,
            max_uris_per_call=self.max_uris_per_call,
            max_resolved_bytes=self.max_resolved_bytes,
            clock=self.clock,
            shown=self.shown,
            fence=self.fence,
        )

    # -- minting ------------------------------------------------------------------------------------

    async def put(
        self, payload: Any, *, server: str, tool: str, arguments: Mapping[str, Any] | None
    ) -> StoredReference:
        """Store `payload` whatever its size and return its reference; PayloadTooLarge if it cannot be held,
        OSError if the store failed or did not answer in time."""
        body, exact = encode_json(payload)
        return await self._store(body, exact, server=server, tool=tool, arguments=arguments)

    def _room(self) -> int | None:
        """The largest item this conversation can hold at all."""
        store_limits = getattr(self.store, "limits", None)
        bounds = [self.max_conversation_bytes, getattr(store_limits, "max_bytes", None)]
        known = [bound for bound in bounds if isinstance(bound, int)]
        return min(known) if known else None

    async def _store(
        self, body: bytes, exact: bool, *, server: str, tool: str, arguments: Mapping[str, Any] | None
    ) -> StoredReference:
        tokens = await count_tokens_async(body)
        uri = mint(self.conversation_id)
        now = self.clock()
        source = Source(server, tool, dict(arguments or {}))
        meta: dict[str, Any] = {
            "conversation": self.conversation_id,
            "source": source.to_json(),
            "createdAt": now,
            "size": len(body),
            "tokens": tokens.to_json(),
        }
        if exact:
            meta["codec"] = "json"
        item = Item(meta=meta, body=body, group=self._group, created_at=now)
        room = self._room()
        if room is not None and item.size > room:
            raise PayloadTooLarge(f"a payload of {item.size:,} bytes cannot be held (at most {room:,})")
        if not await self._fenced.save(_payload_key(uri.token), item):
            raise _StoreFailed(f"the reference store {self._fenced.trouble or 'did not keep the payload'}")
        # The receipt's expiry is judged by the store's clock, so it is computed on that clock. A receipt
        # that is not kept costs only the "evicted" report of a reference whose payload later goes.
        receipt_expiry = self.store.now() + RECEIPT_TTL_S
        receipt = Item(meta=meta, body=b"", group=RECEIPTS_GROUP, created_at=now, expires_at=receipt_expiry)
        await self._fenced.save(_receipt_key(uri.token), receipt)
        if self.max_conversation_bytes is not None:
            await self._fenced.trim_group(self._group, self.max_conversation_bytes)
        return StoredReference(uri, self.conversation_id, source, now, len(body), tokens)

    async def for_model(
        self,
        result: Any,
        *,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        tag: str | None = None,
    ) -> ModelView:
        """What the model should see of `result`. Large results are stored first and referenced.

        With `shown` (a `ShownMemory`), an answer this conversation's model already read is shown as
        "unchanged", or as what changed, instead of whole (`mcpcache.refs.rereads`). `tag` is the answer's
        tag; by default the one in the result's `_meta` cache block. An answer with no tag is always whole.

        Never raises on a value the host hands it. A result that cannot be written as JSON or measured
        (see `Unencodable`), or a failing store, never loses the result: the view is then the whole
        payload, unshortened, with no `_cache_uri`, and the reason is logged.
        """
        try:
            if self.shown is not None:
                return await rereads.view(self, self.shown, result, server, tool, arguments, tag)
            return await self._for_model(result, server=server, tool=tool, arguments=arguments)
        except Exception as exc:
            logger.warning(
                "tool %r: result could not be measured or stored (%s: %s); the model gets it whole",
                cut(str(tool)),
                type(exc).__name__,
                cut(_text_of(exc)),
            )
            return _whole(result)

    async def _for_model(
        self, result: Any, *, server: str, tool: str, arguments: Mapping[str, Any] | None
    ) -> ModelView:
        # Encoding (and decoding, in load and resolve) stays on the loop: orjson holds the GIL for the whole
        # call, so in a worker thread it would stall the loop just as long (an 8 MB decode: about 60-100 ms
        # either way). Token counting is what runs long, and it is cut into pieces the loop runs between.
        payload = payload_of(result)
        body, exact = encode_json(payload.value)
        return await self._full_view(payload, body, exact, server=server, tool=tool, arguments=arguments)

    async def _full_view(
        self, payload: Payload, body: bytes, exact: bool, *, server: str, tool: str, arguments: Mapping[str, Any] | None
    ) -> ModelView:
        if payload.is_error or len(body) < self.threshold_bytes:
            tokens = await count_tokens_async(body) if len(body) < 1_000_000 else TokenCount(len(body) // 4, "estimate")
            return ModelView(envelope_of(payload.value, None), None, len(body), tokens, [])
        try:
            stored = await self._store(body, exact, server=server, tool=tool, arguments=arguments)
        except (PayloadTooLarge, _StoreFailed) as exc:
            # A failing store said so once, in its own line (the fence); this is each call's consequence.
            logger.info("tool %r: result not stored by reference (%s); the model gets it whole", cut(str(tool)), exc)
            return ModelView(envelope_of(payload.value, None), None, len(body), await count_tokens_async(body), [])
        except Exception:
            logger.warning("could not store a result by reference; the model gets it whole", exc_info=True)
            return ModelView(envelope_of(payload.value, None), None, len(body), await count_tokens_async(body), [])
        envelope = envelope_of(payload.value, stored.uri)
        shortened: list[str] = []
        if self.max_view_bytes is not None:
            if len(body) < OFF_LOOP_CHARS:
                envelope, shortened = shorten(payload.value, envelope, stored.uri, self.max_view_bytes)
            else:
                # Shortening measures members and counts the tokens of every one it elides, call by call:
                # in a worker thread the event loop runs between those calls.
                cut_view = functools.partial(shorten, payload.value, envelope, stored.uri, self.max_view_bytes)
                envelope, shortened = await anyio.to_thread.run_sync(cut_view, abandon_on_cancel=True)
        return ModelView(envelope, stored.uri, stored.size_bytes, stored.tokens, shortened)

    async def _held(self, token: str) -> Item | None:
        """This conversation's stored payload under `token` (a load counts as a use, so it is kept longer);
        None when it is gone, belongs to another conversation, or the store failed."""
        item = await self._fenced.load(_payload_key(token))
        if not isinstance(item, Item) or item.meta.get("conversation") != self.conversation_id:
            return None
        return item

    # -- resolving ----------------------------------------------------------------------------------

    async def load(self, uri: str | CacheUri) -> Any:
        """The value `uri` names in this conversation. Raises ResolutionError with a Missing in args[0].

        For the host's own use: the per-call bound (`max_resolved_bytes`) does not apply.
        """
        raw = uri if isinstance(uri, str) else str(uri)
        try:
            parsed = parse(raw)
        except UriError as exc:
            raise ResolutionError(Missing(URI_SUFFIX, raw[:MAX_NAME_CHARS], "malformed", str(exc))) from None
        problems, values = await self._fetch([_Use(0, URI_SUFFIX, raw, parsed)], bound=None)
        if problems:
            raise ResolutionError(problems[0][1])
        return values[0]

    async def resolve(self, *, tool: str, arguments: Mapping[str, Any] | None) -> Resolution:
        """The arguments to dispatch, with every `X_uri` holding our references resolved into `X`.

        Only top-level `X_uri` arguments are resolved; other schemes pass through untouched. Any other
        string in our scheme, anywhere in the arguments (a reference in an argument not named `X_uri`,
        nested in a value, as a key, or malformed), is refused: a tool never receives one. If anything
        cannot be resolved, or the call would resolve more than `max_resolved_bytes`, the call must not
        be sent: the resolution then carries the error envelope for the model. Never raises.

        With `shown`, a refusal counts as a turn: its envelope is a tool result the model is shown.
        """
        try:
            resolution = await self._resolve(tool, arguments)
        except Exception as exc:  # a bug, or a host value no walk expected; the call is still not sent blind
            logger.warning("resolving the arguments of %r failed", cut(str(tool)), exc_info=True)
            detail = f"the arguments could not be checked for references ({type(exc).__name__})"
            resolution = self._refusal(tool, [Missing("*", "", "malformed", detail)])
        if not resolution.ok and self.shown is not None:
            self.shown.next_turn(self.conversation_id)
        return resolution

    async def _resolve(self, tool: str, arguments: Mapping[str, Any] | None) -> Resolution:
        if arguments is not None and not isinstance(arguments, Mapping):
            # What a model wrote is not always an object; that must reach it as an error, not crash the host.
            detail = f"the arguments must be a JSON object, not {type(arguments).__name__}"
            return self._refusal(tool, [Missing("*", "", "malformed", detail)])
        args = dict(arguments or {})
        scan = _scan(args, self.max_uris_per_call)
        if scan.count > self.max_uris_per_call:
            detail = f"{scan.count} references in one call; at most {self.max_uris_per_call}"
            return self._refusal(tool, [Missing("*", "", "malformed", detail)])
        fetched, values = await self._fetch(scan.uses, bound=self.max_resolved_bytes)
        problems = sorted(scan.problems + fetched, key=lambda numbered: numbered[0])
        if problems:
            return self._refusal(tool, [missing for _, missing in problems])
        by_name: dict[str, list[Any]] = {}
        for use, value in zip(scan.uses, values, strict=True):
            by_name.setdefault(use.name, []).append(value)
        resolved: dict[str, list[str]] = {}
        overridden: list[str] = []
        for name, (target, is_list) in scan.targets.items():
            if target in args:
                overridden.append(target)
                logger.info("tool %r: both %r and %r given; the reference wins", cut(str(tool)), cut(target), cut(name))
            got = by_name.get(name, [])
            args[target] = got if is_list else got[0]
            del args[name]
            resolved[target] = [use.raw for use in scan.uses if use.name == name]
        return Resolution(args, None, resolved, overridden)

    async def _meta_of(self, tokens: list[str]) -> list[dict[str, Any] | None]:
        """The receipts' metadata (small: no payload is read), None where there is none or the store failed."""
        items = await self._fenced.load_many([_receipt_key(token) for token in tokens])
        return [dict(item.meta) if item is not None else None for item in items]

    async def _fetch(self, uses: list[_Use], *, bound: int | None) -> tuple[list[tuple[int, Missing]], list[Any]]:
        """The values `uses` name, in order; or the numbered problems that keep them from resolving.

        Every size is counted before the payload it belongs to is read: first from the receipts, then (for
        a reference without one) from its payload alone, one at a time. Each payload is decoded once.
        """
        problems: list[tuple[int, Missing]] = []
        tokens = list(dict.fromkeys(use.uri.token for use in uses))
        entries = {token: _Entry(meta) for token, meta in zip(tokens, await self._meta_of(tokens), strict=True)}

        def miss(use: _Use, reason: MissReason, detail: str = "", source: Source | None = None) -> None:
            problems.append((use.seq, Missing(use.argument, use.raw, reason, detail, source)))

        def over(entries_in_use: dict[str, _Entry]) -> int | None:
            """The bytes to resolve, when they are past the bound (counting only what is known so far)."""
            if bound is None:
                return None
            whole = sum(
                entries_in_use[u.uri.token].size or 0
                for u in uses
                if u.uri.token in entries_in_use and u.uri.pointer is None
            )
            read = sum(entry.size or 0 for entry in entries_in_use.values())
            worst = max(whole, read)
            return worst if worst > bound else None

        # 1. Refuse what the receipts already tell, and count, before reading any payload.
        for entry in entries.values():
            if entry.meta is not None and entry.meta.get("conversation") != self.conversation_id:
                entry.state = "foreign"
        live = {token: entry for token, entry in entries.items() if entry.state == "ok"}
        total = over(live)
        # 2. A reference without a usable receipt: its payload, one at a time, counting as it goes.
        for token, entry in live.items():
            if total is not None:
                break
            if entry.size is not None:
                continue
            await self._read(token, entry)
            if entry.state == "ok":
                total = over({t: e for t, e in live.items() if e.state == "ok"})
        if total is None:
            # 3. The payloads still unread, in one round trip: what the receipts said fits the bound.
            unread = [token for token, entry in live.items() if entry.state == "ok" and entry.item is None]
            if unread:
                moving = sum(live[token].size or 0 for token in unread)
                items = await self._fenced.look([_payload_key(token) for token in unread], moving=moving)
                if items is None:
                    for token in unread:
                        live[token].fail(self._store_trouble())
                else:
                    for token, item in zip(unread, items, strict=True):
                        live[token].take(item, self.conversation_id)
            total = over({t: e for t, e in live.items() if e.state == "ok"})  # sizes as read, not as told
        if total is not None:
            for token in live:
                live[token].item = None  # nothing is decoded
            detail = (
                f"the references in this call name {total:,} bytes of JSON; at most {bound:,} may be resolved "
                "in one call (each use of a reference counts, the same one twice counts twice)"
            )
            problems.append((-1, Missing("*", "", "too_large", detail)))
        # 4. Decode each payload once; report per use what cannot be had.
        for use in uses:
            entry = entries[use.uri.token]
            if entry.state == "ok" and entry.item is not None and entry.document is _UNSET:
                entry.decode()
            if entry.state == "foreign":
                miss(use, "other_conversation")  # nothing about the entry (not even its source) is revealed
            elif entry.state == "unknown":
                miss(use, "unknown", entry.detail)
            elif entry.state == "evicted":
                miss(use, "evicted", entry.detail, entry.source)
        if problems:
            return problems, []
        # 5. Pointers, and the bytes each use places (a fragment counts the part it names, measured).
        parts: list[Any] = []
        placed = 0
        measured: dict[tuple[str, str], int] = {}
        for use in uses:
            entry = entries[use.uri.token]
            part = entry.document
            if use.uri.pointer is not None:
                try:
                    part = resolve_pointer(part, use.uri.pointer)
                except PointerError as exc:
                    miss(use, "malformed", f"the fragment names nothing: {exc}", entry.source)
                    continue
            if use.uri.pointer is None:
                placed += entry.size or 0
            else:
                key = (use.uri.token, use.uri.pointer)
                if key not in measured:
                    measured[key] = len(json_bytes(part))
                placed += measured[key]
            parts.append(part)
        if problems:
            return problems, []
        if bound is not None and placed > bound:
            detail = (
                f"the references in this call resolve to {placed:,} bytes of JSON; at most {bound:,} may be "
                "resolved in one call (each use of a reference counts, the same one twice counts twice)"
            )
            return [(-1, Missing("*", "", "too_large", detail))], []
        # 6. Each use gets its own value: the first use of a payload the decoded one, every later use a copy.
        values: list[Any] = []
        handed: set[str] = set()
        for use, part in zip(uses, parts, strict=True):
            values.append(copy_json(part) if use.uri.token in handed else part)
            handed.add(use.uri.token)
        return [], values

    async def _read(self, token: str, entry: _Entry) -> None:
        item = await self._fenced.load(_payload_key(token))
        if item is False:
            entry.fail(self._store_trouble())
            return
        entry.take(item, self.conversation_id)

    def _store_trouble(self) -> str:
        return f"the reference store {self._fenced.trouble or 'failed'}"

    def _refusal(self, tool: str, problems: list[Missing]) -> Resolution:
        tool = cut(str(tool))
        described = ", ".join(f"{cut(p.argument, _SHOWN_NAME_CHARS)} ({p.reason})" for p in problems)
        noun = "reference" if len(problems) == 1 else "references"
        summary = f"{len(problems)} cache {noun} could not be resolved: {described}"
        if len(problems) == 1 and problems[0].argument == "*":
            summary = cut(problems[0].detail, MAX_DETAIL_CHARS)  # about the call as a whole, not one reference
        hints = []
        for p in problems:
            source_tool = cut(p.source.tool) if p.source is not None else "the tool that produced it"
            detail = cut(p.detail, MAX_DETAIL_CHARS)
            if p.reason == "too_large":
                hint = (
                    f"{detail}. Pass fewer references, or fragments (#/json/pointer) naming only the parts the "
                    "tool needs."
                )
            elif p.hint:
                hint = cut(p.hint, MAX_DETAIL_CHARS)
            elif p.reason == "malformed" and not p.uri:
                hint = f"{detail}."
                if p.argument != "*":
                    hint += " Pass a single reference, or a list made only of references."
            else:
                hint = _FIX_HINTS[p.reason].format(uri=cut(p.uri), tool=source_tool, detail=detail)
            hints.append(f"{cut(p.argument, _SHOWN_NAME_CHARS)}: {hint}")
        envelope = {
            "error": f"invalid_args: {tool} was not called; {summary}",
            MISSING_URIS_FIELD: [p.to_json() for p in problems],
            "fix_hint": " ".join(hints),
        }
        return Resolution(None, envelope)

    # -- housekeeping -------------------------------------------------------------------------------

    async def clear_conversation(self, conversation_id: str | None = None) -> int:
        """Drop every payload of a conversation (default: this one); their receipts stay, so a later
        use of one of its references reads as evicted rather than unknown."""
        group = _conversation_group(conversation_id if conversation_id is not None else self.conversation_id)
        return await self.store.remove_group(group)

    async def evict_older_than(self, max_age_s: float) -> int:
        """Drop the payloads (of every conversation in the store) made more than `max_age_s` ago."""
        return await self.store.remove_created_before(GROUP_PREFIX, self.clock() - max_age_s)

    async def stats(self) -> dict[str, int]:
        mine = await self.store.usage(self._group)
        return {"items": mine.items, "bytes": mine.bytes}


def _source_of(meta: Mapping[str, Any]) -> Source | None:
    raw = meta.get("source")
    if not isinstance(raw, Mapping):
        return None
    server, tool, arguments = raw.get("server"), raw.get("tool"), raw.get("arguments")
    if isinstance(server, str) and isinstance(tool, str) and isinstance(arguments, Mapping):
        return Source(server, tool, dict(arguments))
    return None


def _text_of(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _whole(result: Any) -> ModelView:
    """The view of a result that could not be measured or stored: all of it, no reference, no cut."""
    try:
        envelope = envelope_of(result, None)
    except Exception:
        envelope = {"result": result}
    try:
        size = len(lenient_json(result))  # ASCII: the lenient writer escapes everything else
    except Exception:
        size = 0
    return ModelView(envelope, None, size, TokenCount(size // 4, "estimate"), [])


def copy_json(value: Any) -> Any:
    """A copy of a decoded JSON value sharing no list or object with it (scalars are immutable, so shared).

    Without recursion: a stored payload may nest deeper than Python's recursion limit allows a copy to go.
    """
    if not isinstance(value, dict | list):
        return value
    root: dict[Any, Any] | list[Any] = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        source, copy = stack.pop()
        pairs = source.items() if isinstance(source, dict) else enumerate(source)
        for key, member in pairs:
            if isinstance(member, dict | list):
                child: dict[Any, Any] | list[Any] = {} if isinstance(member, dict) else []
                stack.append((member, child))
                member = child
            if isinstance(copy, dict):
                copy[key] = member
            else:
                copy.append(member)
    return root


_UNSET: Any = object()
EntryState = Literal["ok", "foreign", "unknown", "evicted"]


class _Entry:
    """What one call learns about one token: receipt, payload (until decoded), decoded document."""

    def __init__(self, meta: dict[str, Any] | None) -> None:
        self.meta = meta
        self.state: EntryState = "ok"
        self.detail = ""
        self.item: Item | None = None
        self.exact = False
        self.document: Any = _UNSET
        size = meta.get("size") if meta is not None else None
        self.size: int | None = size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None

    @property
    def source(self) -> Source | None:
        return _source_of(self.meta) if self.meta is not None else None

    def fail(self, detail: str) -> None:
        self.state, self.detail, self.item = "unknown", detail, None

    def take(self, item: Item | None, conversation_id: str) -> None:
        if item is None:
            self.state = "evicted" if self.meta is not None else "unknown"
            return
        meta = dict(item.meta)
        if meta.get("conversation") != conversation_id:
            self.state = "foreign"
            return
        if self.meta is None:
            self.meta = meta
        self.item, self.exact, self.size = item, meta.get("codec") == "json", len(item.body)

    def decode(self) -> None:
        assert self.item is not None
        try:
            self.document = decode_json(self.item.body, exact=self.exact)
        except Exception:  # ValueError from both decoders; RecursionError for a payload nested too deep
            self.state, self.detail = "evicted", "the stored payload could not be read"
        self.item = None  # the bytes are not kept once decoded


@dataclass(frozen=True)
class _Use:
    """One occurrence of a reference in a call."""

    seq: int
    """Its place among everything in our scheme the arguments hold, so problems are reported in order."""
    argument: str
    raw: str
    uri: CacheUri
    name: str = ""
    """The `X_uri` argument it came from."""


_MISPLACED_TOP = "a reference is resolved only in an argument named X_uri; give it as {name}_uri"
_MISPLACED_NESTED = (
    "a reference is resolved only as a top-level X_uri argument, not inside another value; pass that data as "
    "its own X_uri argument"
)
_MISPLACED_KEY = "a key in the mcp+cache: scheme is refused: nothing resolves it, and the tool would get it as a string"
_MIXED_LIST = "a list of references must hold only mcp+cache:// references"


@dataclass
class _Scan:
    """Everything in our scheme that one call's arguments hold, found without asking any store."""

    limit: int
    count: int = 0
    uses: list[_Use] = field(default_factory=list)
    problems: list[tuple[int, Missing]] = field(default_factory=list)
    targets: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """`X_uri` -> (X, whether it held a list)."""

    def use(self, argument: str, name: str, raw: str) -> None:
        self.count += 1
        if self.count > self.limit:
            return  # only counted: the call is refused as a whole
        try:
            self.uses.append(_Use(self.count, argument, raw, parse(raw), name))
        except UriError as exc:
            self.problems.append((self.count, Missing(argument, raw, "malformed", str(exc))))

    def misplaced(self, argument: str, raw: str, detail: str) -> None:
        self.count += 1
        if self.count > self.limit:
            return
        try:
            parse(raw)
        except UriError as exc:
            detail += f"; besides, it is malformed: {exc}"
        hint = f"{detail}. A tool is never given an mcp+cache: string as it is."
        self.problems.append((self.count, Missing(argument, raw, "malformed", detail, hint=hint)))

    def mixed(self, argument: str, how_many: int) -> None:
        self.count += how_many
        if self.count <= self.limit:
            self.problems.append((self.count, Missing(argument, "", "malformed", _MIXED_LIST)))


def _child(path: str, part: str) -> str:
    """`path` extended by `part`, but never much longer than a name is ever shown (deep nesting stays cheap)."""
    if len(path) > MAX_NAME_CHARS:
        return path if path.endswith("...") else path + "..."
    return path + cut(part)


def _walk(scan: _Scan, shown: str, value: Any) -> None:
    """Refuse every string in our scheme inside `value` (keys too), at any depth, without recursion."""
    if isinstance(value, str):
        if is_cache_uri(value):
            scan.misplaced(shown, value, _MISPLACED_TOP.format(name=shown))
        return
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [(shown, value)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, Mapping | list | tuple | set | frozenset) or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Mapping):
            members: list[tuple[str, Any]] = []
            for key, member in node.items():
                key_text = key if isinstance(key, str) else _text_of(key)
                member_path = _child(path, "." + key_text)
                if is_cache_uri(key):
                    scan.misplaced(member_path, key, _MISPLACED_KEY)
                members.append((member_path, member))
        elif isinstance(node, list | tuple):
            members = [(_child(path, f"[{index}]"), member) for index, member in enumerate(node)]
        else:
            members = [(_child(path, "[*]"), member) for member in node]
        for member_path, member in members:
            if isinstance(member, str):
                if is_cache_uri(member):
                    scan.misplaced(member_path, member, _MISPLACED_NESTED)
            elif isinstance(member, Mapping | list | tuple | set | frozenset):
                stack.append((member_path, member))


def _scan(args: Mapping[Any, Any], limit: int) -> _Scan:
    scan = _Scan(limit)
    for name, value in args.items():
        shown = cut(name if isinstance(name, str) else _text_of(name))
        if is_cache_uri(name):
            scan.misplaced(shown, name, _MISPLACED_KEY)
        if isinstance(name, str) and name.endswith(URI_SUFFIX) and len(name) > len(URI_SUFFIX):
            target = name[: -len(URI_SUFFIX)]
            if isinstance(value, str) and is_cache_uri(value):
                scan.targets[name] = (target, False)
                scan.use(shown, name, value)
                continue
            if isinstance(value, list) and any(is_cache_uri(item) for item in value):
                ours = [item for item in value if is_cache_uri(item)]
                if len(ours) == len(value):
                    scan.targets[name] = (target, True)
                    for index, item in enumerate(value):
                        scan.use(f"{shown}[{index}]", name, item)
                else:
                    scan.mixed(shown, len(ours))
                continue
        _walk(scan, shown, value)
    return scan
