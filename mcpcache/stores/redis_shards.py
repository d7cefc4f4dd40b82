"""How a `RedisStore` namespace is laid over a Redis Cluster: which URLs name a cluster, the namespace's shards
(hash tags), the shard of a key, listing cursors across shards, and which items an eviction across shards
drops. Pure functions of their arguments: the store's I/O stays in `mcpcache.stores.redis`.
"""

from __future__ import annotations

import binascii
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

import xxhash

__all__ = [
    "CLUSTER_SCHEMES",
    "CLUSTER_SHARDS",
    "REDIS_URL_FORMS",
    "SINGLE_SCHEMES",
    "Candidate",
    "ClusterURL",
    "choose_evictions",
    "cluster_cursor",
    "parse_cluster_cursor",
    "parse_cluster_url",
    "redis_url_kind",
    "shard_of",
    "shard_prefixes",
]

SINGLE_SCHEMES = ("redis://", "rediss://", "unix://")
CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
REDIS_URL_FORMS = "a redis://, rediss://, unix://, redis+cluster:// or rediss+cluster:// URL"
"""What every setting that takes a Redis URL accepts, in the words its errors use."""

CLUSTER_SHARDS = 16
"""Shards of a namespace on a cluster: each is one hash tag (so one slot) holding its items with their
bookkeeping. Their slots are spread evenly over the 16384, so primaries that split the slots evenly hold
equal shares: 16 spreads a namespace over up to 16 primaries. Part of the layout: every store of one
namespace must use the same count (it is fixed here, not a setting)."""

_SLOTS = 16384


def redis_url_kind(url: str) -> Literal["single", "cluster"]:
    """Whether `url` names one Redis (redis://, rediss://, unix://) or a cluster (redis+cluster://,
    rediss+cluster://); ValueError with a one-line message for anything else."""
    if url.startswith(CLUSTER_SCHEMES):
        return "cluster"
    if url.startswith(SINGLE_SCHEMES):
        return "single"
    shown = url if len(url) <= 60 else url[:57] + "..."
    raise ValueError(f"not a Redis URL: {shown!r} (expected {REDIS_URL_FORMS})")


@dataclass(frozen=True)
class ClusterURL:
    ssl: bool
    username: str | None
    password: str | None
    nodes: tuple[tuple[str, int], ...]
    """(host, port) of each node to start from: any one that answers is enough, the client learns the rest."""


def parse_cluster_url(url: str) -> ClusterURL:
    """`redis+cluster://[user:password@]host:port[,host:port...][/0]` (or `rediss+cluster://`, over TLS)."""
    if not url.startswith(CLUSTER_SCHEMES):
        raise ValueError(f"not a Redis Cluster URL: {url!r} (expected redis+cluster:// or rediss+cluster://)")
    ssl = url.startswith("rediss+")
    rest = url.split("://", 1)[1]
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    if path not in ("", "0") or query:
        raise ValueError(f"a Redis Cluster URL names hosts only (a cluster has database 0 alone): {url!r}")
    username = password = None
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    nodes: list[tuple[str, int]] = []
    for part in netloc.split(","):
        host, colon, port = part.rpartition(":")
        if not colon:
            host, port = part, "6379"
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"a Redis Cluster URL names host:port pairs separated by commas: {url!r}")
        nodes.append((host, int(port)))
    return ClusterURL(ssl, username, password, tuple(nodes))


def shard_prefixes(namespace: str, count: int) -> tuple[str, ...]:
    """The key prefix of each shard: `{<namespace>}:` for one shard (one Redis: the layout of every earlier
    version), else `{<namespace>/<n>}:` with n the first number whose tag hashes into the shard's 1/count of
    the slots, so the shards' slots are spread evenly however the cluster's primaries split them (Redis
    Cluster's slot of a tag is its CRC16-XMODEM, `binascii.crc_hqx`, modulo 16384)."""
    if count == 1:
        return ("{" + namespace + "}:",)
    prefixes: list[str] = []
    for shard in range(count):
        low, high = shard * _SLOTS // count, (shard + 1) * _SLOTS // count
        number = 0
        while not low <= binascii.crc_hqx(f"{namespace}/{number}".encode(), 0) % _SLOTS < high:
            number += 1
        prefixes.append("{" + f"{namespace}/{number}" + "}:")
    return tuple(prefixes)


def shard_of(key: str, count: int) -> int:
    """The shard a key lives in: a hash of the key, so a namespace's items spread evenly over its shards."""
    return 0 if count == 1 else xxhash.xxh3_64_intdigest(key.encode()) % count


def cluster_cursor(shard: int, scan: str) -> str:
    return f"{shard}-{scan}"


def parse_cluster_cursor(cursor: str | None, count: int) -> tuple[int, str]:
    """(shard, HSCAN cursor) of a listing cursor of a namespace of `count` shards (None: the start)."""
    if cursor is None:
        return 0, "0"
    shard, dash, scan = cursor.partition("-")
    if not (dash and shard.isdigit() and scan.isdigit() and int(shard) < count):
        raise ValueError(f"not a listing cursor of this store: {cursor!r}")
    return int(shard), scan


@dataclass(frozen=True, order=True)
class Candidate:
    """An item an eviction across shards may drop: its use score orders it (the least recently used first)."""

    score: float
    shard: int
    key: str
    size: int


def choose_evictions(
    oldest: Sequence[tuple[int, int, Sequence[Candidate]]],
    looked: int,
    max_items: int | None,
    max_bytes: int | None,
) -> list[Candidate]:
    """The least recently used items to drop so that what every shard holds fits the bounds, from each shard's
    (items, bytes, its `looked` least recently used items in order): only as many as are surely the oldest
    of the namespace (a shard that showed all `looked` may hold older ones than another shard's later ones),
    so a caller that drops them and is still over the bounds asks again. Empty when within the bounds."""
    items = sum(n for n, _, _ in oldest)
    held = sum(b for _, b, _ in oldest)
    over_items = 0 if max_items is None else items - max_items
    over_bytes = 0 if max_bytes is None else held - max_bytes
    if over_items <= 0 and over_bytes <= 0:
        return []
    # Past the last item of a shard that showed as many as asked for, that shard may hold older ones unseen.
    horizon = min((found[-1].score for _, _, found in oldest if len(found) >= looked), default=math.inf)
    chosen: list[Candidate] = []
    for candidate in sorted(c for _, _, found in oldest for c in found):
        if (over_items <= 0 and over_bytes <= 0) or candidate.score > horizon:
            break
        chosen.append(candidate)
        over_items -= 1
        over_bytes -= candidate.size
    return chosen
