"""Read one notebook three times through mcpcache's client cache and say what each read cost.

Start the demo server first (it writes demo-200.ipynb, a notebook of 200 cells, into its demo folder and
serves it; its answers stay fresh for 30 s):

    mcpcache demo-server --http 8765 --generate 200 --ttl-ms 30000

then, in another terminal:

    python examples/client.py                              # or: python examples/client.py http://127.0.0.1:9000/mcp

The URL can also come from $MCPCACHE_EXAMPLE_URL. Answers are kept in the default store, a SQLite file in
your user cache folder ($MCPCACHE_DIR overrides it); `mcpcache cache ls` shows what this left there.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from urllib.parse import urlsplit

from mcp import Client

from mcpcache import ToolCache
from mcpcache.client import CallOutcome

URL = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MCPCACHE_EXAMPLE_URL", "http://127.0.0.1:8765/mcp")
NOTEBOOK = "demo-200.ipynb"
START = "mcpcache demo-server --http 8765 --generate 200 --ttl-ms 30000"


def size(n: int) -> str:
    return f"{n / 1_000_000:.2f} MB" if n >= 100_000 else f"{n:,} bytes"


def explain(outcome: CallOutcome) -> str:
    """The outcome in plain words; `outcome.reason` is the cache's own account, kept for the curious."""
    match outcome.status:
        case "miss":
            why = (
                "nothing was cached for this call yet (the first read of this notebook from this server)"
                if "nothing stored" in outcome.reason
                else f"the cache could not reuse what it had ({outcome.reason})"
            )
            kept = (
                "It is now cached: the server said the answer stays fresh for a while and gave it a tag."
                if outcome.stored
                else "It was not cached (the server sent no cache hints, or the answer was an error)."
            )
            return f"miss: the whole notebook came over the wire, because {why}. {kept}"
        case "fresh_hit":
            return (
                f"fresh hit: served from the cache without asking the server at all; "
                f"{size(outcome.bytes_saved)} not transferred."
            )
        case "revalidated":
            return (
                "revalidated: the cached copy had gone stale, so the client asked the server "
                "'has it changed since this tag?' and the server answered 'not modified' instead of the "
                f"notebook; {size(outcome.bytes_saved)} not transferred."
            )
        case "bypass":
            return "bypass: the cache was not used for this call."


def server_answers(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=3):
            return True
    except OSError:
        return False


async def main() -> None:
    if not server_answers(URL):
        sys.exit(f"Nothing answers at {URL}. Start the demo server first: {START}")
    # The default store is a SQLite file that outlives this process; `async with` closes it at the end.
    async with ToolCache() as cache, Client(URL) as client:
        cached = cache.wrap(client)  # call_tool and everything else work as on `client`
        for read in (1, 2, 3):
            call = await cached.call("read_notebook", {"path": NOTEBOOK})  # the result and what the cache did
            print(f"read {read}: {explain(call.outcome)}")
            if read == 2 and call.outcome.fresh_for_ms is not None:
                # The demo server's answers stay fresh as long as it says (--ttl-ms: 30 s in the README's
                # command, long enough for the second read to be a fresh hit even on a busy machine). Wait
                # that out so the third read shows the other way the cache saves bytes: revalidation.
                wait_s = call.outcome.fresh_for_ms / 1000 + 0.2
                print(f"        (waiting {wait_s:.1f} s for the cached copy to go stale)")
                await asyncio.sleep(wait_s)
    s = cache.stats
    hits = "fresh hit" if s.fresh_hits == 1 else "fresh hits"
    misses = "miss" if s.misses == 1 else "misses"
    print(
        f"in all: {s.calls} reads, {s.fresh_hits} {hits}, {s.revalidations} revalidated, {s.misses} {misses}; "
        f"{size(s.bytes_saved)} not transferred."
    )


if __name__ == "__main__":
    asyncio.run(main())
