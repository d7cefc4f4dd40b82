"""Caching views of the MCP SDK's `Client` and `ClientSession` and of FastMCP's `Client`.

Each view's `call_tool` takes what the wrapped object's `call_tool` takes (plus `cache_mode=`) and
returns what it returns; everything else is forwarded to the wrapped object. All three speak to the
server through the SDK's `ClientSession`, so one `Connection` implementation serves them; they differ
only in the ordinary-call path they keep (the SDK `Client` drives multi-round-trip input and
extension claims, FastMCP parses `.data`).

A conditional call goes out through `session.send_request` rather than `session.call_tool`, because the
latter validates every answer against the tool's output schema and a not-modified reply's
`{"kind": ...}` need not satisfy it. Full answers to a conditional call are validated afterwards with
the session's own `validate_tool_result`, and a served copy is validated the same way, so the caller
sees exactly the checks it would have without the cache.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, final

import anyio
import mcp_types as mt
from mcp import Client as MCPClient
from mcp import ClientSession, StdioServerParameters
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from mcpcache.client import transport_guard
from mcpcache.client.contracts import ViewCache
from mcpcache.client.identity import connection_server_id, stdio_server_id, url_server_id
from mcpcache.client.keys import NamedCall
from mcpcache.client.outcomes import CallOutcome
from mcpcache.client.policy import CacheMode
from mcpcache.client.schemas import SCHEMAS
from mcpcache.protocol import requested_etag

logger = logging.getLogger("mcpcache.client")

_FRESHNESS_ENDING = (
    mt.ResourceUpdatedNotification,
    mt.ResourceListChangedNotification,
    mt.ToolListChangedNotification,
    mt.PromptListChangedNotification,
)

PlainSend = Callable[[str, dict[str, Any], dict[str, Any] | None], Awaitable[mt.CallToolResult]]


@final
@dataclass(frozen=True)
class CachedCall:
    """A result together with what the cache did to produce it."""

    result: Any
    outcome: CallOutcome


def request_options(read_timeout_seconds: float | None, progress_callback: Any) -> dict[str, Any]:
    """What a conditional request passes on to `session.send_request` of the caller's per-call options."""
    options: dict[str, Any] = {}
    if read_timeout_seconds is not None:
        options["request_read_timeout_seconds"] = read_timeout_seconds
    if progress_callback is not None:
        options["progress_callback"] = progress_callback
    return options


def _session_default_timeout(session: ClientSession) -> float | None:
    # Private: the SDK keeps the client's default read timeout only here, and a follower that waits on
    # another call's request must know its own bound (tests/client/test_private_apis.py fails if it moves).
    value = getattr(session, "_session_read_timeout_seconds", None)
    return float(value) if isinstance(value, int | float) else None


def _call_tool_adapter(session: ClientSession) -> Any:
    # Private: the session's parser for every shape a tools/call answer may take at the negotiated version
    # (a tool result, a request for input, an extension's claimed result). Parsing with it tells a plain
    # answer from the others without sending the call twice (tests/client/test_private_apis.py).
    return getattr(session, "_call_tool_adapter", mt.CallToolResult)


class _SessionConnection:
    """`Connection` over one `ClientSession`, for one call's options."""

    def __init__(self, view: _CachedView, send_plain: PlainSend, request_options: Mapping[str, Any]) -> None:
        self._view = view
        self._send_plain = send_plain
        self._options = dict(request_options)
        explicit = self._options.pop("request_read_timeout_seconds", None)
        self.timeout_s: float | None = explicit if explicit is not None else _session_default_timeout(view.session)
        self.server_id = view.server_id
        self.era = view.session.protocol_version or "unknown"

    async def send_plain(self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None) -> mt.CallToolResult:
        return await self._send_plain(name, arguments, meta)

    async def send(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None, timeout_s: float | None
    ) -> mt.CallToolResult | None:
        # `session.send_request`, not `session.call_tool`: the latter checks every answer against the tool's
        # output schema, which a not-modified reply need not satisfy, and raises before the cache can see it.
        request = mt.CallToolRequest(params=mt.CallToolRequestParams(name=name, arguments=arguments, _meta=meta))
        options = dict(self._options)
        if timeout_s is not None:
            options["request_read_timeout_seconds"] = timeout_s
        session = self._view.session
        try:
            answer = await session.send_request(request, _call_tool_adapter(session), **options)
        except MCPError as exc:
            if exc.code == mt.HEADER_MISMATCH:
                return None
            raise
        except ValidationError:
            if requested_etag(meta, self._view.cache.meta_key) is None:
                raise
            # A reply to a conditional request that the session cannot parse at its version (a not-modified
            # stub whose structuredContent is not an object, on 2025-11-25) is no answer: the call is asked
            # again through the client's own path, without the tag, and meets exactly the client's checks.
            logger.info("tool %r: the reply to a conditional call does not parse; asking again without a tag", name)
            return None
        if isinstance(answer, mt.CallToolResult):
            return answer
        # Not a plain tool answer (the server asks for input, or an extension claims the result): the
        # client's own path knows what to do with it, and asks again.
        logger.info("tool %r: the answer is not a plain tool result; calling again through the client", name)
        return None

    async def validate(self, name: str, result: mt.CallToolResult) -> None:
        session = self._view.session
        # The SDK's own table of the schemas it checks against (filled by list_tools); when it does not hold
        # the tool yet, the SDK's check lists the tools first, so it runs.
        schemas = getattr(session, "_tool_output_schemas", None)
        if isinstance(schemas, dict) and name in schemas and result.structured_content is not None:
            schema = schemas[name]
            if schema is None or SCHEMAS.accepts(schema, result.structured_content):
                return
        await session.validate_tool_result(name, result)

    async def read_only(self, name: str) -> bool | None:
        return await self._view.read_only(name)

    async def idempotent(self, name: str) -> bool | None:
        return await self._view.idempotent(name)

    async def declarations(self) -> Mapping[str, Any] | None:
        return await self._view.declarations()


