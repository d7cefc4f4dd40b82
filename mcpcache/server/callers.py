"""Who is calling, as the framework verified it: the history partition of a caller's access token.

Both adapters read the token the framework's auth put in the request's context (FastMCP's
`get_access_token`, the MCP SDK's `auth_context`) and turn it into a `Partition` here, with the MCP
SDK's own `principal_components` (client id, issuer, subject: what it binds sessions and request state
to), so the two adapters and the SDK agree on who a caller is. Imported by the adapters only: it loads
the SDK's auth package, which `mcpcache.server` alone must not pay for.
"""

from __future__ import annotations

from mcp.server.auth.provider import AccessToken, principal_components

from mcpcache.server.history import ANONYMOUS, UNKNOWN, Partition

__all__ = ["partition_of"]


def partition_of(token: AccessToken | None) -> Partition:
    """The caller's partition: its verified identity and scopes, or `ANONYMOUS` without a token."""
    if token is None:
        return ANONYMOUS
    try:
        client_id, issuer, subject = principal_components(token)
        return Partition.caller(client_id, issuer, subject, [str(scope) for scope in token.scopes])
    except Exception:  # a verifier's token of another shape: whoever it is, it is nobody else's history
        return UNKNOWN
