"""Results by reference: a large tool result is kept aside, the model sees a short view with a URI, and the
model passes that URI (or a part of it) to the next tool instead of copying the data token by token.

    python examples/references.py

Runs on its own (no server): the "tool results" here are plain JSON values; in an agent they are the
answers of MCP tool calls (`mcpcache.refs.call_for_model` does both steps through a `ToolCache`).
"""

from __future__ import annotations

import asyncio
import json

from mcpcache.refs import References
from mcpcache.stores import MemoryStore


async def main() -> None:
    # One References per conversation: a URI resolves only in the conversation that minted it. MemoryStore
    # keeps this example self-contained; the default is a SQLite file, so references outlive the process.
    refs = References(store=MemoryStore(), conversation_id="conv-42", threshold_bytes=4096, max_view_bytes=4096)

    # 1. A query tool answered 2,000 rows (about 90 KB). Results of 4 KB or more are stored; the model is
    #    shown a view of at most 4 KB that names what was left out, and the URI to get it back.
    rows = [{"hour": h, "station": "KSLC", "temp_c": round(10 + (h % 24) * 0.5, 1)} for h in range(2000)]
    result = {"station": "KSLC", "rows": rows}
    view = await refs.for_model(result, server="weather", tool="query", arguments={"station": "KSLC"})
    print(f"the answer is {view.size_bytes:,} bytes; the model sees {len(view.text()):,}:")
    print("  ", view.text())
    uri = view.envelope["_cache_uri"]

    # 2. The model wants a chart of the rows: it passes `data_uri` (the URI plus a JSON pointer to the part
    #    it means) instead of writing `data` out. Before the call is sent, the host resolves it.
    model_args = {"data_uri": f"{uri}#/rows", "title": "KSLC"}
    resolution = await refs.resolve(tool="plot", arguments=model_args)
    assert resolution.ok
    assert resolution.arguments is not None
    data = resolution.arguments["data"]
    print(f"plot is called with data = {len(data):,} rows, resolved from {model_args['data_uri']}")

    # 3. A reference that does not resolve (here: made up) never reaches the tool. The model is told which
    #    argument failed, why, and how to fix it, as the tool's answer.
    bad = await refs.resolve(tool="plot", arguments={"data_uri": "mcp+cache://conv-42/AAAAAAAAAAA"})
    print("a made-up reference is refused before the call:", json.dumps(bad.error)[:200], "...")


if __name__ == "__main__":
    asyncio.run(main())