class _SessionHook:
    """What one session's change notifications reach: each (cache, server) that wrapped the session, once.

    The SDK offers no public way to add a message handler to a running session, so one hook per session
    wraps its handler attribute (which the SDK calls for every server notification) and every view
    registers with it. Views are many and short-lived (a view per request is a natural use of `wrap()`),
    so the hook holds what a notification must reach, (cache, server id) pairs, and the views only weakly.
    """

    _ATTRIBUTE = "_mcpcache_hook"

    def __init__(self, session: ClientSession, inner: Callable[[Any], Awaitable[None]]) -> None:
        self._session = session
        self._inner = inner
        self._targets: dict[tuple[int, str], tuple[ViewCache, str]] = {}
        self._views: weakref.WeakSet[_CachedView] = weakref.WeakSet()

    @classmethod
    def of(cls, session: ClientSession) -> _SessionHook:
        hook = getattr(session, cls._ATTRIBUTE, None)
        if isinstance(hook, _SessionHook):
            return hook
        hook = cls(session, session._message_handler)
        setattr(session, cls._ATTRIBUTE, hook)
        session._message_handler = hook
        # Once per session, as the hook: one failed HTTP exchange must not end a session the cache calls
        # through (and only such a session: others keep the SDK as shipped).
        transport_guard.guard_session(session)
        return hook

    def register(self, view: _CachedView) -> None:
        self._views.add(view)
        self._targets.setdefault((id(view.cache), view.server_id), (view.cache, view.server_id))

    async def __call__(self, message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            for view in list(self._views):
                view._annotations = None  # the annotations may have changed with the list
                view._declared = None
            for cache, _ in list(self._targets.values()):
                cache.forget_validations()  # and the output schemas stored answers were checked against
        if isinstance(message, _FRESHNESS_ENDING):
            for cache, server_id in list(self._targets.values()):
                try:
                    await cache.end_freshness(server_id, self._session.protocol_version)
                except Exception:
                    logger.warning("could not record a change notification", exc_info=True)
        await self._inner(message)


class _CachedView:
    """What the three views share: identity, notifications, annotations, forwarding."""

    def __init__(self, cache: ViewCache, wrapped: Any, server_id: str | None) -> None:
        self._cache = cache
        self._wrapped = wrapped
        self._server_id = server_id
        self._annotations: dict[str, mt.ToolAnnotations | None] | None = None
        self._declared: dict[str, Any] | None = None
        self._listing = anyio.Lock()
        self._hooked: ClientSession | None = None
        self.last_outcome: CallOutcome | None = None
        """The outcome of this view's most recent call (under concurrency, use `call()` instead)."""

    @property
    def cache(self) -> ViewCache:
        return self._cache

    @property
    def wrapped(self) -> Any:
        return self._wrapped

    @property
    def session(self) -> ClientSession:
        raise NotImplementedError

    def _derive_server_id(self) -> str:
        return connection_server_id(self.session, type(self._wrapped).__name__)

    @property
    def server_id(self) -> str:
        if self._server_id is None:
            self._server_id = self._derive_server_id()
        return self._server_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)

    def _hook_notifications(self) -> None:
        """Route the server's change notifications to this view's cache (see `_SessionHook`), once per
        session (a client that reconnects gets a new session, which is hooked on its first call)."""
        session = self.session
        if self._hooked is not session:
            _SessionHook.of(session).register(self)
            self._hooked = session

    def _hook_if_connected(self) -> None:
        """Hook notifications now if the client is connected (otherwise the first call does it), so a
        change announced between `wrap()` and the first call is not missed."""
        try:
            self._hook_notifications()
        except RuntimeError:
            logger.debug("client not connected yet; notifications are hooked on the first call")

    async def read_only(self, name: str) -> bool | None:
        annotations = await self._annotations_of(name)
        return annotations.read_only_hint if annotations is not None else None

    async def idempotent(self, name: str) -> bool | None:
        annotations = await self._annotations_of(name)
        return annotations.idempotent_hint if annotations is not None else None

    async def declarations(self) -> Mapping[str, Any] | None:
        """Each tool's cache declaration in `tools/list`, by name (None: the tools could not be listed)."""
        if self._declared is None and not await self._list():
            return None
        return self._declared

    async def _annotations_of(self, name: str) -> mt.ToolAnnotations | None:
        if self._annotations is None and not await self._list():
            return None
        return self._annotations.get(name) if self._annotations is not None else None

    async def _list(self) -> bool:
        """List the tools once for every concurrent caller: a caller must never read a half-filled table (it
        would take a read-only tool for an unknown one). False when the listing failed."""
        async with self._listing:
            if self._annotations is not None and self._declared is not None:
                return True
            try:
                tools = await self._list_tools()
            except Exception:
                logger.warning("could not list tools to read their annotations", exc_info=True)
                return False
            key = self._cache.meta_key
            self._annotations = {tool.name: tool.annotations for tool in tools}
            self._declared = {tool.name: tool.meta[key] for tool in tools if tool.meta and key in tool.meta}
            return True

    async def _list_tools(self) -> list[mt.Tool]:
        tools: list[mt.Tool] = []
        cursor: str | None = None
        while True:
            params = mt.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self.session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def call_raw(
        self, name: str, arguments: dict[str, Any] | None = None, *, cache_mode: CacheMode = "use"
    ) -> CachedCall:
        """A call through the cache whose result is the raw `mcp_types.CallToolResult`, whatever the client
        type (what references and proxies build on)."""
        raise NotImplementedError

    async def invalidate(self, tool: str | None = None, arguments: Mapping[str, Any] | None = None) -> None:
        """Never serve again, without asking the server, what is cached for `tool` called with `arguments`
        (None: no arguments), or with no tool for every call on this view's server (`ToolCache.invalidate`)."""
        await self._cache.invalidate(tool, arguments, server_id=self.server_id, declaring=self)

    def _fresh(
        self, name: str, arguments: Mapping[str, Any] | None, mode: CacheMode, variant: str = ""
    ) -> CachedCall | NamedCall | None:
        """A fresh hit served before anything else is built for the call (`ToolCache.fresh_hit`); otherwise
        the call as the cache named it, for `_execute` to hand on (None: not named, `execute` names it)."""
        if mode != "use":
            return None
        self._hook_notifications()
        era = self.session.protocol_version or "unknown"
        hit = self._cache.fresh_hit(self.server_id, era, name, arguments, variant)
        if hit is None or type(hit) is NamedCall:
            return hit
        self.last_outcome = hit[1]
        return CachedCall(*hit)

    async def _execute(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        mode: CacheMode,
        meta: Mapping[str, Any] | None,
        send_plain: PlainSend,
        request_options: Mapping[str, Any],
        variant: str = "",
        named: NamedCall | None = None,
    ) -> tuple[mt.CallToolResult, CallOutcome]:
        self._hook_notifications()
        conn = _SessionConnection(self, send_plain, request_options)
        result, outcome = await self._cache.execute(
            conn, name, arguments, mode=mode, meta=meta, variant=variant, named=named
        )
        self.last_outcome = outcome
        return result, outcome


