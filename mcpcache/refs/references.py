"""Results by reference, host side: store large results, hand the model a URI, resolve it before dispatch.

PROTOCOL.md section 6. `References.for_model` stores a large result before anything is cut and returns
the view the model sees (`_cache_uri` added, oversized members replaced by named markers when the view
has a byte budget). `References.resolve` turns every `X_uri` argument holding our URIs into `X` before a
call is sent, or returns the error envelope to hand the model instead of calling the tool.

What the store keeps per reference: the payload, the exact conversation id, the source (server, tool,
arguments), the time it was made, its size in bytes and in o200k tokens. Besides the payload, a small
receipt is kept longer (in its own group), so a reference whose payload was evicted or cleared is
reported as "evicted" with its source, and the model can call the source again.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mcpcache.paths import default_store
from mcpcache.refs.uri import CacheUri, PointerError, UriError, is_cache_uri, mint, parse, resolve_pointer
from mcpcache.refs.view import ModelView, decode_json, encode_json, envelope_of, payload_of, shorten
from mcpcache.stores.base import Item, Store
from mcpcache.tokens import TokenCount, count_tokens

logger = logging.getLogger("mcpcache.refs")

DEFAULT_THRESHOLD_BYTES = 4096
DEFAULT_MAX_URIS_PER_CALL = 256
"""More references than this in one call is not a model passing data along; it is refused."""
URI_SUFFIX = "_uri"
RECEIPTS_GROUP = "ref-receipts"
GROUP_PREFIX = "refs:"
RECEIPT_TTL_S = 90 * 24 * 3600.0
"""How long a reference is remembered (to tell "evicted" from "unknown") after its payload is gone."""

MissReason = Literal["unknown", "evicted", "other_conversation", "malformed"]

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


@dataclass(frozen=True)
class Missing:
    argument: str
    uri: str
    reason: MissReason
    detail: str = ""
    source: Source | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"argument": self.argument, "uri": self.uri, "reason": self.reason}
        if self.detail:
            out["detail"] = self.detail
        if self.source is not None:
            out["source"] = self.source.to_json()
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
        clock: Callable[[], float] = time.time,
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
        self.store = store if store is not None else default_store("refs.db")
        self.conversation_id = conversation_id
        self.threshold_bytes = threshold_bytes
        self.max_view_bytes = max_view_bytes
        self.max_conversation_bytes = max_conversation_bytes
        self.max_uris_per_call = max_uris_per_call
        self.clock = clock
        self._group = _conversation_group(conversation_id)

    def for_conversation(self, conversation_id: str) -> References:
        """The same store and settings, for another conversation."""
        return References(
            self.store,
            conversation_id=conversation_id,
            threshold_bytes=self.threshold_bytes,
            max_view_bytes=self.max_view_bytes,
            max_conversation_bytes=self.max_conversation_bytes,
            max_uris_per_call=self.max_uris_per_call,
            clock=self.clock,
        )

    # -- minting ------------------------------------------------------------------------------------

    async def put(
        self, payload: Any, *, server: str, tool: str, arguments: Mapping[str, Any] | None
    ) -> StoredReference:
        """Store `payload` whatever its size and return its reference; PayloadTooLarge if it cannot be held."""
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
        tokens = count_tokens(body.decode())
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
        await self.store.save(_payload_key(uri.token), item)
        # The receipt's expiry is judged by the store's clock, so it is computed on that clock.
        receipt_expiry = self.store.now() + RECEIPT_TTL_S
        receipt = Item(meta=meta, body=b"", group=RECEIPTS_GROUP, created_at=now, expires_at=receipt_expiry)
        await self.store.save(_receipt_key(uri.token), receipt)
        if self.max_conversation_bytes is not None:
            await self.store.trim_group(self._group, self.max_conversation_bytes)
        return StoredReference(uri, self.conversation_id, source, now, len(body), tokens)

    async def for_model(
        self, result: Any, *, server: str, tool: str, arguments: Mapping[str, Any] | None = None
    ) -> ModelView:
        """What the model should see of `result`. Large results are stored first and referenced.

        A failing store never loses the result: the view is then the whole payload, unshortened.
        """
        payload = payload_of(result)
        body, exact = encode_json(payload.value)
        if payload.is_error or len(body) < self.threshold_bytes:
            tokens = count_tokens(body.decode()) if len(body) < 1_000_000 else TokenCount(len(body) // 4, "estimate")
            return ModelView(envelope_of(payload.value, None), None, len(body), tokens, [])
        try:
            stored = await self._store(body, exact, server=server, tool=tool, arguments=arguments)
        except PayloadTooLarge as exc:
            logger.info("tool %r: result not stored by reference (%s); the model gets it whole", tool, exc)
            return ModelView(envelope_of(payload.value, None), None, len(body), count_tokens(body.decode()), [])
        except Exception:
            logger.warning("could not store a result by reference; the model gets it whole", exc_info=True)
            return ModelView(envelope_of(payload.value, None), None, len(body), count_tokens(body.decode()), [])
        envelope = envelope_of(payload.value, stored.uri)
        shortened: list[str] = []
        if self.max_view_bytes is not None:
            envelope, shortened = shorten(payload.value, envelope, stored.uri, self.max_view_bytes)
        return ModelView(envelope, stored.uri, stored.size_bytes, stored.tokens, shortened)

    # -- resolving ----------------------------------------------------------------------------------

    async def load(self, uri: str | CacheUri) -> Any:
        """The value `uri` names in this conversation. Raises ResolutionError with a Missing in args[0]."""
        missing, value = await self._load(URI_SUFFIX, uri if isinstance(uri, str) else str(uri))
        if missing is not None:
            raise ResolutionError(missing)
        return value

    async def _receipt(self, token: str) -> dict[str, Any] | None:
        try:
            item = await self.store.load(_receipt_key(token))
        except Exception:
            return None
        return dict(item.meta) if item is not None else None

    async def _load(self, argument: str, raw: str) -> tuple[Missing | None, Any]:
        try:
            uri = parse(raw)
        except UriError as exc:
            return Missing(argument, raw[:200], "malformed", str(exc)), None
        try:
            item = await self.store.load(_payload_key(uri.token))
        except Exception as exc:
            logger.warning("reference store failed while resolving %s", raw, exc_info=True)
            return Missing(argument, raw, "unknown", f"the reference store failed: {type(exc).__name__}"), None
        meta = dict(item.meta) if item is not None else await self._receipt(uri.token)
        if meta is None:
            return Missing(argument, raw, "unknown"), None
        if meta.get("conversation") != self.conversation_id:
            # Nothing about another conversation's entry (not even its source) is revealed.
            return Missing(argument, raw, "other_conversation"), None
        source = _source_of(meta)
        if item is None:
            return Missing(argument, raw, "evicted", source=source), None
        try:
            value = decode_json(item.body, exact=meta.get("codec") == "json")
        except ValueError:  # what both decoders raise on bytes that are not JSON
            return Missing(argument, raw, "evicted", "the stored payload could not be read", source), None
        if uri.pointer is not None:
            try:
                value = resolve_pointer(value, uri.pointer)
            except PointerError as exc:
                return Missing(argument, raw, "malformed", f"the fragment names nothing: {exc}", source), None
        return None, value

    async def resolve(self, *, tool: str, arguments: Mapping[str, Any] | None) -> Resolution:
        """The arguments to dispatch, with every `X_uri` holding our references resolved into `X`.

        Only top-level arguments are looked at; anything else (other schemes, nested values) passes
        through untouched. If any reference cannot be resolved the call must not be sent: the
        resolution then carries the error envelope for the model.
        """
        if arguments is not None and not isinstance(arguments, Mapping):
            # What a model wrote is not always an object; that must reach it as an error, not crash the host.
            detail = f"the arguments must be a JSON object, not {type(arguments).__name__}"
            return self._refusal(tool, [Missing("*", "", "malformed", detail)])
        args = dict(arguments or {})
        targets: list[tuple[str, str, list[str], bool]] = []  # (X_uri, X, uris, is_list)
        problems: list[Missing] = []
        count = 0
        for name, value in args.items():
            if not isinstance(name, str) or not name.endswith(URI_SUFFIX) or len(name) == len(URI_SUFFIX):
                continue
            target = name[: -len(URI_SUFFIX)]
            if isinstance(value, str):
                if is_cache_uri(value):
                    targets.append((name, target, [value], False))
                    count += 1
            elif isinstance(value, list) and any(is_cache_uri(v) for v in value):
                if not all(is_cache_uri(v) for v in value):
                    problems.append(
                        Missing(name, "", "malformed", "a list of references must hold only mcp+cache:// references")
                    )
                    continue
                targets.append((name, target, list(value), True))
                count += len(value)
        if count > self.max_uris_per_call:
            return self._refusal(
                tool,
                [Missing("*", "", "malformed", f"{count} references in one call; at most {self.max_uris_per_call}")],
            )
        resolved: dict[str, list[str]] = {}
        overridden: list[str] = []
        for name, target, uris, is_list in targets:
            values: list[Any] = []
            for index, uri in enumerate(uris):
                missing, value = await self._load(f"{name}[{index}]" if is_list else name, uri)
                if missing is not None:
                    problems.append(missing)
                else:
                    values.append(value)
            if problems:
                continue
            if target in args:
                overridden.append(target)
                logger.info("tool %r: both %r and %r given; the reference wins", tool, target, name)
            args[target] = values if is_list else values[0]
            del args[name]
            resolved[target] = uris
        if problems:
            return self._refusal(tool, problems)
        return Resolution(args, None, resolved, overridden)

    def _refusal(self, tool: str, problems: list[Missing]) -> Resolution:
        described = ", ".join(f"{p.argument} ({p.reason})" for p in problems)
        noun = "reference" if len(problems) == 1 else "references"
        summary = f"{len(problems)} cache {noun} could not be resolved: {described}"
        if len(problems) == 1 and problems[0].argument == "*":
            summary = problems[0].detail  # about the call as a whole, not one reference
        hints = []
        for p in problems:
            source_tool = p.source.tool if p.source is not None else "the tool that produced it"
            if p.reason == "malformed" and not p.uri:
                hint = f"{p.detail}."
                if p.argument != "*":
                    hint += " Pass a single reference, or a list made only of references."
            else:
                hint = _FIX_HINTS[p.reason].format(uri=p.uri, tool=source_tool, detail=p.detail)
            hints.append(f"{p.argument}: {hint}")
        envelope = {
            "error": f"invalid_args: {tool} was not called; {summary}",
            "_missing_uris": [p.to_json() for p in problems],
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
