"""The configurations `mcpcache bench` runs side by side: what users have today, and mcpcache.

Each names how the demo server is started and which client reads from it. The scenario is the same for
all: R reads of one whole notebook, with an `edit_cell` every E reads.

The mcpcache client takes delta replies by default (`CacheSettings(deltas=True)`), and the demo server sends
them, so every mcpcache row reads an edited notebook back as the change; `mcpcache-no-deltas` is the
`mcpcache` row with deltas turned off, what a read after an edit costs without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mcpcache.demo.server import DemoMode

ClientKind = Literal["plain", "sdk-cache", "mcpcache"]

REVALIDATE_EVERY_READ_TTL_MS = 0
"""The revalidation configurations announce ttl 0, so every read asks the server (with its tag)."""
TTL_CONFIG_TTL_MS = 300_000
"""The TTL configuration's reads come closer together than this, so between edits they are fresh hits: in
rounds, one read of each configuration lies between two of its reads (a round of the 20 MB notebook over
stdio takes about 20 s here, more on a loaded machine)."""


@dataclass(frozen=True)
class Config:
    key: str
    label: str
    demo: DemoMode
    client: ClientKind
    note: str
    deltas: bool = True
    """The mcpcache client's `CacheSettings(deltas=...)` (other clients never ask for a delta)."""


CONFIGS: tuple[Config, ...] = (
    Config(
        "baseline",
        "FastMCP, stock client",
        DemoMode(revalidation=False),
        "plain",
        "no caching anywhere: every read sends the whole notebook",
    ),
    Config(
        "sdk-cache",
        "MCP SDK client cache on",
        DemoMode(revalidation=False),
        "sdk-cache",
        "mcp.Client's own response cache; it covers lists and resources/read, never tools/call",
    ),
    Config(
        "fastmcp-memo",
        "FastMCP ResponseCachingMiddleware",
        DemoMode(revalidation=False, memo=True),
        "plain",
        "a server-side memo: saves the server's work, not the bytes",
    ),
    Config(
        "sha256-peer",
        "SHA-256 revalidation (Datalayer form)",
        DemoMode(revalidation=False, peer_sha256=True, ttl_ms=REVALIDATE_EVERY_READ_TTL_MS),
        "mcpcache",
        "tag = sha256 of sorted json.dumps; the tool runs on every read",
    ),
    Config(
        "mcpcache",
        "mcpcache revalidation",
        DemoMode(ttl_ms=REVALIDATE_EVERY_READ_TTL_MS),
        "mcpcache",
        "tag = xxh3-128 of canonical orjson; the tool runs on every read; an edit comes back as a delta",
    ),
    Config(
        "mcpcache-no-deltas",
        "mcpcache revalidation, deltas off",
        DemoMode(ttl_ms=REVALIDATE_EVERY_READ_TTL_MS),
        "mcpcache",
        "the mcpcache row with CacheSettings(deltas=False): a read after an edit is the whole answer again",
        deltas=False,
    ),
    Config(
        "mcpcache-validator",
        "mcpcache with a validator",
        DemoMode(validator=True, ttl_ms=REVALIDATE_EVERY_READ_TTL_MS),
        "mcpcache",
        "tag from the file's hash before the body: a match skips the tool",
    ),
    Config(
        "mcpcache-ttl",
        "mcpcache with TTL fresh hits",
        DemoMode(ttl_ms=TTL_CONFIG_TTL_MS),
        "mcpcache",
        "reads closer together than the ttl are served with no request; an edit ends freshness",
    ),
)

BY_KEY = {config.key: config for config in CONFIGS}


def select(keys: str | None) -> tuple[Config, ...]:
    """The configurations named in a comma-separated list (all when None)."""
    if not keys:
        return CONFIGS
    chosen = []
    for key in (k.strip() for k in keys.split(",") if k.strip()):
        if key not in BY_KEY:
            raise ValueError(f"unknown configuration {key!r}; choose from {', '.join(BY_KEY)}")
        chosen.append(BY_KEY[key])
    return tuple(chosen)