class CachedMCPClient(_CachedView):
    """A caching view of `mcp.Client`."""

    def __init__(self, cache: ViewCache, client: MCPClient, server_id: str | None = None) -> None:
        super().__init__(cache, client, server_id)
        self._client = client

    @property
    def session(self) -> ClientSession:
        return self._client.session

    def _derive_server_id(self) -> str:
        server = self._client.server
        if isinstance(server, str):
            return url_server_id(server)
        if isinstance(server, StdioServerParameters):
            return stdio_server_id(server.command, server.args, server.cwd, server.env)
        # An in-process server object or a transport: one identity per object, never its reported name.
        return connection_server_id(server, "mcp.Client")

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: Any = None,
        *,
        input_responses: mt.InputResponses | None = None,
        request_state: str | None = None,
        meta: mt.RequestParamsMeta | None = None,
        cache_mode: CacheMode = "use",
    ) -> CachedCall:
        fresh = self._fresh(name, arguments, cache_mode) if input_responses is None and request_state is None else None
        if type(fresh) is CachedCall:  # not isinstance: a fresh hit is the hot path
            return fresh
        return await self._call(
            name,
            arguments,
            read_timeout_seconds,
            progress_callback,
            input_responses=input_responses,
            request_state=request_state,
            meta=meta,
            cache_mode=cache_mode,
            named=fresh,
        )

    async def _call(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        read_timeout_seconds: float | None,
        progress_callback: Any,
        *,
        input_responses: mt.InputResponses | None,
        request_state: str | None,
        meta: mt.RequestParamsMeta | None,
        cache_mode: CacheMode,
        named: NamedCall | None,
    ) -> CachedCall:
        """`call` once its fresh check missed (`named`: the call as it named it)."""

        async def send_plain(n: str, args: dict[str, Any], m: dict[str, Any] | None) -> mt.CallToolResult:
            return await self._client.call_tool(
                n,
                args,
                read_timeout_seconds,
                progress_callback,
                input_responses=input_responses,
                request_state=request_state,
                meta=m,  # type: ignore[arg-type]
            )

        if input_responses is not None or request_state is not None:
            # A multi-round-trip continuation answers one exchange; it is never cached (SEP-2549).
            cache_mode = "bypass"
        options = request_options(read_timeout_seconds, progress_callback)
        result, outcome = await self._execute(
            name, arguments, mode=cache_mode, meta=meta, send_plain=send_plain, request_options=options, named=named
        )
        return CachedCall(result, outcome)

    async def call_raw(
        self, name: str, arguments: dict[str, Any] | None = None, *, cache_mode: CacheMode = "use"
    ) -> CachedCall:
        return await self.call(name, arguments, cache_mode=cache_mode)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: Any = None,
        *,
        input_responses: mt.InputResponses | None = None,
        request_state: str | None = None,
        meta: mt.RequestParamsMeta | None = None,
        cache_mode: CacheMode = "use",
    ) -> mt.CallToolResult:
        # The fresh hit tried here as `call` would: one coroutine less on the path a hit takes.
        fresh = self._fresh(name, arguments, cache_mode) if input_responses is None and request_state is None else None
        if type(fresh) is CachedCall:  # not isinstance: a fresh hit is the hot path
            return fresh.result  # type: ignore[no-any-return]
        call = await self._call(
            name,
            arguments,
            read_timeout_seconds,
            progress_callback,
            input_responses=input_responses,
            request_state=request_state,
            meta=meta,
            cache_mode=cache_mode,
            named=fresh,
        )
        result: mt.CallToolResult = call.result
        return result


