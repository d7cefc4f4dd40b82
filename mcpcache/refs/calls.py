"""A tool call as a model makes it, through the tool cache: references resolved before dispatch, the answer
cached, and what the model sees of it. References build on the client here; the client knows nothing of
references."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from mcpcache.client.outcomes import CallOutcome
from mcpcache.client.policy import CacheMode
from mcpcache.client.wrappers import CachedCall
from mcpcache.refs.references import References, Resolution
from mcpcache.refs.view import OVERRIDDEN_FIELD, ModelView


class RawCaller(Protocol):
    """What every caching view offers (`ToolCache.wrap(...)` of any supported client)."""

    @property
    def server_id(self) -> str: ...

    async def call_raw(
        self, name: str, arguments: dict[str, Any] | None = None, *, cache_mode: CacheMode = "use"
    ) -> CachedCall: ...


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


async def call_for_model(
    client: RawCaller,
    name: str,
    arguments: Mapping[str, Any] | None,
    *,
    references: References,
    cache_mode: CacheMode = "use",
) -> ModelCall:
    """Resolve the references in `X_uri` arguments, call the tool through the cached `client`, and build what
    the model should see of the answer (large answers by reference).

    If a reference cannot be resolved the tool is not called, and `envelope` is the error to hand the model.
    """
    model_arguments = dict(arguments or {})
    resolution = await references.resolve(tool=name, arguments=model_arguments)
    if resolution.arguments is None:
        assert resolution.error is not None
        return ModelCall(resolution.error, None, resolution, None)
    call = await client.call_raw(name, resolution.arguments, cache_mode=cache_mode)
    # The source recorded is what the model wrote (references, not the megabytes they stood for).
    view = await references.for_model(call.result, server=client.server_id, tool=name, arguments=model_arguments)
    envelope = view.envelope
    if resolution.overridden:
        envelope = {**envelope, OVERRIDDEN_FIELD: resolution.overridden}
    return ModelCall(envelope, view, resolution, call.outcome)
