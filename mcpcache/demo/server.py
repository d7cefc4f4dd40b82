"""The demo server: a folder of Jupyter notebooks behind four MCP tools.

It exists so users can see mcpcache work on a realistic multi-megabyte answer, and so the benchmarks
can start the same server in every configuration they compare:

- `revalidation=False`: plain FastMCP, no mcpcache (the baseline);
- `revalidation=True`: mcpcache tags the answer by hashing it (saves bytes, not work);
- `validator=True`: mcpcache tags from the notebook file's xxh3-128 before the body runs, so a
  matching conditional call skips reading and parsing the notebook (saves work too);
- `memo=True`: FastMCP's `ResponseCachingMiddleware` behind mcpcache, the server-side memo a user
  might reach for first (saves work, not bytes).

Every path argument is confined to the folder the server was started on.
"""

from __future__ import annotations

import os
import stat
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Required

import anyio.to_thread
import orjson
import xxhash
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.middleware.caching import CallToolSettings, ResponseCachingMiddleware
from key_value.aio.stores.memory import MemoryStore
from mcp_types import ToolAnnotations
from typing_extensions import TypedDict

from mcpcache.demo.notebooks import notebook_text
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies

__all__ = [
    "CellView",
    "NotebookFolder",
    "build_demo_server",
]

TTL_MS = 5000
KIND_LIST = "notebook.list"
KIND_READ = "notebook.read"
KIND_CELL = "notebook.cell"
KIND_EDIT = "notebook.edit"
READ_TOOLS = ("list_notebooks", "read_notebook", "read_cell")

_MEMO_COLLECTION = "tools/call"
# The memo's own default (1 MB) would silently skip the multi-megabyte notebooks the demo is about.
_MEMO_MAX_ITEM_BYTES = 256 * 1024 * 1024


# Output schemas. Only `kind` is required: a not-modified reply carries `{"kind": ...}` as its
# structured content and clients validate it against these schemas (PROTOCOL.md section 4).
class CellView(TypedDict, total=False):
    index: int
    id: str
    cell_type: str
    source: str
    execution_count: int | None
    outputs: list[dict[str, Any]]


class NotebookEntry(TypedDict):
    path: str
    size_bytes: int


class NotebookList(TypedDict, total=False):
    kind: Required[str]
    notebooks: list[NotebookEntry]


class NotebookAnswer(TypedDict, total=False):
    kind: Required[str]
    path: str
    nbformat: int
    nbformat_minor: int
    metadata: dict[str, Any]
    cell_count: int
    cells: list[CellView]


class CellAnswer(TypedDict, total=False):
    kind: Required[str]
    path: str
    cell_count: int
    cell: CellView


class EditAnswer(TypedDict, total=False):
    kind: Required[str]
    path: str
    index: int
    cell_count: int


def _joined(value: object) -> object:
    # On disk nbformat splits multi-line strings into lists of lines; answers carry them whole.
    if isinstance(value, list) and all(isinstance(part, str) for part in value):
        return "".join(value)
    return value


def _joined_output(output: Mapping[str, Any]) -> dict[str, Any]:
    joined = dict(output)
    if "text" in joined:
        joined["text"] = _joined(joined["text"])
    data = joined.get("data")
    if isinstance(data, Mapping):
        joined["data"] = {mime: _joined(value) for mime, value in data.items()}
    return joined


def _cell_view(index: int, cell: Mapping[str, Any]) -> CellView:
    view: CellView = {
        "index": index,
        "id": str(cell.get("id", "")),
        "cell_type": str(cell.get("cell_type", "")),
        "source": str(_joined(cell.get("source", ""))),
    }
    if cell.get("cell_type") == "code":
        count = cell.get("execution_count")
        view["execution_count"] = count if isinstance(count, int) else None
        view["outputs"] = [_joined_output(output) for output in cell.get("outputs", []) if isinstance(output, Mapping)]
    return view


