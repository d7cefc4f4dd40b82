"""How a `ToolCache` behaves, in one frozen value: `CacheSettings`.

One object rather than keyword parameters on the cache, so that whoever builds caches (the gateway builds one
per caller partition, the proxy one per upstream) builds the settings once and passes the same value on.
Every field is checked when the value is made: a bad setting raises there, never at a call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from mcpcache.client.keyrules import overrides
from mcpcache.client.policy import DEFAULT_MAX_ANSWER_BYTES
from mcpcache.key_arguments import KeyArguments
from mcpcache.protocol import META_KEY
from mcpcache.stores.fence import (
    DEFAULT_STORE_COOLDOWN_S,
    DEFAULT_STORE_DEADLINE_S,
    DEFAULT_STORE_SECONDS_PER_MB,
    FenceSettings,
)

__all__ = [
    "DEFAULT_BACKGROUND_REVALIDATIONS",
    "DEFAULT_KEEP_STALE_S",
    "CacheSettings",
]

DEFAULT_KEEP_STALE_S = 7 * 24 * 3600.0
"""How long a stale but tagged entry is kept for cheap revalidation before the store may drop it."""

DEFAULT_BACKGROUND_REVALIDATIONS = 16
"""How many background revalidations one cache runs at once (`CacheSettings.background_revalidations`)."""


def _frozen(rules: Mapping[str, Iterable[str]] | None) -> Mapping[str, Iterable[str]] | None:
    if rules is None:
        return None
    if not isinstance(rules, Mapping):
        raise TypeError(f"give a mapping of tool name to argument names, not {rules!r}")
    # A string is left as it is, for `overrides` to refuse it by name.
    frozen = {tool: names if isinstance(names, str) else tuple(names) for tool, names in rules.items()}
    return MappingProxyType(frozen)


@dataclass(frozen=True, kw_only=True)
class CacheSettings:
    """How a `ToolCache` behaves (`ToolCache(store, CacheSettings(...))`); every field has a default.

    A frozen value: build it once and hand the same one to every cache that should behave alike
    (`dataclasses.replace` makes a variant). Each field is checked when the value is made.
    """

    share_public: bool = False
    """Serve answers the server marked public to other partitions of the same store."""

    keep_private: bool = True
    """Keep answers the server marked private (the default). False for a partition that answers several
    principals it cannot tell apart (the gateway's unauthenticated callers): their private answers are returned
    as they came and never kept (the outcome says so), public ones are kept as usual."""

    trusted: bool = False
    """Believe the server's readOnlyHint and idempotentHint annotations: calls to tools not marked read-only end
    the freshness of that server's entries in this partition (otherwise every call without a cache block does),
    and a call of a tool marked read-only or idempotent whose exchange was lost after it was sent is sent once
    more (docs/client.md, "Idempotent tools"). Also: a server's key-argument declarations are believed."""

    meta_key: str = META_KEY
    """The `_meta` key the cache block travels under."""

    keep_stale_s: float = DEFAULT_KEEP_STALE_S
    """How long a tagged entry is kept after it goes stale, for cheap revalidation."""

    store_deadline_s: float = DEFAULT_STORE_DEADLINE_S
    """The longest a call waits on any one store operation that moves no body; a store that does not answer in
    time is a miss, and is not asked again for `store_cooldown_s`."""

    store_cooldown_s: float = DEFAULT_STORE_COOLDOWN_S
    """How long a store that failed or missed its deadline is left alone (every call a miss meanwhile)."""

    store_deadline_per_mb_s: float = DEFAULT_STORE_SECONDS_PER_MB
    """What a store operation that moves a body may take on top of `store_deadline_s`, per MB (10^6 bytes) of
    the stored body: a save, or the load of an answer to serve (counted up to `max_answer_bytes`)."""

    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    """The largest answer kept, in stored bytes; a larger one is passed to the caller and neither stored nor
    held decoded (its outcome says so)."""

    decoded_tier_bytes: int | None = None
    """How many bytes of stored answers (counted as stored) this process keeps decoded in front of the store
    (see `mcpcache.client.tier`); 0 keeps none; None (the default) is `max_answer_bytes`, so any answer the
    cache stores can be held. Every serve is a private copy, unless `read_only_views`."""

    deltas: bool = True
    """Accept delta replies (docs/client.md, "Delta replies"): a conditional request lists the delta formats
    this cache applies, and a server that still holds the answer sent under the tag may reply with the change
    only; the cache patches a private copy of its stored answer, verifies the digest of the whole new answer,
    and serves and stores it (outcome `patched`). Any doubt is a repeat of the call in full. False: requests
    accept no delta, as before deltas existed."""

    serve_stale: bool = True
    """Serve an answer that is no longer fresh when the server allows it (docs/client.md, "Serving stale"): at
    once while it is revalidated in the background, or when the server cannot answer. False: never, whatever
    the server allows."""

    background_revalidations: int = DEFAULT_BACKGROUND_REVALIDATIONS
    """How many of those background revalidations run at once; past it a call revalidates in the foreground.
    `ToolCache.close()` cancels and awaits the ones running."""

    read_only_views: bool = False
    """Serve the answer the decoded tier holds itself, not a private copy of it (and hold a full answer as it
    was returned, not a copy). Off by default. It saves the copy and freeing it (about 1 ms of CPU for a 10 MB
    notebook answer, 15 us for 1 KB), and costs the caller a promise: nothing reachable from a result (its
    content blocks, structured content, `_meta`, FastMCP's `.data`) is ever changed, by the caller or anything
    it hands the result to. The SDK's models are mutable, so nothing enforces it: a change is served to every
    later caller of this cache in this process until the entry is replaced or evicted (the store's copy is not
    affected)."""

    key_arguments: Mapping[str, Iterable[str]] | None = field(default=None, hash=False)
    """Per tool, the arguments that alone name its answer: calls differing only in the others share one entry
    and one request (docs/client.md, "Key arguments"). Wins over what a server declares in `tools/list`, which
    is believed only when `trusted`. Naming an argument that does change the answer serves wrong answers."""

    ignore_arguments: Mapping[str, Iterable[str]] | None = field(default=None, hash=False)
    """Per tool, the arguments that never change its answer (a request id); the other side of `key_arguments`
    (a tool is named in one of the two, not both)."""

    key_rules: Mapping[str, KeyArguments] = field(init=False, repr=False, compare=False)
    """The two above, checked and combined (what the cache keys calls by)."""

    def __post_init__(self) -> None:
        for name in ("share_public", "keep_private", "trusted", "deltas", "serve_stale", "read_only_views"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if not isinstance(self.meta_key, str) or not self.meta_key:
            raise TypeError(f"meta_key must be a non-empty string, got {self.meta_key!r}")
        if self.keep_stale_s < 0:
            raise ValueError("keep_stale_s must be >= 0")
        if not _positive_int(self.max_answer_bytes, least=1):
            raise ValueError(f"max_answer_bytes must be an int >= 1, got {self.max_answer_bytes!r}")
        if self.decoded_tier_bytes is not None and not _positive_int(self.decoded_tier_bytes, least=0):
            raise ValueError(f"decoded_tier_bytes must be None or an int >= 0, got {self.decoded_tier_bytes!r}")
        if type(self.background_revalidations) is not int or self.background_revalidations < 0:
            raise ValueError(f"background_revalidations must be an int >= 0, got {self.background_revalidations!r}")
        self.fence  # noqa: B018 - the store's deadlines are checked where they are defined
        key_arguments, ignore_arguments = _frozen(self.key_arguments), _frozen(self.ignore_arguments)
        object.__setattr__(self, "key_arguments", key_arguments)
        object.__setattr__(self, "ignore_arguments", ignore_arguments)
        object.__setattr__(self, "key_rules", MappingProxyType(overrides(key_arguments, ignore_arguments)))

    @property
    def fence(self) -> FenceSettings:
        """The store's deadlines and cooldown, as the fence takes them."""
        return FenceSettings(self.store_deadline_s, self.store_cooldown_s, self.store_deadline_per_mb_s)

    @property
    def tier_bytes(self) -> int:
        """`decoded_tier_bytes`, with its default (`max_answer_bytes`) filled in."""
        return self.max_answer_bytes if self.decoded_tier_bytes is None else self.decoded_tier_bytes


def _positive_int(value: object, *, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least
