"""The servers the delta tests talk to: a notebook of lines per key, behind the same tools on FastMCP
(`install`, declarations in each tool's `meta`) and on the MCP SDK's `MCPServer` (`RevalidationExtension`,
declarations by name).

Every reading tool answers `{"kind": "notes", "key": K, "lines": [...]}` (200 lines of about 60
characters: a one-line edit is a small part of the answer). Undeclared tools change the source:
`edit_notes` one line, `rewrite_notes` every line, `break_notes` makes `notes_or_error` fail.
`python notes.py <fastmcp|sdk> <port> [--auth]` serves it over streamable HTTP on 127.0.0.1, with a
static bearer token verifier (`TOKENS`) when asked.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

from mcpcache.server import CachePolicy, ToolPolicies, cache_meta
from mcpcache.server.fastmcp import RevalidationMiddleware, install
from mcpcache.server.sdk import RevalidationExtension

ServerKind = Literal["fastmcp", "sdk"]
LINES = 200
KIND = "notes"

TOKENS = {
    "t-alice": {"client_id": "alice", "scopes": ["read"]},
    "t-bob": {"client_id": "bob", "scopes": ["read"]},
}
"""Bearer tokens the HTTP servers accept with `--auth`: two callers, so two partitions."""

READERS = ("notes", "notes_versioned", "notes_public", "notes_no_delta", "notes_or_error", "notes_huge")

POLICIES = {
    "notes": CachePolicy(),
    "notes_versioned": CachePolicy(ttl_ms=5000),  # its validator is added by the builders
    "notes_public": CachePolicy(scope="public"),
    "notes_no_delta": CachePolicy(deltas=False),
    "notes_or_error": CachePolicy(),
    "notes_huge": CachePolicy(),
}


class Notes:
    """What the tools read: lines per key, a version per key, and the keys whose reads fail."""

    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {}
        self.versions: Counter[str] = Counter()
        self.broken: set[str] = set()
        self.rewrites: Counter[str] = Counter()

    def read(self, key: str) -> list[str]:
        if key not in self.lines:
            line = "{key} line {i}: the quick brown fox jumps over the lazy dog {n}"
            self.lines[key] = [line.format(key=key, i=i, n=i * 7) for i in range(LINES)]
        return list(self.lines[key])

    def edit(self, key: str, index: int, text: str) -> None:
        self.read(key)
        self.lines[key][index] = text
        self.versions[key] += 1

    def rewrite(self, key: str) -> None:
        self.rewrites[key] += 1
        n = self.rewrites[key]
        line = "{n}:{i}: pack my box with five dozen liquor jugs, round {round}"
        self.lines[key] = [line.format(n=n, i=i, round=n * 1000 + i) for i in range(LINES)]
        self.versions[key] += 1

    def version(self, arguments: Mapping[str, Any]) -> int:
        return self.versions[str(arguments["key"])]


def _bodies(notes: Notes) -> dict[str, Any]:
    """The tool functions both kinds serve, by name."""

    def answer(key: str) -> dict[str, Any]:
        return {"kind": KIND, "key": key, "lines": notes.read(key)}

    def notes_(key: str) -> dict[str, Any]:
        return answer(key)

    def notes_versioned(key: str) -> dict[str, Any]:
        return answer(key)

    def notes_public(key: str) -> dict[str, Any]:
        return answer(key)

    def notes_no_delta(key: str) -> dict[str, Any]:
        return answer(key)

    def notes_or_error(key: str) -> dict[str, Any]:
        if key in notes.broken:
            raise ValueError(f"the notes of {key} cannot be read")
        return answer(key)

    def notes_huge(key: str) -> dict[str, Any]:
        # Within 64 bits (so it has a tag and a JSON form) but beyond 2^53: no RFC 8785 form, no digest.
        return {**answer(key), "serial": 2**60 + 1}

    def edit_notes(key: str, index: int, text: str) -> str:
        notes.edit(key, index, text)
        return "ok"

    def rewrite_notes(key: str) -> str:
        notes.rewrite(key)
        return "ok"

    def break_notes(key: str, broken: bool) -> str:
        (notes.broken.add if broken else notes.broken.discard)(key)
        return "ok"

    return {
        "notes": notes_,
        "notes_versioned": notes_versioned,
        "notes_public": notes_public,
        "notes_no_delta": notes_no_delta,
        "notes_or_error": notes_or_error,
        "notes_huge": notes_huge,
        "edit_notes": edit_notes,
        "rewrite_notes": rewrite_notes,
        "break_notes": break_notes,
    }


def build_fastmcp(
    notes: Notes, *, delta_history_bytes: int | None = None, auth: bool = False
) -> tuple[FastMCP, RevalidationMiddleware]:
    server = FastMCP("notes", auth=StaticTokenVerifier(tokens=TOKENS) if auth else None)
    for name, fn in _bodies(notes).items():
        policy = POLICIES.get(name)
        meta = None
        if policy is not None:
            meta = cache_meta(ttl_ms=policy.ttl_ms, scope=policy.scope, deltas=policy.deltas)
        server.tool(fn, name=name, meta=meta)
    validators = {"notes_versioned": notes.version}
    if delta_history_bytes is None:
        return server, install(server, validators=validators)
    return server, install(server, validators=validators, delta_history_bytes=delta_history_bytes)


class _StaticVerifier:
    """The MCP SDK's `TokenVerifier` protocol over `TOKENS` (the SDK ships no static verifier)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        found = TOKENS.get(token)
        if found is None:
            return None
        return AccessToken(token=token, client_id=str(found["client_id"]), scopes=list(found["scopes"]))


def build_sdk(
    notes: Notes, *, delta_history_bytes: int | None = None, auth: bool = False
) -> tuple[MCPServer, RevalidationExtension]:
    policies = ToolPolicies(POLICIES)
    policies.declare("notes_versioned", CachePolicy(ttl_ms=5000, validator=notes.version))
    if delta_history_bytes is None:
        extension = RevalidationExtension(policies)
    else:
        extension = RevalidationExtension(policies, delta_history_bytes=delta_history_bytes)
    settings: dict[str, Any] = {}
    if auth:
        settings = {
            "token_verifier": _StaticVerifier(),
            "auth": AuthSettings(issuer_url="http://127.0.0.1/", resource_server_url=None),
        }
    server = MCPServer("notes", extensions=[extension], **settings)
    for name, fn in _bodies(notes).items():
        server.add_tool(fn, name=name)
    return server, extension


def build(
    kind: ServerKind, notes: Notes | None = None, *, delta_history_bytes: int | None = None, auth: bool = False
) -> tuple[FastMCP | MCPServer, RevalidationMiddleware | RevalidationExtension]:
    """A notes server of `kind` and its mcpcache layer (whose `stats` and `history` the tests read)."""
    notes = notes if notes is not None else Notes()
    if kind == "fastmcp":
        return build_fastmcp(notes, delta_history_bytes=delta_history_bytes, auth=auth)
    return build_sdk(notes, delta_history_bytes=delta_history_bytes, auth=auth)


def main(argv: list[str]) -> None:
    """`<kind> [--auth] <port>`: the port comes last, as `support.transports.http_servers` appends it."""
    kind, *flags, port = argv
    server, _ = build(kind, auth="--auth" in flags)  # type: ignore[arg-type]
    if isinstance(server, FastMCP):
        server.run(transport="http", host="127.0.0.1", port=int(port), show_banner=False, log_level="warning")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(port))


SCRIPT = Path(__file__).resolve()

if __name__ == "__main__":
    main(sys.argv[1:])
