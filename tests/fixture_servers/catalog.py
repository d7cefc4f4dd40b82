"""One catalogue of tools, served by FastMCP 4.1.6 or by the MCP SDK 2.3.0 `MCPServer`.

Both kinds of server get the same tool names, declarations and answers, so a test is parametrized over
the server kind rather than copied. Every return shape a tool author uses is here: a dict, a pydantic
model, a str (with and without an output schema), content blocks with an image, the SDK's own result
object (`ToolResult` on FastMCP, `CallToolResult` on both); sync and async bodies; tools that fail;
tools with validators.

Every tool takes a `key`. Tests that share a server process keep out of each other's way by using keys
of their own. `DocStore` is the source the tools read; `write_doc` (undeclared) changes it, and
`body_runs` (undeclared) reports how often each body ran for a key. `build(kind, cache=False)` is the
same server without mcpcache, to compare against. `build(kind, stubs_checked=False)` is a server that
breaks docs/protocol.md section 4 as mcpcache's own did before it checked stubs: it sends the stub
`{"kind": K}` whatever the tool's output schema, for tests of what a client does with such a server.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Literal

import mcp_types as mt
from fastmcp import FastMCP
from fastmcp.tools.base import ToolResult
from fastmcp.utilities.types import Image as FastMCPImage
from mcp.server.mcpserver import Image as SDKImage
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, ConfigDict

from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.server.sdk import RevalidationExtension
from mcpcache.server.stubs import NO_OUTPUT_SCHEMA, StubCheck, StubChecks

ServerKind = Literal["fastmcp", "sdk"]
SERVER_KINDS: tuple[ServerKind, ...] = ("fastmcp", "sdk")

# A PNG signature and header: the tag covers the base64 text, not the picture.
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489")
OWN_META_KEY = "example.com/own"
"""A `_meta` key a tool sets on its own result; stamping must keep it."""


class DocStore:
    """What the tools read. A key never written reads as its first edition, version 0."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.versions: Counter[str] = Counter()
        self.runs: Counter[str] = Counter()
        """Body runs, by `"<tool>:<key>"`."""

    def text(self, key: str) -> str:
        return self.texts.get(key, f"{key}: first edition")

    def version(self, key: str) -> int:
        return self.versions[key]

    def write(self, key: str, text: str) -> None:
        self.texts[key] = text
        self.versions[key] += 1

    def ran(self, tool: str, key: str) -> None:
        self.runs[f"{tool}:{key}"] += 1

    def runs_of(self, tool: str, key: str) -> int:
        return self.runs[f"{tool}:{key}"]


class Doc(BaseModel):
    """A strict output model: a not-modified `{"kind": ...}` does not satisfy its schema, so a matching
    tag gets the full answer (docs/protocol.md section 4)."""

    kind: Literal["doc.model"] = "doc.model"
    key: str
    text: str


class Answer(BaseModel):
    """A jupyter-style output model: only `kind` is required, so a not-modified reply validates."""

    model_config = ConfigDict(extra="allow")
    kind: str
    result: Any = None


class BrokenValidator(RuntimeError):
    pass


STOCK_SHAPES = (
    "doc_dict",
    "doc_model",
    "doc_answer",
    "doc_text",
    "doc_text_plain",
    "doc_image",
    "doc_result",
    "doc_mcp_result",
)
"""Declared tools a stock client can call and validate: every return shape, sync and async."""

STRUCTURED = {
    "doc_dict": True,
    "doc_model": True,
    "doc_answer": True,
    "doc_text": True,
    "doc_text_plain": False,
    "doc_image": False,
    "doc_result": True,
    "doc_mcp_result": True,
}
"""Whether each shape answers with structuredContent (and so whether a not-modified reply carries one)."""

NOT_MODIFIED_KIND = {
    "doc_dict": "doc",  # the answer's own kind
    "doc_model": "doc.model",  # the answer's own kind
    "doc_answer": "doc.answer",  # the answer's own kind wins over the declared one
    "doc_text": "doc.text",  # no own kind: the declared kind
    "doc_result": "doc_result",  # neither: the tool name
    "doc_mcp_result": "doc_mcp_result",
}
"""The `kind` of a not-modified reply, by the K rule of docs/protocol.md section 4."""

STUB_REFUSED = frozenset({"doc_model", "doc_text"})
"""Tools whose output schema refuses `{"kind": K}`: a strict model, and a str FastMCP and the SDK wrap
under a required `result`. A matching tag gets the full answer (docs/protocol.md section 4)."""


