"""OpenTelemetry for every part: what mcpcache decided, on spans and as metrics, when something listens.

Spans. The MCP SDK and FastMCP open a span per `tools/call` (server side, and around a client's request);
mcpcache adds its outcome to the current span rather than opening one of its own, so a trace shows one
span per call with the cache's decision on it. A client call made outside any span (a fresh hit sends no
request, so nothing else would trace it) gets a short span of its own, when a tracer provider is there to
record it (`Tracing`): never a second one where the caller has a span.

Metrics. Counters on the meter `mcpcache` (`Meters`), from the meter provider given to each part, or else
the global one once the application sets it. Attribute values that come from peers (tool names, server
labels) are bounded (`Labels`): past `MAX_LABELS` distinct values, the rest count under `OTHER`.

`opentelemetry-api` is not a dependency of mcpcache (the MCP SDK brings it): without it, or without a
configured provider, each of these is a no-op costing a global lookup or two. It is imported on first use,
so that no part pays for it at import time, and a broken tracer or meter never fails a call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["CALLERS", "MAX_LABELS", "OTHER", "Labels", "Meters", "Tracing", "annotate_current_span"]

logger = logging.getLogger("mcpcache")

_UNSET: Any = object()
_trace: Any = _UNSET
_metrics: Any = _UNSET

MAX_LABELS = 200
"""Distinct values an attribute keeps per `Labels` before the rest are counted under `OTHER`."""

OTHER = "_other"


def _tracing() -> Any:
    """`opentelemetry.trace`, or None when it is not installed."""
    global _trace
    if _trace is _UNSET:
        try:
            from opentelemetry import trace as module
        except ImportError:
            module = None  # type: ignore[assignment]
        _trace = module
    return _trace


def _metering() -> Any:
    """`opentelemetry.metrics`, or None when it is not installed."""
    global _metrics
    if _metrics is _UNSET:
        try:
            from opentelemetry import metrics as module
        except ImportError:
            module = None  # type: ignore[assignment]
        _metrics = module
    return _metrics


# The global providers' stand-ins until an application sets one: recording through them costs the call and
# gives nothing, so a part waits for the real provider instead.
_STAND_INS = frozenset({"ProxyTracerProvider", "NoOpTracerProvider", "_ProxyMeterProvider", "NoOpMeterProvider"})


def _configured(provider: object) -> bool:
    return provider is not None and type(provider).__name__ not in _STAND_INS


class _Global:
    """Reads one of the API's global providers (the one an application set, else None) without its getter:
    each call of `get_tracer_provider()` looks the environment up, a few microseconds on every call of the
    hottest path. The getter is called once, on the first read, since that is what loads a provider the
    environment names (`OTEL_PYTHON_TRACER_PROVIDER`); an API release that keeps the provider elsewhere
    is read through the getter, at its cost."""

    __slots__ = ("_getter", "_holder", "_module", "_name")

    def __init__(self, module: Callable[[], Any], name: str, getter: str) -> None:
        self._module = module
        self._name = name
        self._getter = getter
        self._holder: Any = None

    def read(self) -> Any | None:
        holder = self._holder
        if holder is None:
            module = self._module()
            if module is None:
                return None
            getter = getattr(module, self._getter)
            getter()
            internal = getattr(module, "_internal", module)  # where opentelemetry.metrics keeps its global
            holder = internal if hasattr(internal, self._name) else module
            self._holder = holder if hasattr(holder, self._name) else _Getter(getter, self._name)
            holder = self._holder
        return getattr(holder, self._name)


class _Getter:
    def __init__(self, getter: Callable[[], Any], name: str) -> None:
        self._getter = getter
        self._name = name

    def __getattr__(self, name: str) -> Any:
        return self._getter()


_GLOBAL_TRACER_PROVIDER = _Global(lambda: _tracing(), "_TRACER_PROVIDER", "get_tracer_provider")
_GLOBAL_METER_PROVIDER = _Global(lambda: _metering(), "_METER_PROVIDER", "get_meter_provider")


Attributes = Mapping[str, str | int | bool]


def annotate_current_span(attributes: Callable[[], Attributes], *, event: str | None = None) -> bool:
    """Set `attributes()` on the current span if it records (the last call under a span wins), and add them
    as an `event` too when named (one per call). The attributes are built only for a span that records: a
    call with no tracer pays for none of them. Whether a span recorded them. Never raises."""
    trace = _tracing()
    if trace is None:
        return False
    try:
        span = trace.get_current_span()
        if not span.is_recording():
            return False
        built = dict(attributes())
        span.set_attributes(built)
        if event is not None:
            span.add_event(event, built)
    except Exception:  # pragma: no cover - a broken tracer must never fail a tool call
        return False
    return True


CALLERS: Any = object()
"""`Tracing.start_own`'s answer when the caller's current span records: the outcome goes on it."""


class Tracing:
    """Spans of a part's own: from `provider` when given, else from the global tracer provider once one is
    set (None until then)."""

    def __init__(self, provider: Any | None = None) -> None:
        self._tracers = _Provided(provider, _GLOBAL_TRACER_PROVIDER, lambda p: p.get_tracer("mcpcache"), "tracer")

    def tracer(self) -> Any | None:
        """The tracer to open spans with, or None when no provider is configured. Never raises."""
        return self._tracers.get()

    def start_own(self, name: Callable[[], str]) -> Any | None:
        """Where a call's outcome goes: `CALLERS` when the current span records (the caller's span gets
        it); else a span of mcpcache's own (kind INTERNAL) named `name()`, started now, when a provider is
        configured; else None (nowhere). Never raises."""
        trace = _tracing()
        if trace is None:
            return None
        try:
            if trace.get_current_span().is_recording():
                return CALLERS
            tracer = self.tracer()
            if tracer is None:
                return None
            return tracer.start_span(name(), kind=trace.SpanKind.INTERNAL)
        except Exception:  # pragma: no cover - a broken tracer must never fail a tool call
            logger.debug("mcpcache: the tracer failed", exc_info=True)
            return None


Built = TypeVar("Built")


class _Provided(Generic[Built]):
    """What `build(provider)` makes of the provider given, else of the global one (`read`) once an
    application sets a real one; None until then. Built again only when the provider changes; a stand-in
    provider is remembered, so that with none configured a call costs two attribute reads."""

    def __init__(self, given: Any | None, read: _Global, build: Callable[[Any], Built], what: str) -> None:
        self._given = given
        self._read = read
        self._build = build
        self._what = what
        self._provider: Any = None
        self._built: Built | None = None
        self._idle: Any = None
        """The provider last found to be a stand-in: asked again only once another is set."""

    def get(self) -> Built | None:
        """Never raises."""
        try:
            provider = self._given
            if provider is None:
                provider = self._read.read()
                if provider is None:
                    return None
            if provider is not self._provider:
                if provider is self._idle:
                    return None
                if not _configured(provider):
                    self._idle = provider
                    return None
                self._built = self._build(provider)
                self._provider = provider
            return self._built
        except Exception:  # pragma: no cover - a broken provider must never fail a tool call
            logger.debug("mcpcache: the %s provider failed", self._what, exc_info=True)
            return None


Instruments = TypeVar("Instruments")


class Meters(_Provided[Instruments]):
    """A part's instruments (`make(meter)` builds them) on the meter `mcpcache`: of `provider` when given,
    else of the global meter provider once one is set (`get()` is None until then)."""

    def __init__(self, make: Callable[[Any], Instruments], provider: Any | None = None) -> None:
        super().__init__(provider, _GLOBAL_METER_PROVIDER, lambda p: make(p.get_meter("mcpcache")), "meter")


class Labels:
    """Attribute values from peers, bounded: the first `limit` distinct values are kept as they are, and
    any other counts as `OTHER`, so that a server naming a new tool per call cannot grow a metric without
    bound."""

    def __init__(self, limit: int = MAX_LABELS) -> None:
        self._limit = limit
        self._kept: set[str] = set()

    def __call__(self, value: str) -> str:
        kept = self._kept
        if value in kept:
            return value
        if len(kept) < self._limit:
            kept.add(value)
            return value
        return OTHER
