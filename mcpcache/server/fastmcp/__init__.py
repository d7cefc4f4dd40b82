"""FastMCP adapter: a middleware that stamps declared tools and answers not-modified, and a transform
that lets a declared tool tag its raw return value before FastMCP converts it.

Declarations (docs/server.md). A tool declares itself in its own `meta` (`cache_meta`), or by name in a
`ToolPolicies` registry; `ToolDeclarations` resolves which applies to a tool object, including tools
renamed above their declared function and tools of mounted servers, remembers it by name so that a
call costs no extra tool lookup, and warns about names that match no tool. The middleware puts each
declared tool's block in its `tools/list` entry. When a mounted server runs its own middleware, the
layer nearest the tool stamps and the outer one passes its answer through (`chain.Claim`).

Place it before (outside) `ResponseCachingMiddleware`: the memo then still saves the server's work, and
this middleware still turns a memo hit into a not-modified reply. `install` puts it first in the chain
and advertises the extension. The middleware also looks at where memos sit on every call and stays
correct whatever the order: behind a memo it makes no not-modified replies (the memo would keep one and
serve it to stock clients), and in front of one it does not use validators for the tools the memo
covers (the memo may answer from an older version than the validator names).

Raw-value tags (docs/protocol.md section 2.1). FastMCP turns a tool's return value into content
blocks and structured content in `Tool.convert_result`, called by `FunctionTool.run` right after the
body; for a large dict that conversion (serialise, parse, serialise again) costs several times the tag.
The middleware only ever sees its output. So `install` also adds `RawTagTransform`, a server transform
whose `get_tool` hands FastMCP, for declared plain function tools only, a copy of the tool whose
`convert_result` first hashes the raw value in the domain `mcpcache/raw/v1` (tool name, FastMCP and
pydantic-core versions, return annotation, output schema) and, when the request's tag matches,
returns the not-modified reply without converting anything. The body still runs. Why a transform:
FastMCP's middleware and extension interceptors sit above `convert_result` and see only converted
results; wrapping the tool function would change the signature FastMCP introspects (injected
parameters, argument validation) and see generators before FastMCP materialises them; a transform is
FastMCP's public way of handing out a modified tool, leaves the user's tool object untouched and also
covers tools added after `install`. Its one side effect: FastMCP does not pre-seed its wire-schema
cache (Mcp-Param header checks) while a transform is installed; the first `tools/list` fills it.

The raw path is used only when it is exact: the value is made of exact JSON types, the tool's return
annotation is one whose serializer leaves such values unchanged, nothing between the middleware and
the tool can change the answer (every inner middleware and extension leaves `tools/call` alone; no
response memo), and no validator names the tag. Anything else falls back to the tag of the converted
answer, never to a guess.
"""

from __future__ import annotations

from typing import Any

from mcpcache.extras import needs

with needs("fastmcp", "mcpcache.server.fastmcp"):
    import fastmcp as _fastmcp  # noqa: F401  # first, so that a missing FastMCP says which extra brings it

from mcpcache.server.fastmcp.answers import read_tool_answer
from mcpcache.server.fastmcp.declarations import ToolDeclarations
from mcpcache.server.fastmcp.middleware import RevalidationCapability, RevalidationMiddleware, install
from mcpcache.server.fastmcp.raw_tags import RawTagTransform, raw_tag_domain, raw_tagged_class

__all__ = [
    "RawTagTransform",
    "RawTaggedTool",
    "RevalidationCapability",
    "RevalidationMiddleware",
    "ToolDeclarations",
    "install",
    "raw_tag_domain",
    "read_tool_answer",
]


def __getattr__(name: str) -> Any:
    # Made on first use: subclassing a pydantic model builds its schema (see `raw_tagged_class`).
    if name == "RawTaggedTool":
        return raw_tagged_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
