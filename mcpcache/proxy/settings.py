"""What a proxy run is, decided from the command line with no I/O: the upstream, where answers are kept,
whose answers they are, and the small rules of translation between host and upstream.

Everything here is a pure function of its arguments, so the rules are tested without a process or a
socket; `mcpcache.proxy.link` and `mcpcache.proxy.server` do the I/O they describe.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import mcp_types as mt

from mcpcache.client.identity import credentials_digest, environment_digest
from mcpcache.client.settings import CacheSettings
from mcpcache.protocol import META_KEY
from mcpcache.stores.redis_shards import CLUSTER_SCHEMES, REDIS_URL_FORMS, SINGLE_SCHEMES

UpstreamEra = Literal["legacy", "auto"]

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
"""RFC 9110 token characters: what an HTTP field name may be made of."""

CONNECTION_META_KEYS = frozenset(
    {mt.PROTOCOL_VERSION_META_KEY, mt.CLIENT_INFO_META_KEY, mt.CLIENT_CAPABILITIES_META_KEY}
)
"""Request `_meta` keys that describe the host's own connection; the proxy's upstream session stamps its own."""

PROGRESS_TOKEN = "progressToken"


class SettingsError(ValueError):
    """A command line that cannot run; the message is one line meant for the user."""


@dataclass(frozen=True)
class StdioUpstream:
    """An upstream server the proxy starts as a subprocess and talks to over its stdin and stdout."""

    command: str
    args: tuple[str, ...]
    cwd: str | None = None


@dataclass(frozen=True)
class HttpUpstream:
    """An upstream server reached over streamable HTTP."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()

    def header_dict(self) -> dict[str, str]:
        return dict(self.headers)


Upstream = StdioUpstream | HttpUpstream


@dataclass(frozen=True)
class StoreChoice:
    """Where answers (and references) are kept: a SQLite file, a Redis URL, or the default SQLite file."""

    sqlite_path: Path | None = None
    redis_url: str | None = None


@dataclass(frozen=True)
class RefsSettings:
    conversation_id: str
    threshold_bytes: int = 4096
    max_view_bytes: int = 4096
    remember_turns: int = 0
    """Re-read views (`ShownMemory(max_turns=...)`) for this many tool results after a full view; 0: off."""


@dataclass(frozen=True)
class ProxySettings:
    upstream: Upstream
    store: StoreChoice = field(default_factory=StoreChoice)
    partition: str = ""
    refs: RefsSettings | None = None
    server_id: str | None = None
    """Names the upstream in cache keys instead of its endpoint (see `upstream_identity`)."""
    cache: CacheSettings = field(default_factory=CacheSettings)
    """The tool cache's settings (`--trust-annotations` is its `trusted`)."""
    upstream_era: UpstreamEra = "legacy"


def parse_header(text: str) -> tuple[str, str]:
    """`"Name: value"` as given to `--header`, checked, as (name, value)."""
    name, sep, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not name:
        raise SettingsError(f"--header must look like 'Name: value', got {_shown(text)}")
    if not _HEADER_NAME.fullmatch(name):
        raise SettingsError(f"--header name {_shown(name)} is not a valid HTTP header name")
    if any(ch in value for ch in "\r\n\x00"):
        raise SettingsError(f"--header {name}: the value holds a line break or NUL")
    return name, value


def _shown(text: str, limit: int = 60) -> str:
    # Header values are credentials: a refused one is echoed only in part.
    return repr(text if len(text) <= limit else text[:limit] + "...")


def upstream_from(command: Sequence[str], url: str | None, headers: Sequence[str], cwd: str | None) -> Upstream:
    """The upstream a command line names: a command to start, or a URL (with its headers), never both."""
    if url is not None and command:
        raise SettingsError("give either --url or a command after --, not both")
    if url is None:
        if headers:
            raise SettingsError("--header needs --url (a stdio upstream takes its settings from its environment)")
        if not command:
            raise SettingsError("name the upstream server: `mcpcache proxy -- COMMAND [ARGS...]` or `--url URL`")
        if not command[0].strip():
            raise SettingsError("the upstream command is empty")
        return StdioUpstream(command[0], tuple(command[1:]), cwd)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SettingsError(f"--url must be an http:// or https:// URL, got {_shown(url)}")
    return HttpUpstream(url, tuple(parse_header(h) for h in headers))


def store_choice(sqlite_path: Path | None, redis_url: str | None) -> StoreChoice:
    if sqlite_path is not None and redis_url is not None:
        raise SettingsError("give at most one of --store and --redis")
    if redis_url is not None and not redis_url.startswith((*SINGLE_SCHEMES, *CLUSTER_SCHEMES)):
        raise SettingsError(f"--redis must be {REDIS_URL_FORMS}, got {_shown(redis_url)}")
    return StoreChoice(sqlite_path, redis_url)


def default_partition(upstream: Upstream, environ: Mapping[str, str]) -> str:
    """The authorization partition when the user names none: a digest of everything that names who asks.

    For an HTTP upstream, the credentials the proxy sends: the URL's userinfo (httpx sends it as basic
    auth) and the `--header` values; none, and the partition is shared (""). For a stdio upstream, the
    environment the proxy hands it (`environ`), which is where such servers take their tokens. Two users (or
    two tokens) sharing one store never see each other's private answers, `--server-id` or not. The store
    never holds a credential in clear, only this digest.
    """
    match upstream:
        case HttpUpstream():
            digest = credentials_digest(upstream.url, upstream.header_dict())
            return "" if digest is None else "credentials:" + digest[:32]
        case StdioUpstream():
            return "environment:" + environment_digest(environ)[:32]


def new_conversation_id() -> str:
    """A conversation of its own for one proxy run: references minted here resolve only here."""
    return "proxy-" + secrets.token_hex(6)


def forwarded_meta(meta: Mapping[str, Any] | None, meta_key: str = META_KEY) -> dict[str, Any] | None:
    """The host's request `_meta` as it goes upstream.

    Dropped: the keys that describe the host's own connection (the upstream session stamps its own), the
    progress token (the upstream session asks for progress with a token of its own and the proxy relays it
    under the host's), and any cache block: whether the upstream request is conditional is the proxy
    cache's decision, made with the tag the proxy holds. Trace context and other keys go as they came.
    """
    if not meta:
        return None
    kept = {
        key: value
        for key, value in meta.items()
        if key not in CONNECTION_META_KEYS and key != PROGRESS_TOKEN and key != meta_key
    }
    return kept or None


def passes_whole(result: mt.CallToolResult) -> bool:
    """Results the model is shown exactly as upstream sent them, even with references on: errors (their
    message is for the model, whole) and results with anything but text (an image is shown as an image,
    not as its base64 in a JSON view)."""
    return bool(result.is_error) or any(not isinstance(block, mt.TextContent) for block in result.content)


def model_result(
    envelope: dict[str, Any], text: str, meta: Mapping[str, Any] | None, *, is_error: bool
) -> mt.CallToolResult:
    """The tool result a host receives for a view or an error envelope: the JSON as text and as structured
    content (tools are listed without their output schema when references are on, so a view whose members
    became markers is never checked against a schema it no longer fits)."""
    return mt.CallToolResult(
        content=[mt.TextContent(type="text", text=text)],
        structured_content=envelope,
        is_error=is_error,
        _meta=dict(meta) if meta else None,
    )
