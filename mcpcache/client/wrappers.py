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

import json
import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as mt
from mcp import Client as MCPClient
from mcp import ClientSession, StdioServerParameters
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from mcpcache.client.cache import CallOutcome, ToolCache
from mcpcache.policy import CacheMode
from mcpcache.refs.references import References, Resolution
from mcpcache.refs.view import ModelView

logger = logging.getLogger("mcpcache.client")

_FRESHNESS_ENDING = (
    mt.ResourceUpdatedNotification,
    mt.ResourceListChangedNotification,
    mt.ToolListChangedNotification,
    mt.PromptListChangedNotification,
)

PlainSend = Callable[[str, dict[str, Any], dict[str, Any] | None], Awaitable[mt.CallToolResult]]


@dataclass(frozen=True)
class CachedCall:
    """A result together with what the cache did to produce it."""

    result: Any
    outcome: CallOutcome


@dataclass(frozen=True)
class ModelCall:
    """One model-made tool call: what to put in the model's tool message, and how it came about."""

    envelope: dict[str, Any]
    """The tool message for the model: the view of the answer, or the error that replaced the call."""
    view: ModelView | None
    resolution: Resolution
    outcome: CallOutcome | None
    """None when the call was not sent (a reference could not be resolved)."""

    @property
    def called(self) -> bool:
        return self.outcome is not None


def request_options(read_timeout_seconds: float | None, progress_callback: Any) -> dict[str, Any]:
    """What a conditional request passes on to `session.send_request` of the caller's per-call options."""
    options: dict[str, Any] = {}
    if read_timeout_seconds is not None:
        options["request_read_timeout_seconds"] = read_timeout_seconds
    if progress_callback is not None:
        options["progress_callback"] = progress_callback
    return options


def _strip_userinfo(url: str) -> str:
    # Credentials in a URL identify a principal, not a server; they never go into a stored key.
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, ""))


def _server_info_id(session: ClientSession) -> str:
    info = session.server_info
    if info is None:
        return "server:anonymous"
    return f"server:{info.name}:{info.version}"


class _SessionConnection:
    """`Connection` over one `ClientSession`, for one call's options."""

    def __init__(
        self,
        view: _CachedView,
        send_plain: PlainSend,
        request_options: Mapping[str, Any],
    ) -> None:
        self._view = view
        self._send_plain = send_plain
        self._options = dict(request_options)
        self.server_id = view.server_id
        self.era = view.session.protocol_version or "unknown"

    async def send_plain(self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None) -> mt.CallToolResult:
        return await self._send_plain(name, arguments, meta)

    async def send_conditional(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any]
    ) -> mt.CallToolResult | None:
        request = mt.CallToolRequest(params=mt.CallToolRequestParams(name=name, arguments=arguments, _meta=meta))
        try:
            return await self._view.session.send_request(request, mt.CallToolResult, **self._options)
        except ValidationError:
            # Not a plain tool answer (e.g. the server asks for input): the ordinary path knows what to do.
            logger.info("tool %r: conditional call got an answer the cache does not handle; calling again", name)
            return None
        except MCPError as exc:
            if exc.code == mt.HEADER_MISMATCH:
                return None
            raise

    async def validate(self, name: str, result: mt.CallToolResult) -> None:
        await self._view.session.validate_tool_result(name, result)

    async def read_only(self, name: str) -> bool | None:
        return await self._view.read_only(name)


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
        self._targets: dict[tuple[int, str], tuple[ToolCache, str]] = {}
        self._views: weakref.WeakSet[_CachedView] = weakref.WeakSet()

    @classmethod
    def of(cls, session: ClientSession) -> _SessionHook:
        hook = getattr(session, cls._ATTRIBUTE, None)
        if isinstance(hook, _SessionHook):
            return hook
        hook = cls(session, session._message_handler)
        setattr(session, cls._ATTRIBUTE, hook)
        session._message_handler = hook
        return hook

    def register(self, view: _CachedView) -> None:
        self._views.add(view)
        self._targets.setdefault((id(view.cache), view.server_id), (view.cache, view.server_id))

    async def __call__(self, message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            for view in list(self._views):
                view._read_only = None  # the annotations may have changed with the list
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

    def __init__(self, cache: ToolCache, wrapped: Any, server_id: str | None) -> None:
        self._cache = cache
        self._wrapped = wrapped
        self._server_id = server_id
        self._read_only: dict[str, bool | None] | None = None
        self._hooked: ClientSession | None = None
        self.last_outcome: CallOutcome | None = None
        """The outcome of this view's most recent call (under concurrency, use `call()` instead)."""

    @property
    def cache(self) -> ToolCache:
        return self._cache

    @property
    def wrapped(self) -> Any:
        return self._wrapped

    @property
    def session(self) -> ClientSession:
        raise NotImplementedError

    def _derive_server_id(self) -> str:
        return _server_info_id(self.session)

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
        if self._read_only is None:
            self._read_only = {}
            try:
                for tool in await self._list_tools():
                    hint = tool.annotations.read_only_hint if tool.annotations is not None else None
                    self._read_only[tool.name] = hint
            except Exception:
                logger.warning("could not list tools to read their annotations", exc_info=True)
                self._read_only = None
                return None
        return self._read_only.get(name)

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

    async def _call_raw(self, name: str, arguments: dict[str, Any], cache_mode: CacheMode) -> CachedCall:
        """The raw `mcp_types.CallToolResult` of a call through the cache."""
        raise NotImplementedError

    async def call_for_model(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        references: References,
        cache_mode: CacheMode = "use",
    ) -> ModelCall:
        """A tool call as a model makes it: references in `X_uri` arguments resolved before dispatch, the
        answer through the cache, and what the model should see of it (large answers by reference).

        If a reference cannot be resolved the tool is not called, and `envelope` is the error to hand
        the model instead.
        """
        model_arguments = dict(arguments or {})
        resolution = await references.resolve(tool=name, arguments=model_arguments)
        if resolution.arguments is None:
            assert resolution.error is not None
            return ModelCall(resolution.error, None, resolution, None)
        call = await self._call_raw(name, resolution.arguments, cache_mode)
        # The source recorded is what the model wrote (references, not the megabytes they stood for).
        view = await references.for_model(call.result, server=self.server_id, tool=name, arguments=model_arguments)
        envelope = view.envelope
        if resolution.overridden:
            envelope = {**envelope, "_overridden": resolution.overridden}
        return ModelCall(envelope, view, resolution, call.outcome)

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
    ) -> tuple[mt.CallToolResult, CallOutcome]:
        self._hook_notifications()
        conn = _SessionConnection(self, send_plain, request_options)
        result, outcome = await self._cache.execute(conn, name, arguments, mode=mode, meta=meta, variant=variant)
        self.last_outcome = outcome
        return result, outcome