class CachedSession(_CachedView):
    """A caching view of an `mcp.ClientSession`."""

    def __init__(self, cache: ViewCache, session: ClientSession, server_id: str | None = None) -> None:
        super().__init__(cache, session, server_id)
        self._session = session

    @property
    def session(self) -> ClientSession:
        return self._session

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: Any = None,
        *,
        meta: mt.RequestParamsMeta | None = None,
        cache_mode: CacheMode = "use",
    ) -> CachedCall:
        fresh = self._fresh(name, arguments, cache_mode)
        if type(fresh) is CachedCall:  # not isinstance: a fresh hit is the hot path
            return fresh
        return await self._call(name, arguments, read_timeout_seconds, progress_callback, meta, cache_mode, fresh)

    async def _call(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        read_timeout_seconds: float | None,
        progress_callback: Any,
        meta: mt.RequestParamsMeta | None,
        cache_mode: CacheMode,
        named: NamedCall | None,
    ) -> CachedCall:
        """`call` once its fresh check missed (`named`: the call as it named it)."""

        async def send_plain(n: str, args: dict[str, Any], m: dict[str, Any] | None) -> mt.CallToolResult:
            return await self._session.call_tool(n, args, read_timeout_seconds, progress_callback, meta=m)  # type: ignore[arg-type]

        options = request_options(read_timeout_seconds, progress_callback)
        result, outcome = await self._execute(
            name, arguments, mode=cache_mode, meta=meta, send_plain=send_plain, request_options=options, named=named
        )
        return CachedCall(result, outcome)

    async def call_raw(
        self, name: str, arguments: dict[str, Any] | None = None, *, cache_mode: CacheMode = "use"
    ) -> CachedCall:
        return await self.call(name, arguments, cache_mode=cache_mode)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: Any = None,
        *,
        meta: mt.RequestParamsMeta | None = None,
        cache_mode: CacheMode = "use",
    ) -> mt.CallToolResult:
        fresh = self._fresh(name, arguments, cache_mode)  # as in `CachedMCPClient.call_tool`
        if type(fresh) is CachedCall:  # not isinstance: a fresh hit is the hot path
            return fresh.result  # type: ignore[no-any-return]
        call = await self._call(name, arguments, read_timeout_seconds, progress_callback, meta, cache_mode, fresh)
        result: mt.CallToolResult = call.result
        return result
