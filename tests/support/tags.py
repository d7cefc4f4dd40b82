"""The tag of a tool answer as it arrived at a client, for tests that check what a server stamped.

The tag covers the answer's `_meta` as the tool (and its framework) answered, without the cache block
and without `io.modelcontextprotocol/serverInfo`, which the MCP SDK stamps into every result's `_meta`
on 2026-07-28 on its way out (after the tag is computed); it describes the server, not the answer, and
is absent on 2025-11-25. `content_tag` leaves both out, so a tag recomputed from what arrived is the one
the server stamped; `answered_meta` is what the tool answered, for tests that compare `_meta` itself.
"""

from __future__ import annotations

from typing import Any

import mcp_types as mt

from mcpcache.etag import content_tag


def answered_meta(result: mt.CallToolResult) -> dict[str, Any] | None:
    """The result's `_meta` without the protocol era's `serverInfo` stamp."""
    if result.meta is None:
        return None
    return {key: value for key, value in result.meta.items() if key != mt.SERVER_INFO_META_KEY}


def tag_of(result: mt.CallToolResult) -> str:
    """The content tag of what arrived: content, structuredContent and `_meta` (block and stamp left out)."""
    return content_tag(result.content, result.structured_content, result.meta)
