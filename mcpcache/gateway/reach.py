"""Reaching the upstreams before the gateway serves: each one connected and its tools listed, as a caller's
first call would, so that an upstream that cannot start or answer stops the gateway in one line naming it
and its error (otherwise every call fails later with `Unknown tool`, the cause only in the log).

A stdio upstream's error is what it wrote on stderr before it exited ("No module named mcpcache" when the
command's `python` is not the one mcpcache is installed in): its stderr goes through a relay
(`mcpcache.gateway.stderr`) that holds the lines until the upstream has answered, and keeps the last of
them for the message.

A tool the configuration declares that the upstream does not list is named in one warning per upstream
(a misspelt name would otherwise pass every call through unstamped, or fail it, with nothing said).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from mcpcache.gateway.outages import cause_of

if TYPE_CHECKING:
    from mcpcache.gateway.app import Upstream

__all__ = ["UPSTREAM_START_S", "reach_upstreams"]

logger = logging.getLogger("mcpcache.gateway")

UPSTREAM_START_S = 120.0
"""How long an upstream has to connect and list its tools at start (a stdio server's first start in a
fresh environment can take half a minute on a loaded machine)."""


async def _reach(upstream: Upstream) -> None:
    client = upstream.client_factory()
    async with client:
        tools = await client.list_tools()
        upstream.learned.capabilities = client.server_capabilities
        upstream.learned.version = client.protocol_version
    listed = {tool.name for tool in tools}
    missing = [name for name in upstream.settings.tools if name not in listed]
    if missing:
        logger.warning(
            "mcpcache gateway: upstream %r does not list %s declared for it (%s): calls of %s go to the "
            "upstream as they are; check the names against its tools/list (it lists %d tool(s))",
            upstream.name,
            "the tool" if len(missing) == 1 else f"{len(missing)} tools",
            ", ".join(missing),
            "it" if len(missing) == 1 else "them",
            len(listed),
        )


async def reach_upstreams(
    upstreams: Sequence[Upstream], *, within_s: float = UPSTREAM_START_S
) -> list[tuple[Upstream, str]]:
    """Connect to each upstream and list its tools, side by side, in this event loop (where the gateway then
    serves: a stdio upstream's process and session are kept for the calls); not those that get the
    callers' headers (`forward_headers`). Returns (upstream, why) for
    each that failed, with the reason in words; a stdio upstream's last line on stderr is part of it."""
    failed: list[tuple[Upstream, str]] = []

    async def one(upstream: Upstream) -> None:
        try:
            with anyio.fail_after(within_s):
                await _reach(upstream)
        except TimeoutError:
            failed.append((upstream, f"did not answer within {within_s:g} s"))
        except Exception as exc:  # whatever the upstream did, the gateway says it in one line
            relay = upstream.stderr
            said = ""
            if relay is not None:
                # The child wrote its error, then exited; the relay's thread may not have read it yet.
                await anyio.to_thread.run_sync(relay.drain, 2.0)
                said = relay.last_words()
            why = f"closed the connection before answering: {said}" if said else f"did not answer: {cause_of(exc)}"
            failed.append((upstream, why))
        else:
            if upstream.stderr is not None:
                upstream.stderr.release()

    async with anyio.create_task_group() as group:
        for upstream in upstreams:
            # One that is sent each caller's own headers (its credentials) cannot be asked before a caller
            # comes: it is left to the first call, as before.
            if not upstream.settings.forward_headers:
                group.start_soon(one, upstream)
    return sorted(failed, key=lambda pair: pair[0].name)
