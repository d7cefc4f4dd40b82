"""A call whose exchange was lost after it was sent: sent once more when the tool may safely run twice.

A lost exchange (the connection reset or closed, or the answer broke off, after the request went out: the MCP
SDK's `CONNECTION_CLOSED` error) leaves the outcome unknown: the server may have run the call or not. A
reset before any byte of the answer is no exception: a proxy or load balancer resets the client's connection
after forwarding the request as readily as a server resets one it never read. RFC 9110
section 9.2.2 lets a client repeat such a request automatically when its method is idempotent, and only
then. A tool's annotations say the same of a tool: `readOnlyHint` (no effect at all) or `idempotentHint`
(calling it again with the same arguments has no additional effect). So a call of such a tool is sent once
more, and any other call fails as it came, since it may have run and must not run twice. The hints are
believed only from a server the cache trusts (`CacheSettings(trusted=True)`), as `readOnlyHint` is for ending
freshness. This is the only place a call is sent again (`mcpcache.client.transport_guard`, below it, never
sends anything twice).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar, assert_never

import anyio
import mcp_types as mt
from mcp.shared.exceptions import MCPError

from mcpcache.client.contracts import Connection

logger = logging.getLogger("mcpcache.client")

T = TypeVar("T")


@dataclass(frozen=True)
class SendAgain:
    reason: str


@dataclass(frozen=True)
class KeepFailure:
    reason: str


Resend = SendAgain | KeepFailure


def lost_after_sent(exc: BaseException) -> bool:
    """Whether `exc` is an exchange lost after its request went out: the SDK's `CONNECTION_CLOSED`, which is
    also what `transport_guard` makes of an HTTP exchange that fails in any way."""
    return isinstance(exc, MCPError) and exc.code == mt.CONNECTION_CLOSED


def decide_resend(
    *, lost: bool, trusted: bool, read_only: bool | None, idempotent: bool | None, remaining_s: float | None
) -> Resend:
    """Whether a call that failed once is sent once more (`remaining_s`: what is left of the call's timeout,
    None: no bound). Once only: a second loss is the call's failure."""
    if not lost:
        return KeepFailure("not a lost exchange")
    if not trusted:
        return KeepFailure("the exchange was lost after it was sent, and the server's annotations are not trusted")
    if read_only is not True and idempotent is not True:
        return KeepFailure(
            "the exchange was lost after it was sent, and the tool is not annotated read-only or idempotent: "
            "it may have run, and must not run twice"
        )
    if remaining_s is not None and remaining_s <= 0:
        return KeepFailure("the exchange was lost after it was sent, with nothing left of the call's timeout")
    hint = "read-only" if read_only is True else "idempotent"
    return SendAgain(f"the exchange was lost after it was sent; sent once more (the tool is annotated {hint})")


async def sent_with_resend(
    conn: Connection,
    name: str,
    timeout_s: float | None,
    attempt: Callable[[float | None], Awaitable[T]],
    *,
    trusted: bool,
) -> tuple[T, str | None]:
    """`attempt(timeout_s)`, and once more (within what is left of `timeout_s`) when its exchange was lost and
    the tool may run twice. Returns its answer, and why it was sent again (None: it was not)."""
    started = anyio.current_time()
    try:
        return await attempt(timeout_s), None
    except Exception as exc:
        lost = lost_after_sent(exc)
        # The annotations are read only for a lost exchange with a trusted server: never on the common path.
        read_only = await conn.read_only(name) if lost and trusted else None
        idempotent = await conn.idempotent(name) if lost and trusted and read_only is not True else None
        remaining = None if timeout_s is None else timeout_s - (anyio.current_time() - started)
        decision = decide_resend(
            lost=lost, trusted=trusted, read_only=read_only, idempotent=idempotent, remaining_s=remaining
        )
        match decision:
            case KeepFailure():
                if lost:
                    logger.debug("tool %r: not sent again: %s", name, decision.reason)
                raise
            case SendAgain(reason=reason):
                logger.info("tool %r: %s", name, reason)
            case _:
                assert_never(decision)
    return await attempt(remaining), reason