class NotebookFolder:
    """The folder the server serves. Every path a client names goes through `resolve`."""

    def __init__(self, directory: str | Path) -> None:
        self.root = Path(directory).resolve()
        if not self.root.is_dir():
            raise NotADirectoryError(f"not a folder: {directory}")
        # Edits are read-modify-write; two at once would lose one of them.
        self.edit_lock = threading.Lock()

    def resolve(self, path: str) -> Path:
        """The notebook `path` names, or a ToolError saying why it is refused."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("path must name a notebook, e.g. 'analysis.ipynb'")
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = self.root / candidate
        try:
            # resolve() follows symlinks, so a link inside the folder that points elsewhere is refused too.
            resolved = candidate.resolve()
        except (OSError, ValueError) as exc:  # a symlink loop, an embedded NUL
            raise ToolError(f"refused: {path!r} is not a usable path ({exc})") from exc
        if not resolved.is_relative_to(self.root):
            raise ToolError(f"refused: {path!r} is outside the notebook folder")
        if resolved.suffix != ".ipynb":
            raise ToolError(f"refused: {path!r} is not a .ipynb notebook")
        if not resolved.is_file():
            raise ToolError(f"no notebook at {path!r} (use list_notebooks to see what is there)")
        return resolved

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def entries(self) -> list[NotebookEntry]:
        entries: list[NotebookEntry] = []
        for found in sorted(self.root.rglob("*.ipynb")):
            parts = found.relative_to(self.root).parts
            if any(part.startswith(".") for part in parts):
                continue  # .ipynb_checkpoints and other hidden folders
            resolved = found.resolve()
            if not resolved.is_relative_to(self.root) or not resolved.is_file():
                continue
            entries.append({"path": self.relative(found), "size_bytes": resolved.stat().st_size})
        return entries

    def load(self, path: str) -> tuple[Path, dict[str, Any]]:
        target = self.resolve(path)
        try:
            notebook = orjson.loads(target.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise ToolError(f"{path!r} is not valid notebook JSON: {exc}") from exc
        if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
            raise ToolError(f"{path!r} is not an nbformat-4 notebook (no cells list)")
        return target, notebook

    def version(self, path: object) -> str | None:
        """The xxh3-128 of the notebook's bytes, or None when `path` is not a notebook here.

        Content, never mtime: a file rewritten within the clock's granularity, or restored with its
        old mtime, must still get a new tag.
        """
        if not isinstance(path, str):
            return None
        try:
            target = self.resolve(path)
            return xxhash.xxh3_128_hexdigest(target.read_bytes())
        except (ToolError, OSError):
            # The body will run and give the client the proper error.
            return None

    def write(self, target: Path, notebook: dict[str, Any]) -> None:
        """Replace the file atomically, so a concurrent reader sees the old notebook or the new one."""
        cells = [
            {
                **cell,
                "source": _joined(cell.get("source", "")),
                "outputs": [_joined_output(o) for o in cell.get("outputs", [])],
            }
            if cell.get("cell_type") == "code"
            else {**cell, "source": _joined(cell.get("source", ""))}
            for cell in notebook["cells"]
        ]
        text = notebook_text({**notebook, "cells": cells})
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".", suffix=".ipynb.tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            # mkstemp creates the file 0600; the notebook keeps the permissions it had.
            os.chmod(temp, stat.S_IMODE(target.stat().st_mode))
            os.replace(temp, target)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise


def _cell_index(index: int, cells: list[Any], path: str) -> int:
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ToolError(f"index must be a cell number >= 0, got {index!r}")
    if index >= len(cells):
        last = f"0-{len(cells) - 1}" if cells else "none"
        raise ToolError(f"no cell {index} in {path!r}: it has {len(cells)} cells ({last})")
    return index


class _Memo:
    """FastMCP's response memo, plus the invalidation it lacks.

    The memo keys on tool and arguments only, so it cannot see a notebook change: edits through
    `edit_cell` clear it. Changes by other programs are served stale until the memo's ttl, as with any
    memo. (mcpcache does not use the validator for tools a memo covers: the memo may answer from an
    older version than the validator names.)
    """

    def __init__(self, ttl_seconds: int) -> None:
        self.store = MemoryStore()
        self.middleware = ResponseCachingMiddleware(
            cache_storage=self.store,
            call_tool_settings=CallToolSettings(ttl=ttl_seconds, included_tools=list(READ_TOOLS)),
            max_item_size=_MEMO_MAX_ITEM_BYTES,
        )

    async def invalidate(self) -> None:
        # Key by key: destroying the collection would leave the memo reading a collection that is gone.
        while keys := await self.store.keys(_MEMO_COLLECTION):
            await self.store.delete_many(keys, collection=_MEMO_COLLECTION)


def build_demo_server(
    directory: str | Path,
    *,
    validator: bool = False,
    memo: bool = False,
    revalidation: bool = True,
    ttl_ms: int = TTL_MS,
    peer_sha256: bool = False,
    name: str = "mcpcache-demo",
) -> FastMCP:
    """A FastMCP server over the notebooks in `directory`, in one of the benchmark's configurations.

    validator: tag read_notebook/read_cell from the file's xxh3-128, checked before the body runs.
    memo: put FastMCP's ResponseCachingMiddleware behind mcpcache.
    revalidation: install mcpcache at all (False: the plain-FastMCP baseline).
    ttl_ms: the freshness the read tools announce (0: a client revalidates before every reuse).
    peer_sha256: instead of mcpcache, the SHA-256 revalidation of the Datalayer Jupyter MCP server
        (`mcpcache.bench.peers`), for the benchmark's side-by-side run.
    """
    if validator and not revalidation:
        raise ValueError("validator=True needs revalidation=True: the validator only feeds mcpcache's tags")
    if peer_sha256 and (revalidation or validator):
        raise ValueError("peer_sha256 replaces mcpcache: pass revalidation=False")
    folder = NotebookFolder(directory)
    response_memo = _Memo(ttl_seconds=TTL_MS // 1000) if memo else None
    server = FastMCP(name, middleware=[response_memo.middleware] if response_memo is not None else None)
    read_only = ToolAnnotations(read_only_hint=True)

    @server.tool(annotations=read_only)
    def list_notebooks() -> NotebookList:
        """List the notebooks in the served folder (relative paths, sizes in bytes)."""
        return {"kind": KIND_LIST, "notebooks": folder.entries()}

    @server.tool(annotations=read_only)
    def read_notebook(path: str) -> NotebookAnswer:
        """Read a whole notebook: every cell with its source and outputs (images as base64 PNG)."""
        target, notebook = folder.load(path)
        cells = [_cell_view(i, cell) for i, cell in enumerate(notebook["cells"]) if isinstance(cell, Mapping)]
        return {
            "kind": KIND_READ,
            "path": folder.relative(target),
            "nbformat": int(notebook.get("nbformat", 4)),
            "nbformat_minor": int(notebook.get("nbformat_minor", 0)),
            "metadata": dict(notebook.get("metadata") or {}),
            "cell_count": len(cells),
            "cells": cells,
        }

    @server.tool(annotations=read_only)
    def read_cell(path: str, index: int) -> CellAnswer:
        """Read one cell (0-based index) with its source and outputs."""
        target, notebook = folder.load(path)
        cells = notebook["cells"]
        i = _cell_index(index, cells, path)
        return {
            "kind": KIND_CELL,
            "path": folder.relative(target),
            "cell_count": len(cells),
            "cell": _cell_view(i, cells[i]),
        }

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True))
    async def edit_cell(path: str, index: int, source: str) -> EditAnswer:
        """Replace the source of one cell (0-based index); its outputs are kept until it is run again."""

        def edit() -> EditAnswer:
            with folder.edit_lock:
                target, notebook = folder.load(path)
                cells = notebook["cells"]
                i = _cell_index(index, cells, path)
                cells[i] = {**cells[i], "source": source}
                folder.write(target, notebook)
            return {"kind": KIND_EDIT, "path": folder.relative(target), "index": i, "cell_count": len(cells)}

        answer = await anyio.to_thread.run_sync(edit)
        if response_memo is not None:
            await response_memo.invalidate()
        return answer

    if peer_sha256:
        from mcpcache.bench.peers import Sha256Revalidation

        server.middleware.insert(0, Sha256Revalidation({tool: ttl_ms for tool in READ_TOOLS}))
        return server
    if not revalidation:
        return server

    async def notebook_version(arguments: Mapping[str, Any]) -> str | None:
        return await anyio.to_thread.run_sync(folder.version, arguments.get("path"))

    scope: Literal["private"] = "private"
    validate = notebook_version if validator else None
    install(
        server,
        ToolPolicies(
            {
                "list_notebooks": CachePolicy(ttl_ms=ttl_ms, scope=scope, kind=KIND_LIST),
                "read_notebook": CachePolicy(ttl_ms=ttl_ms, scope=scope, kind=KIND_READ, validator=validate),
                "read_cell": CachePolicy(ttl_ms=ttl_ms, scope=scope, kind=KIND_CELL, validator=validate),
            }
        ),
    )
    return server
