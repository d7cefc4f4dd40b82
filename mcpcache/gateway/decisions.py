"""The gateway's decisions, with no I/O: each a pure function returning a typed value with a reason.

- `read_upstream`: what the gateway makes of an upstream answer: the policy its answer is stamped with
  (configured ttl/scope merged with the upstream's own cache block, if it sent one) and where the tag
  comes from (the upstream's own tag, the hash of the answer, or none).
- `decide_store`: whether a call goes through the shared store, and in which partition.
- `partition_of`: the partition of a verified caller (never of anything the caller can choose freely).
- `client_ttl_ms`: the freshness handed to a caller for an answer served from the store (what is left
  of the entry's, not the whole ttl again).
- `history_partition`: whose delta history an answer served through the store belongs to.

The answers themselves (stamp, not-modified, or a delta) are `mcpcache.server.decisions.decide_after_body`
and `plan_delta`/`decide_delta`, the same decisions a server using mcpcache makes: the gateway is such a
server for its callers.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from mcpcache.gateway.config import ToolSettings
from mcpcache.key_arguments import IGNORE_ARGUMENTS_FIELD, KEY_ARGUMENTS_FIELD, KeyArguments
from mcpcache.protocol import CacheBlock, Scope, unconfirmed
from mcpcache.server.policies import CachePolicy

__all__ = [
    "ANONYMOUS_PARTITION",
    "PUBLIC_HISTORY",
    "AskAgainWithoutTag",
    "Direct",
    "Principal",
    "Route",
    "TagFromAnswer",
    "TagFromUpstream",
    "UpstreamNotModified",
    "UseStore",
    "client_ttl_ms",
    "decide_store",
    "history_partition",
    "partition_of",
    "read_upstream",
]


@dataclass(frozen=True)
class Route:
    """A declared tool as the gateway routes it: the name callers use, the upstream's own name for it, the
    upstream's identity (the first part of every store key) and the configured treatment."""

    public_name: str
    upstream: str
    tool: str
    server_id: str
    settings: ToolSettings
    era: str | None = None
    """The protocol era in store keys; None: the caller's (an upstream that speaks each caller's era)."""
    trust_tags: bool = True
    """False: the upstream's own tags are neither sent to it nor taken from it (`trust_upstream_tags`)."""

    @functools.cached_property
    def key_rule(self) -> KeyArguments | None:
        """Which arguments name the answer, as the configuration says (None: every argument)."""
        return self.settings.key_rule()

    def keyed(self, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """The arguments the gateway's own keys (front tier, delta history) are computed over."""
        rule = self.key_rule
        return dict(arguments or {}) if rule is None else rule.project(arguments or {})

    def declared(self, block: object) -> object:
        """The tool's cache declaration as callers see it in `tools/list`: the upstream's (`block`), with the
        configuration's key arguments in place of any it names; as it was when the configuration names none."""
        rule = self.key_rule
        if rule is None:
            return block
        if isinstance(block, Mapping):
            base = {k: v for k, v in block.items() if k not in (KEY_ARGUMENTS_FIELD, IGNORE_ARGUMENTS_FIELD)}
        else:
            base = {"ttlMs": self.settings.ttl_ms or 0, "cacheScope": self.settings.scope}
        return {**base, **rule.block()}


# What an upstream answer becomes ------------------------------------------------------------------


@dataclass(frozen=True)
class TagFromUpstream:
    """The upstream stamped a tag of its own: it is the answer's tag (the gateway hashes nothing)."""

    policy: CachePolicy
    tag: str
    reason: str


@dataclass(frozen=True)
class TagFromAnswer:
    """Tag the answer by hashing it (`policy.etag`), or stamp no tag (not `policy.etag`)."""

    policy: CachePolicy
    reason: str


@dataclass(frozen=True)
class UpstreamNotModified:
    """The upstream confirmed the tag the gateway forwarded: answer not-modified with `policy`'s block."""

    policy: CachePolicy
    tag: str
    reason: str


@dataclass(frozen=True)
class AskAgainWithoutTag:
    """A not-modified reply that names no tag the gateway sent: never an answer; ask once more, unconditionally."""

    reason: str


UpstreamReading = TagFromUpstream | TagFromAnswer | UpstreamNotModified | AskAgainWithoutTag


def effective_policy(settings: ToolSettings, upstream: CacheBlock | None) -> CachePolicy:
    """The configured treatment merged with the upstream's own block.

    ttl and the stale windows: the configured ones, else the upstream's, else 0. scope: public only if the
    configuration says public and the upstream, if it stamped, says public too (either side may narrow,
    neither may widen).
    """
    if settings.ttl_ms is not None:
        ttl = settings.ttl_ms
    else:
        ttl = upstream.ttl_ms if upstream is not None and upstream.ttl_ms is not None else 0
    public = settings.scope == "public" and (upstream is None or upstream.cache_scope == "public")
    return CachePolicy(
        ttl_ms=ttl,
        scope="public" if public else "private",
        kind=settings.kind,
        etag=settings.etag,
        stale_while_revalidate_ms=_configured_or_upstream(
            settings.stale_while_revalidate_ms, upstream.stale_while_revalidate_ms if upstream is not None else None
        ),
        stale_if_error_ms=_configured_or_upstream(
            settings.stale_if_error_ms, upstream.stale_if_error_ms if upstream is not None else None
        ),
    )


def _configured_or_upstream(configured: int | None, upstream: int | None) -> int:
    if configured is not None:
        return configured
    return upstream or 0


def read_upstream(
    settings: ToolSettings,
    upstream: CacheBlock | None,
    forwarded: str | None,
    *,
    is_error: bool,
    trust_tags: bool = True,
) -> UpstreamReading:
    """`upstream`: the cache block on the upstream's answer (None: it sent none); `forwarded`: the tag the
    gateway sent upstream with the call (None: an ordinary call); `trust_tags` False: the upstream's tag is
    not the answer's (the answer is hashed), and its not-modified replies confirm nothing."""
    policy = effective_policy(settings, upstream)
    if not trust_tags and upstream is not None:
        if upstream.not_modified:
            return AskAgainWithoutTag("the upstream's tags are not trusted (trust_upstream_tags = false)")
        if settings.etag:
            return TagFromAnswer(policy, "tagged from the answer (the upstream's tags are not trusted)")
    if upstream is not None and upstream.not_modified:
        why = unconfirmed(upstream, forwarded, is_error=is_error)
        if why is not None or upstream.etag is None:
            return AskAgainWithoutTag(f"the upstream's reply confirms nothing: {why}")
        if not settings.etag:
            return AskAgainWithoutTag("the upstream answered not-modified to a tool the gateway does not tag")
        return UpstreamNotModified(policy, upstream.etag, "the upstream confirmed the tag itself")
    if settings.etag and upstream is not None and upstream.etag is not None:
        return TagFromUpstream(policy, upstream.etag, "the upstream's own tag (the answer is not hashed again)")
    if settings.etag:
        return TagFromAnswer(policy, "tagged from the answer (the upstream stamps no tag)")
    return TagFromAnswer(policy, "configured not to tag")


def forwarded_tag(settings: ToolSettings, requested: str | None, *, trust_tags: bool = True) -> str | None:
    """The tag sent upstream with a call: the one the caller (or the store) holds, when the tool is tagged
    and the upstream's tags are trusted (a tag of the gateway's own would mean nothing to it).

    An upstream that never heard of mcpcache ignores it; one that stamps its own tags answers
    not-modified itself, which saves the bytes between it and the gateway (and, with a validator, its work).
    """
    return requested if settings.etag and trust_tags else None


# Through the store, or not ------------------------------------------------------------------------


ANONYMOUS_PARTITION = "anonymous"
"""The partition of callers the gateway cannot identify. Only public answers are ever kept for it, and it
is never the digest of a credential, so no caller's private partition can coincide with it."""


@dataclass(frozen=True)
class UseStore:
    """Serve and keep through the shared store, in `partition` (the anonymous partition keeps no private
    answer: an answer the upstream narrows to private is handed back unkept, and never shared in flight)."""

    partition: str
    reason: str


@dataclass(frozen=True)
class Direct:
    """Call the upstream for this caller; nothing is looked up or kept."""

    reason: str


StorePlan = UseStore | Direct


def decide_store(has_store: bool, partition: str | None, settings: ToolSettings) -> StorePlan:
    """`partition`: the verified caller's (None: the caller is anonymous)."""
    if not has_store:
        return Direct("no shared store: tags and not-modified replies only")
    if partition is not None:
        return UseStore(partition, "through the store, in the caller's partition")
    if settings.scope == "private":
        return Direct("anonymous caller: private answers are never kept or served from the store")
    return UseStore(ANONYMOUS_PARTITION, "anonymous caller: public answers only")


# Partitions -------------------------------------------------------------------------------------


PUBLIC_HISTORY = "public"
"""The history partition of public answers, everybody's: never a caller's partition ("caller:<digest>")
nor the anonymous one."""


def history_partition(scope: Scope, partition: str) -> str | None:
    """Whose history an answer served through the store belongs to: the partition its tool cache entry is
    kept in, so a caller is sent a delta only against an answer it may be served. A public answer is
    everybody's (the tool cache shares it across partitions); a private one is its caller's; None (kept
    nowhere, so never a base) for a private answer to an anonymous caller, which the store never keeps."""
    if scope == "public":
        return PUBLIC_HISTORY
    if partition == ANONYMOUS_PARTITION:
        return None
    return partition


@dataclass(frozen=True)
class Principal:
    """What the gateway's auth verified about a caller (from FastMCP's `AccessToken`)."""

    token: str
    client_id: str
    subject: str | None = None
    issuer: str | None = None
    scopes: Sequence[str] = ()


PartitionBy = Literal["principal", "token"]


def partition_of(principal: Principal | None, by: PartitionBy) -> str | None:
    """The caller's partition: a SHA-256 of what the verifier vouched for; None for an anonymous caller.

    principal: the identity (issuer, subject, client id) and its scopes, so a refreshed token keeps its
    partition; token: the token itself, so no two tokens ever share one.
    """
    if principal is None:
        return None
    if by == "token":
        fields: list[object] = ["token", hashlib.sha256(principal.token.encode()).hexdigest()]
    else:
        fields = ["principal", principal.issuer, principal.subject, principal.client_id, sorted(principal.scopes)]
    return "caller:" + hashlib.sha256(orjson.dumps(fields)).hexdigest()


# What a caller is told about freshness -----------------------------------------------------------


def client_ttl_ms(block_ttl_ms: int | None, fresh_for_ms: int | None) -> int | None:
    """The ttlMs handed on with an answer: for one served fresh from the store, what is left of the entry's
    freshness (a cache that handed on the whole ttl again would stretch it); otherwise the block's."""
    if block_ttl_ms is None or fresh_for_ms is None:
        return block_ttl_ms
    return max(0, min(block_ttl_ms, fresh_for_ms))