class _Unchecked(StubChecks):
    """A server that never looks at the schema (`build(stubs_checked=False)`)."""

    def get(self, tool: str, schema: Mapping[str, Any] | None) -> StubCheck:
        return NO_OUTPUT_SCHEMA


POLICIES: dict[str, CachePolicy] = {
    "doc_model": CachePolicy(ttl_ms=5000, scope="public"),
    "doc_answer": CachePolicy(ttl_ms=5000, kind="declared.but.unused"),
    "doc_text": CachePolicy(ttl_ms=5000, kind="doc.text"),
    "doc_text_plain": CachePolicy(),
    "doc_image": CachePolicy(ttl_ms=1000),
    "doc_result": CachePolicy(ttl_ms=1000),
    "doc_mcp_result": CachePolicy(ttl_ms=1000),
    "doc_untagged": CachePolicy(ttl_ms=5000, etag=False),
    "fails": CachePolicy(),
    "refuses": CachePolicy(),
    "nan_answer": CachePolicy(),
}
"""Declarations without validators; `doc_dict` is declared with the decorator form instead. Tests read
declarations through `policy_of`, which sees every form."""


def _policies(store: DocStore) -> ToolPolicies:
    def version(arguments: Mapping[str, Any]) -> int:
        return store.version(arguments["key"])

    async def async_version(arguments: Mapping[str, Any]) -> int:
        return store.version(arguments["key"])

    def broken(arguments: Mapping[str, Any]) -> int:
        raise BrokenValidator("the source is unreachable")

    policies = ToolPolicies(POLICIES)
    policies.declare("doc_versioned", CachePolicy(ttl_ms=5000, validator=version))
    policies.declare("doc_racy", CachePolicy(validator=version))
    policies.declare("doc_validator_fails", CachePolicy(validator=broken))
    policies.declare("doc_async_validator", CachePolicy(validator=async_version))
    return policies


def _tools(store: DocStore, policies: ToolPolicies, kind: ServerKind) -> list[Callable[..., Any]]:
    """The bodies both kinds share, in registration order. Kind-specific ones are added by the builders."""
    image = FastMCPImage if kind == "fastmcp" else SDKImage

    def answer(key: str, **extra: Any) -> dict[str, Any]:
        return {"kind": "doc", "key": key, "text": store.text(key), **extra}

    @policies.cacheable(ttl_ms=5000)
    def doc_dict(key: str) -> dict[str, Any]:
        store.ran("doc_dict", key)
        return answer(key)

    async def doc_model(key: str) -> Doc:
        store.ran("doc_model", key)
        return Doc(key=key, text=store.text(key))

    def doc_answer(key: str) -> Answer:
        store.ran("doc_answer", key)
        return Answer(kind="doc.answer", result={"key": key, "text": store.text(key)})

    async def doc_text(key: str) -> str:
        store.ran("doc_text", key)
        return store.text(key)

    async def doc_image(key: str) -> list:  # type: ignore[type-arg]  # bare: no output schema on either SDK
        store.ran("doc_image", key)
        return [mt.TextContent(type="text", text=store.text(key)), image(data=PNG, format="png")]

    async def doc_mcp_result(key: str) -> mt.CallToolResult:
        store.ran("doc_mcp_result", key)
        return mt.CallToolResult(
            content=[mt.TextContent(type="text", text=store.text(key))],
            structured_content={"key": key, "text": store.text(key)},
            _meta={OWN_META_KEY: {"n": 2}},
        )

    def doc_untagged(key: str) -> dict[str, Any]:
        return answer(key)

    def fails(key: str) -> dict[str, Any]:
        store.ran("fails", key)
        raise RuntimeError(f"cannot read {key}")

    def nan_answer(key: str) -> dict[str, float]:
        # Typed float on purpose: MCPServer keeps a float NaN as is (an `Any` value it turns into null).
        return {"x": math.nan, "y": 1.5}

    def doc_versioned(key: str) -> dict[str, Any]:
        store.ran("doc_versioned", key)
        return answer(key, version=store.version(key))

    def doc_racy(key: str) -> dict[str, Any]:
        store.ran("doc_racy", key)
        read = answer(key, version=store.version(key))
        # The source moves on while the body runs: what it read is already the old version.
        store.write(key, f"{key}: edition {store.version(key) + 1}")
        return read

    def doc_validator_fails(key: str) -> dict[str, Any]:
        store.ran("doc_validator_fails", key)
        return answer(key)

    async def doc_async_validator(key: str) -> dict[str, Any]:
        store.ran("doc_async_validator", key)
        return answer(key, version=store.version(key))

    def doc_undeclared(key: str) -> dict[str, Any]:
        store.ran("doc_undeclared", key)
        return answer(key)

    def write_doc(key: str, text: str) -> str:
        store.write(key, text)
        return "ok"

    def body_runs(key: str) -> dict[str, int]:
        prefix = f":{key}"
        return {name.removesuffix(prefix): n for name, n in store.runs.items() if name.endswith(prefix)}

    return [
        doc_dict,
        doc_model,
        doc_answer,
        doc_text,
        doc_image,
        doc_mcp_result,
        doc_untagged,
        fails,
        nan_answer,
        doc_versioned,
        doc_racy,
        doc_validator_fails,
        doc_async_validator,
        doc_undeclared,
        write_doc,
        body_runs,
    ]


