"""What a caller declared about itself, passed on to the upstream as declared.

An upstream decides what it may ask of its client from the capabilities that client declared: it must not
ask for sampling, elicitation or roots the client never offered (it answers `-32021` instead, or leaves
that input request out). Through the gateway its client is the gateway's upstream session, so that
session must declare exactly what the caller declared, and name the caller as the caller named itself.
FastMCP's proxy client declares all three, whoever calls; `Declared` is read from the caller's request,
and `client_options` turns it into the upstream client's options: a handler (which relays the request to
the caller) for each capability declared, none for the others, so the MCP SDK's client leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mcp_types as mt

__all__ = ["Declared", "client_options"]


@dataclass(frozen=True)
class Declared:
    """The caller's declared client capabilities and identity, in a hashable form (one upstream client
    factory per distinct declaration)."""

    sampling: str | None
    """The caller's sampling capability as canonical JSON, or None when it declared none."""
    elicitation: bool
    roots: bool
    client_info: str | None
    """The caller's `clientInfo` as canonical JSON, or None when it gave none."""

    @classmethod
    def of(cls, capabilities: mt.ClientCapabilities | None, client_info: mt.Implementation | None) -> Declared:
        caps = capabilities or mt.ClientCapabilities()
        return cls(
            sampling=None if caps.sampling is None else caps.sampling.model_dump_json(by_alias=True, exclude_none=True),
            elicitation=caps.elicitation is not None,
            roots=caps.roots is not None,
            client_info=None if client_info is None else client_info.model_dump_json(by_alias=True, exclude_none=True),
        )


def client_options(declared: Declared) -> dict[str, Any]:
    """FastMCP `ProxyClient` options that make its session declare what the caller declared: None for a
    handler turns off the proxy's relay (and so the capability); a capability declared keeps the relay."""
    options: dict[str, Any] = {}
    if declared.sampling is None:
        options["sampling_handler"] = None
    else:
        options["sampling_capabilities"] = mt.SamplingCapability.model_validate_json(declared.sampling)
    if not declared.elicitation:
        options["elicitation_handler"] = None
    if not declared.roots:
        options["roots"] = None
    if declared.client_info is not None:
        options["client_info"] = mt.Implementation.model_validate_json(declared.client_info)
    return options
