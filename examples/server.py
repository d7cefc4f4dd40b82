"""A FastMCP server whose tools declare caching where they are declared, with `cache_meta`.

    python examples/server.py                     # stdio (what a desktop host starts)
    python examples/server.py --http 8000         # streamable HTTP on http://127.0.0.1:8000/mcp
    python examples/server.py --dir notes         # serve another folder (default: the current one)

Needs the fastmcp extra (`pip install -e '.[fastmcp]'` in the clone). Clients that know nothing of
mcpcache get the same answers as before, plus a small cache block in `_meta`; a client that keeps answers
(mcpcache's `ToolCache`, or `mcpcache proxy` in front of any host) sends the tag back and gets "not
modified" instead of the file.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastmcp import FastMCP

from mcpcache.server import cache_meta
from mcpcache.server.fastmcp import install

ROOT = Path.cwd()
mcp = FastMCP("files")


def resolve(path: str) -> Path:
    """A path inside the served folder; anything outside it is refused."""
    target = (ROOT / path).resolve()
    if not target.is_relative_to(ROOT):
        raise ValueError(f"{path} is outside the served folder")
    return target


# Private (the default scope): a file's text may depend on who may read it, so a client never shares it
# across users. Fresh for 5 s, then a client revalidates with the tag it holds.
@mcp.tool(annotations={"readOnlyHint": True}, meta=cache_meta(ttl_ms=5000, kind="file.read"))
def read_file(path: str) -> dict[str, Any]:
    """The text of a file in the served folder."""
    return {"kind": "file.read", "path": path, "text": resolve(path).read_text()}


# Public and long-lived: the answer depends only on the arguments, so any client may reuse it for a day.
@mcp.tool(annotations={"readOnlyHint": True}, meta=cache_meta(ttl_ms=86_400_000, scope="public"))
def word_count(text: str) -> int:
    """How many words a text has."""
    return len(text.split())


# Not declared: it changes things, so its answers are never stamped. A client that trusts the server's
# annotations (CacheSettings(trusted=True)) ends the freshness of what it holds from this server after it.
@mcp.tool(annotations={"destructiveHint": True})
def write_file(path: str, text: str) -> str:
    """Replace a file's text."""
    resolve(path).write_text(text)
    return f"wrote {len(text)} characters to {path}"


def file_version(arguments: Mapping[str, Any]) -> str | None:
    """What read_file reads, versioned cheaply: a call whose tag still matches is answered without reading.
    None (no version: the tag comes from the answer) for a path the tool itself will refuse."""
    try:
        stat = resolve(str(arguments["path"])).stat()
    except (OSError, ValueError):
        return None
    return f"{stat.st_mtime_ns}-{stat.st_size}"


# One call turns it on: stamps the declared tools, answers conditional calls, warns about declarations that
# match no tool. Validators are code, so they are given here rather than in `meta` (which clients see).
install(mcp, validators={"read_file": file_version})

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    parser.add_argument("--dir", default=".", help="the folder to serve (default: the current one)")
    options = parser.parse_args()
    ROOT = Path(options.dir).resolve()
    os.chdir(ROOT)
    if options.http is None:
        mcp.run(show_banner=False)
    else:
        # host_origin_protection: refuse a Host or Origin of another site, so that a web page cannot reach this
        # server through a name of its own that resolves to 127.0.0.1 (DNS rebinding).
        mcp.run(transport="http", host="127.0.0.1", port=options.http, show_banner=False, host_origin_protection="auto")
