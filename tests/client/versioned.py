"""A server of versioned documents for the concurrency tests, with every change and every answer recorded.

`read(doc, who)` answers the document's current version number (in its text, its structured content and
its own `_meta`, so a served copy whose `_meta` belongs to another version than its content shows), and
echoes `who` (the partition that asked: answers are partition-specific). It is stamped tagged and
private, with a short ttl. Its body reads the version first and may then wait (a gate the test opens, or
a delay the request asks for in its `_meta`), so an answer to an old request can land after newer ones.
`edit(doc, who, n)` bumps the version; it is annotated mutating, so a trusted cache ends freshness after it.

Each request names its caller in `_meta` (`rid`), which is not part of the cache key: the log then says
which call's request produced each answer (followers of a shared request send nothing), and each change.
Everything is stamped with a sequence number (one event loop: a total order) and the server's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio
import mcp_types as mt
from fastmcp import Context, FastMCP
from fastmcp.tools.base import ToolResult

from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies

READ_ONLY = mt.ToolAnnotations(read_only_hint=True)
MUTATING = mt.ToolAnnotations(read_only_hint=False, destructive_hint=True)


@dataclass(frozen=True)
class Answered:
    """One run of the read body: the version it read, for whom, for which call's request."""

    rid: str | None
    doc: str
    who: str
    version: int
    seq: int
    at: float


@dataclass(frozen=True)
class Changed:
    """A document moved to `version` (by the edit call `rid`, or behind every cache's back: None)."""

    doc: str
    version: int
    seq: int
    at: float
    rid: str | None
    who: str | None


@dataclass
class Versions:
    """The server's state and log. `record` (optional) also receives every log entry as a dict."""

    clock: Callable[[], float]
    record: Callable[[dict[str, Any]], None] | None = None
    versions: dict[str, int] = field(default_factory=dict)
    changes: list[Changed] = field(default_factory=list)
    answers: list[Answered] = field(default_factory=list)
    gates: dict[str, anyio.Event] = field(default_factory=dict)
    """rid -> the gate its read body waits for after reading the version."""
    reached: dict[str, anyio.Event] = field(default_factory=dict)
    """rid -> set once a read body of that call has read the version."""
    seq: int = 0
    pad: str = ""
    """Put in every answer's structured content (as `notes`) when not empty: a long one makes answers large
    enough that a new version is sent as a delta reply (the change is a few bytes)."""

    def tick(self) -> int:
        self.seq += 1
        return self.seq

    def version(self, doc: str) -> int:
        return self.versions.get(doc, 0)

    def change(self, doc: str, rid: str | None = None, who: str | None = None) -> int:
        """Bump `doc` (behind every cache's back when called directly) and log it; the new version."""
        version = self.version(doc) + 1
        self.versions[doc] = version
        entry = Changed(doc, version, self.tick(), self.clock(), rid, who)
        self.changes.append(entry)
        if self.record is not None:
            self.record({"event": "change", **asdict(entry)})
        return version

    def hold(self, rid: str) -> None:
        """Make the read body of call `rid` wait, once it has read the version, until `release(rid)`."""
        self.gates[rid] = anyio.Event()

    def release(self, rid: str) -> None:
        self.gates[rid].set()

    def release_all(self) -> None:
        for gate in self.gates.values():
            gate.set()

    def held(self) -> list[str]:
        return [rid for rid, gate in self.gates.items() if not gate.is_set()]

    async def wait_reached(self, rid: str) -> None:
        await self.reached.setdefault(rid, anyio.Event()).wait()

    async def read(self, doc: str, who: str, meta: dict[str, Any]) -> ToolResult:
        rid = meta.get("rid") if isinstance(meta.get("rid"), str) else None
        version = self.version(doc)
        entry = Answered(rid, doc, who, version, self.tick(), self.clock())
        self.answers.append(entry)
        if self.record is not None:
            self.record({"event": "answer", **asdict(entry)})
        if rid is not None:
            self.reached.setdefault(rid, anyio.Event()).set()
            gate = self.gates.get(rid)
            if gate is not None:
                await gate.wait()
        delay_ms = meta.get("delayMs")
        if isinstance(delay_ms, int) and delay_ms > 0:
            await anyio.sleep(delay_ms / 1000)
        return ToolResult(
            content=[mt.TextContent(type="text", text=text_of(doc, version, who))],
            structured_content={
                "doc": doc,
                "who": who,
                "version": version,
                **({"notes": self.pad} if self.pad else {}),
            },
            meta={"version": version, "who": who},
        )


def text_of(doc: str, version: int, who: str) -> str:
    return f"{doc} v{version} for {who}"


def build_versioned(state: Versions, ttl_ms: int) -> FastMCP:
    server = FastMCP("versioned")

    @server.tool(annotations=READ_ONLY)
    async def read(doc: str, who: str, ctx: Context) -> ToolResult:
        return await state.read(doc, who, dict(ctx.request_context.meta or {}))

    # No output schema: a client then has no answer of this tool to check, and does not import jsonschema
    # (seconds of grammar compiling on the first check) in the middle of a timed run.
    @server.tool(annotations=MUTATING, output_schema=None)
    async def edit(doc: str, who: str, n: int, ctx: Context) -> str:
        # `n` makes every edit a distinct call (identical concurrent calls may be shared by a cache).
        rid = (ctx.request_context.meta or {}).get("rid")
        return f"{doc} is now v{state.change(doc, rid if isinstance(rid, str) else None, who)}"

    install(server, ToolPolicies({"read": CachePolicy(ttl_ms=ttl_ms)}))
    return server