class CachedMCPClient(_CachedView):
    """A caching view of `mcp.Client`."""

    def __init__(self, cache: ToolCache, client: MCPClient, server_id: str | None = None) -> None:
        super().__init__(cache, client, server_id)
        self._client = client

    @property
    def session(self) -> ClientSession:
        return self._client.session

    def _derive_server_id(self) -> str:
        server = self._client.server
        if isinstance(server, str):
            return "url:" + _strip_userinfo(server)
        if isinstance(server, StdioServerParameters):
            return "stdio:" + json.dumps([server.command, list(server.args), str(server.cwd or "")])
        return _server_info_id(self.session)

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
            name, arguments, mode=cache_mode, meta=meta, send_plain=send_plain, request_options=options
        )
        return CachedCall(result, outcome)

    async def _call_raw(self, name: str, arguments: dict[str, Any], cache_mode: CacheMode) -> CachedCall:
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
        call = await self.call(
            name,
            arguments,
            read_timeout_seconds,
            progress_callback,
            input_responses=input_responses,
            request_state=request_state,
            meta=meta,
            cache_mode=cache_mode,
        )
        result: mt.CallToolResult = call.result
        return result


class CachedSession(_CachedView):
    """A caching view of an `mcp.ClientSession`."""

    def __init__(self, cache: ToolCache, session: ClientSession, server_id: str | None = None) -> None:
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
        async def send_plain(n: str, args: dict[str, Any], m: dict[str, Any] | None) -> mt.CallToolResult:
            return await self._session.call_tool(n, args, read_timeout_seconds, progress_callback, meta=m)  # type: ignore[arg-type]

        options = request_options(read_timeout_seconds, progress_callback)
        result, outcome = await self._execute(
            name, arguments, mode=cache_mode, meta=meta, send_plain=send_plain, request_options=options
        )
        return CachedCall(result, outcome)

    async def _call_raw(self, name: str, arguments: dict[str, Any], cache_mode: CacheMode) -> CachedCall:
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
        call = await self.call(
            name, arguments, read_timeout_seconds, progress_callback, meta=meta, cache_mode=cache_mode
        )
        result: mt.CallToolResult = call.result
        return result


def wrap_client(cache: ToolCache, client: Any, *, server_id: str | None = None) -> Any:
    view = _view_of(cache, client, server_id)
    view._hook_if_connected()
    return view


def _view_of(cache: ToolCache, client: Any, server_id: str | None) -> _CachedView:
    if isinstance(client, MCPClient):
        return CachedMCPClient(cache, client, server_id)
    if isinstance(client, ClientSession):
        return CachedSession(cache, client, server_id)
    try:
        from fastmcp import Client as FastMCPClient
    except ImportError:  # pragma: no cover - fastmcp is a dependency, but the SDK path must not need it
        FastMCPClient = None  # type: ignore[assignment,misc]
    if FastMCPClient is not None and isinstance(client, FastMCPClient):
        from mcpcache.client.fastmcp import CachedFastMCPClient

        return CachedFastMCPClient(cache, client, server_id)
    raise TypeError(f"cannot wrap a {type(client).__name__}: expected mcp.Client, mcp.ClientSession or fastmcp.Client")
