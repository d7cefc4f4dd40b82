"""Who answers and who asks: the server identity in cache keys, and the credentials that name a principal.

A server is its endpoint (docs/protocol.md section 5): for HTTP the URL without credentials, for stdio the
command, its arguments, its working directory and its environment (hashed). What a client sends to say who
it is (a URL's userinfo, which httpx sends as basic auth; its HTTP headers; a stdio server's environment,
where such servers take their tokens) names a principal: the proxy partitions by a digest of it, and the
gateway, which partitions by its callers, names its upstream with it (`url_server_id_as`). Credentials are
only ever kept as a digest, never in a key, a stored label or a log line (`shown_url` is what a log line
may show of a URL).
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import weakref
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

from mcp.client.stdio import get_default_environment

logger = logging.getLogger("mcpcache.client")

__all__ = [
    "connection_server_id",
    "credentials_digest",
    "environment_digest",
    "shown_url",
    "stdio_server_id",
    "url_server_id",
    "url_server_id_as",
]


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal keeps its brackets
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, ""))


def credentials_digest(url: str, headers: Mapping[str, str] | None = None) -> str | None:
    """A digest of what an HTTP client sends to say who it is (the URL's userinfo, which httpx sends as
    basic auth, and its headers, names compared case-insensitively); None when it sends neither."""
    parts = urlsplit(url)
    userinfo = [parts.username, parts.password] if parts.username is not None or parts.password else None
    named = sorted((name.lower(), value) for name, value in (headers or {}).items())
    if userinfo is None and not named:
        return None
    canonical = json.dumps({"userinfo": userinfo, "headers": named}, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def environment_digest(env: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(env.items())).encode()).hexdigest()


def url_server_id(url: str) -> str:
    """The identity of an HTTP server: its URL without credentials (who asks is the partition's business)."""
    return "url:" + _without_userinfo(url)


def url_server_id_as(url: str, headers: Mapping[str, str] | None = None) -> str:
    """The identity of an HTTP server as one principal sees it: for a cache that keeps several principals'
    answers apart by something other than these credentials (a gateway partitions by its callers, not by
    the credentials it sends upstream), the server reached with other credentials is another server."""
    digest = credentials_digest(url, headers)
    identity = url_server_id(url)
    return identity if digest is None else f"{identity}|credentials:{digest}"


def stdio_server_id(command: str, args: Sequence[str], cwd: object, env: Mapping[str, str] | None) -> str:
    """The identity of a stdio server: its command, arguments, working directory and environment.

    The environment is where such servers take their URL and credentials, so it is part of the identity;
    it is hashed, never kept in clear. With no environment given the SDK passes the server a default one,
    which is what is hashed then.
    """
    if env is None:
        env = get_default_environment()
    return "stdio:" + json.dumps([command, list(args), str(cwd or ""), environment_digest(env)])


def shown_url(url: str) -> str:
    """A URL as a log line or a message may show it: no userinfo, no query, no fragment (where credentials
    and tokens travel)."""
    parts = urlsplit(url)
    shown = urlunsplit((parts.scheme, urlsplit(_without_userinfo(url)).netloc, parts.path, "", ""))
    return shown + ("?…" if parts.query else "")


_connection_ids: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()
_warned_unnamed = False


def connection_server_id(connection: object, what: str) -> str:
    """An identity that names one connection only (or one in-process server object): two servers that
    report the same name and version must never be one server for that reason alone."""
    global _warned_unnamed
    token = _connection_ids.get(connection)
    if token is None:
        token = _connection_ids[connection] = secrets.token_hex(8)
        if not _warned_unnamed:
            _warned_unnamed = True
            logger.info(
                "mcpcache: the server behind this %s has no endpoint to name, so its cached answers are not shared "
                "beyond this connection; pass wrap(..., server_id='...') to share them across connections",
                what,
            )
    return f"connection:{token}"