def policy_of(tool: str) -> CachePolicy:
    """How `tool` is declared on every catalogue server, whichever form declared it."""
    store = DocStore()
    policies = _policies(store)
    _tools(store, policies, "sdk")  # runs the decorator-form declarations
    policy = policies.get(tool)
    if policy is None:
        raise KeyError(f"{tool} is not declared")
    return policy


def _plain_text(store: DocStore) -> Callable[[str], str]:
    def doc_text_plain(key: str) -> str:
        store.ran("doc_text_plain", key)
        return store.text(key)

    return doc_text_plain


def build_fastmcp(store: DocStore, *, cache: bool = True, stubs_checked: bool = True) -> FastMCP:
    server = FastMCP("catalog-fastmcp")
    policies = _policies(store)
    for fn in _tools(store, policies, "fastmcp"):
        server.tool(fn)
    server.tool(_plain_text(store), output_schema=None)

    @server.tool
    def doc_result(key: str) -> ToolResult:
        store.ran("doc_result", key)
        return ToolResult(
            content=[mt.TextContent(type="text", text=store.text(key))],
            structured_content={"key": key, "text": store.text(key)},
            meta={OWN_META_KEY: {"n": 1}},
        )

    @server.tool
    def refuses(key: str) -> ToolResult:
        store.ran("refuses", key)
        return ToolResult(content=[mt.TextContent(type="text", text=f"no access to {key}")], is_error=True)

    if cache:
        middleware = install(server, policies)
        if not stubs_checked:
            middleware.stubs = _Unchecked()
    return server


def build_sdk(store: DocStore, *, cache: bool = True, stubs_checked: bool = True) -> MCPServer:
    policies = _policies(store)
    extension = RevalidationExtension(policies) if cache else None
    server = MCPServer("catalog-sdk", extensions=[extension] if extension is not None else None)
    if extension is not None and stubs_checked:
        extension.attach(server)  # it reads the output schemas: doc_model's refuses the stub
    for fn in _tools(store, policies, "sdk"):
        server.add_tool(fn)
    server.add_tool(_plain_text(store), structured_output=False)

    @server.tool()
    def doc_result(key: str) -> mt.CallToolResult:
        store.ran("doc_result", key)
        return mt.CallToolResult(
            content=[mt.TextContent(type="text", text=store.text(key))],
            structured_content={"key": key, "text": store.text(key)},
            _meta={OWN_META_KEY: {"n": 1}},
        )

    @server.tool()
    def refuses(key: str) -> mt.CallToolResult:
        store.ran("refuses", key)
        return mt.CallToolResult(content=[mt.TextContent(type="text", text=f"no access to {key}")], is_error=True)

    return server


def build(
    kind: ServerKind, store: DocStore | None = None, *, cache: bool = True, stubs_checked: bool = True
) -> FastMCP | MCPServer:
    """A catalogue server of `kind` reading `store` (a fresh one if None); `cache=False` leaves mcpcache out;
    `stubs_checked=False` makes it send stubs the output schema refuses (see the module docstring)."""
    store = store if store is not None else DocStore()
    if kind == "fastmcp":
        return build_fastmcp(store, cache=cache, stubs_checked=stubs_checked)
    return build_sdk(store, cache=cache, stubs_checked=stubs_checked)
