"""The demo server: a folder of Jupyter notebooks behind four MCP tools.

It exists so users can see mcpcache work on a realistic multi-megabyte answer, and so the benchmarks
can start the same server in every configuration they compare:

- `revalidation=False`: plain FastMCP, no mcpcache (the baseline);
- `revalidation=True`: mcpcache tags the answer by hashing it (saves bytes, not work);
- `validator=True`: mcpcache tags from the notebook file's xxh3-128 before the body runs, so a
  matching conditional call skips reading and parsing the notebook (saves work too);
- `memo=True`: FastMCP's `ResponseCachingMiddleware` behind mcpcache, the server-side memo a user
  might reach for first (saves work, not bytes).

Every path argument is confined to the folder the server was started on, and symbolic links are
refused: the server opens each path component relative to the folder without following links, so a
link (even one pointing inside the folder) is an error for the read and edit tools and is left out of
list_notebooks. Errors name paths relative to the folder, never the folder itself.
"""

from __future__ import annotations

import errno
import os
import posixpath
import secrets
import stat
import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, Required

import anyio.to_thread
import pydantic_core
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.middleware.caching import CallToolSettings, ResponseCachingMiddleware
from key_value.aio.stores.memory import MemoryStore
from mcp_types import ToolAnnotations
from typing_extensions import TypedDict

from mcpcache.demo import exact_json
from mcpcache.server.fastmcp import install
from mcpcache.server.files import FileVersions
from mcpcache.server.history import DEFAULT_HISTORY_BYTES
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
# structured content and clients validate it against these schemas (docs/protocol.md section 4).
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
    """The folder the server serves. Every path a client names is opened through it, never by name.

    Files are opened relative to a descriptor of the folder, one path component at a time, each with
    O_NOFOLLOW: a symbolic link anywhere on the way is refused, whatever it points to, and what is
    read is the file that was opened, so swapping a link in between cannot redirect a read or a
    write. Edits write a temporary file in the notebook's own (already opened) directory and rename it
    over the notebook's name there; a rename replaces a link rather than following it.

    Errors name paths relative to the folder only, never the folder's own location.
    """

    def __init__(self, directory: str | Path) -> None:
        self.root = Path(directory).resolve()
        # The folder as named too, so an absolute path through a symlinked parent (e.g. /tmp) still matches.
        self._named = Path(os.path.abspath(directory))
        try:
            self._root_fd = os.open(self.root, _DIR_FLAGS & ~os.O_NOFOLLOW)
        except OSError as exc:
            raise NotADirectoryError(f"not a folder: {directory}") from exc
        weakref.finalize(self, os.close, self._root_fd)
        # Edits are read-modify-write; two at once would lose one of them.
        self.edit_lock = threading.Lock()
        self.versions = FileVersions()

    def parts(self, path: object) -> tuple[str, ...]:
        """The components of the notebook `path` names, relative to the folder, or a ToolError."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("path must name a notebook, e.g. 'analysis.ipynb'")
        if "\x00" in path:
            raise ToolError("refused: the path contains a NUL character")
        given = PurePosixPath(path)
        if given.is_absolute():
            for base in (self.root, self._named):
                normal = PurePosixPath(posixpath.normpath(given))
                if normal.is_relative_to(base.as_posix()):
                    given = normal.relative_to(base.as_posix())
                    break
            else:
                # Not echoed: an absolute path says nothing useful the client did not send.
                raise ToolError("refused: that absolute path is outside the notebook folder")
        normal_text = posixpath.normpath(given.as_posix())
        if normal_text == ".." or normal_text.startswith("../"):
            raise ToolError(f"refused: {path!r} is outside the notebook folder")
        if normal_text == ".":
            raise ToolError("path must name a notebook, e.g. 'analysis.ipynb'")
        shown = normal_text
        if PurePosixPath(normal_text).suffix != ".ipynb":
            raise ToolError(f"refused: {shown!r} is not a .ipynb notebook")
        return tuple(normal_text.split("/"))

    @contextmanager
    def open(self, path: object) -> Iterator[_Opened]:
        """The notebook `path` names, opened without following any symlink; closed on exit."""
        parts = self.parts(path)
        shown = "/".join(parts)
        opened: list[int] = []
        try:
            dir_fd = self._root_fd
            for depth, part in enumerate(parts[:-1]):
                dir_fd = self._open_at(dir_fd, part, _DIR_FLAGS, shown, "/".join(parts[: depth + 1]))
                opened.append(dir_fd)
            fd = self._open_at(dir_fd, parts[-1], _FILE_FLAGS, shown, shown)
            opened.append(fd)
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise ToolError(f"no notebook at {shown!r}: it is a folder")
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f"no notebook at {shown!r}: it is not a regular file")
            yield _Opened(shown, dir_fd, parts[-1], fd, info)
        finally:
            for fd in reversed(opened):
                os.close(fd)

    @staticmethod
    def _open_at(dir_fd: int, name: str, flags: int, shown: str, step: str) -> int:
        try:
            return os.open(name, flags, dir_fd=dir_fd)
        except OSError as exc:
            # Classify for the message only; what was opened (nothing) is already decided.
            try:
                is_link = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
            except OSError:
                is_link = False
            if is_link:
                where = "is" if step == shown else f"goes through {step!r}, which is"
                raise ToolError(
                    f"refused: {shown!r} {where} a symbolic link (the demo server follows no symlinks)"
                ) from None
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                raise ToolError(f"no notebook at {shown!r} (use list_notebooks to see what is there)") from None
            if exc.errno == errno.EISDIR:
                raise ToolError(f"no notebook at {shown!r}: it is a folder") from None
            if exc.errno in (errno.EACCES, errno.EPERM):
                raise ToolError(f"cannot read {shown!r}: permission denied") from None
            raise ToolError(f"cannot open {shown!r}: {exc.strerror or 'error'}") from None

    def entries(self) -> list[NotebookEntry]:
        """The readable notebooks under the folder; anything unreadable (loops, links, no permission) is skipped."""
        found: list[tuple[tuple[str, ...], int]] = []
        try:
            # A descriptor of our own: listing reads the directory, and a shared one shares its offset.
            top = os.open(".", _DIR_FLAGS, dir_fd=self._root_fd)
        except OSError:
            return []
        try:
            _collect(top, (), found)
        finally:
            os.close(top)
        return [{"path": "/".join(parts), "size_bytes": size} for parts, size in sorted(found)]

    def load(self, path: str) -> tuple[str, dict[str, Any]]:
        """The notebook for an answer (shown path, parsed JSON): integers exact at any size."""
        with self.open(path) as opened:
            data = opened.read()
        try:
            notebook = pydantic_core.from_json(data)
        except ValueError as exc:
            raise ToolError(f"{opened.shown!r} is not valid notebook JSON: {exc}") from None
        return opened.shown, _checked(notebook, opened.shown)

    def version(self, path: object) -> str | None:
        """The xxh3-128 of the notebook's bytes, or None when `path` is not a notebook here.

        Content, never mtime: a file rewritten within the clock's granularity, or restored with its old
        mtime, must still get a new tag. The bytes are read again only when the file's stat moved
        (`FileVersions`: the hash it gave last time, while size, mtime, ctime and inode stay as they were
        and the file has settled).
        """
        try:
            with self.open(path) as opened:
                return self.versions.of_fd(opened.fd, opened.info)
        except (ToolError, OSError):
            # The body will run and give the client the proper error.
            return None

    def edit(self, path: str, index: int, source: str) -> EditAnswer:
        """Replace one cell's source; every other byte of meaning (numbers included) stays as it was."""
        with self.edit_lock, self.open(path) as opened:
            try:
                notebook = exact_json.loads(opened.read())
            except ValueError as exc:
                raise ToolError(f"{opened.shown!r} is not valid notebook JSON: {exc}") from None
            cells = _checked(notebook, opened.shown)["cells"]
            i = _cell_index(index, cells, opened.shown)
            if not isinstance(cells[i], dict):
                raise ToolError(f"cell {i} of {opened.shown!r} is not a cell object")
            # On disk nbformat keeps multi-line strings as lists of lines.
            cells[i] = {**cells[i], "source": source.splitlines(True)}
            try:
                _replace(opened, (exact_json.dumps(notebook) + "\n").encode("utf-8"))
            except OSError as exc:
                raise ToolError(f"cannot write {opened.shown!r}: {exc.strerror or 'error'}") from None
            return {"kind": KIND_EDIT, "path": opened.shown, "index": i, "cell_count": len(cells)}


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO named like a notebook must not hang the server.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_MAX_DEPTH = 32


@dataclass(frozen=True)
class _Opened:
    shown: str
    """The path relative to the folder, as answers and errors name it."""
    dir_fd: int
    """The directory the notebook was opened in (edits write there)."""
    name: str
    fd: int
    info: os.stat_result

    def read(self) -> bytes:
        with os.fdopen(self.fd, "rb", closefd=False) as handle:
            return handle.read()


def _checked(notebook: object, shown: str) -> dict[str, Any]:
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise ToolError(f"{shown!r} is not an nbformat-4 notebook (no cells list)")
    return notebook


def _collect(dir_fd: int, prefix: tuple[str, ...], found: list[tuple[tuple[str, ...], int]]) -> None:
    try:
        with os.scandir(dir_fd) as listing:
            entries = list(listing)
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue  # .ipynb_checkpoints and other hidden folders, and our temporary files
        try:
            if entry.is_dir(follow_symlinks=False):
                if len(prefix) < _MAX_DEPTH:
                    sub = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
                    try:
                        _collect(sub, (*prefix, entry.name), found)
                    finally:
                        os.close(sub)
            elif entry.name.endswith(".ipynb") and entry.is_file(follow_symlinks=False):
                # Opened, not just stat'ed: what is listed is what read_notebook can read.
                fd = os.open(entry.name, _FILE_FLAGS, dir_fd=dir_fd)
                try:
                    info = os.fstat(fd)
                finally:
                    os.close(fd)
                if stat.S_ISREG(info.st_mode):
                    found.append(((*prefix, entry.name), info.st_size))
        except OSError:
            continue  # gone, a loop, a link swapped in, no permission: skip it, list the rest


def _replace(opened: _Opened, data: bytes) -> None:
    """Atomically replace the opened notebook's name in its directory, so readers see old or new."""
    for _attempt in range(100):
        temp = f".{opened.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=opened.dir_fd
            )
            break
        except FileExistsError:
            continue
    else:
        raise ToolError(f"cannot write {opened.shown!r}: no free temporary name")
    try:
        with os.fdopen(fd, "wb") as handle:
            # The notebook keeps the permissions it had.
            os.fchmod(handle.fileno(), stat.S_IMODE(opened.info.st_mode))
            handle.write(data)
        # rename() never follows a link at the destination: a link swapped in is replaced, not written through.
        os.replace(temp, opened.name, src_dir_fd=opened.dir_fd, dst_dir_fd=opened.dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp, dir_fd=opened.dir_fd)
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


@dataclass(frozen=True)
class DemoMode:
    """How the demo server runs (the keyword arguments of `build_demo_server`), and the `mcpcache
    demo-server` flags that ask for the same: the benchmark names its configurations with these."""

    validator: bool = False
    memo: bool = False
    revalidation: bool = True
    ttl_ms: int = TTL_MS
    peer_sha256: bool = False

    def flags(self) -> tuple[str, ...]:
        """The command line of `mcpcache demo-server` for this mode (after `--dir DIR`)."""
        flags: list[str] = []
        if self.peer_sha256:
            flags.append("--peer-sha256")
        elif not self.revalidation:
            flags.append("--no-revalidation")
        if self.validator:
            flags.append("--validator")
        if self.memo:
            flags.append("--memo")
        if self.ttl_ms != TTL_MS:
            flags += ["--ttl-ms", str(self.ttl_ms)]
        return tuple(flags)

    def build(self, directory: str | Path) -> FastMCP:
        return build_demo_server(
            directory,
            validator=self.validator,
            memo=self.memo,
            revalidation=self.revalidation,
            ttl_ms=self.ttl_ms,
            peer_sha256=self.peer_sha256,
        )


def build_demo_server(
    directory: str | Path,
    *,
    validator: bool = False,
    memo: bool = False,
    revalidation: bool = True,
    ttl_ms: int = TTL_MS,
    peer_sha256: bool = False,
    name: str = "mcpcache-demo",
    delta_history_bytes: int = DEFAULT_HISTORY_BYTES,
) -> FastMCP:
    """A FastMCP server over the notebooks in `directory`, in one of the benchmark's configurations.

    validator: tag read_notebook/read_cell from the file's xxh3-128, checked before the body runs.
    memo: put FastMCP's ResponseCachingMiddleware behind mcpcache.
    revalidation: install mcpcache at all (False: the plain-FastMCP baseline).
    ttl_ms: the freshness the read tools announce (0: a client revalidates before every reuse).
    peer_sha256: instead of mcpcache, the SHA-256 revalidation of the Datalayer Jupyter MCP server
        (`mcpcache.demo.peers`), for the benchmark's side-by-side run.
    delta_history_bytes: the bound of mcpcache's history of answers sent, for delta replies (0: none).
    """
    if validator and not revalidation:
        raise ValueError("validator=True needs revalidation=True: the validator only feeds mcpcache's tags")
    if peer_sha256 and (revalidation or validator):
        raise ValueError("peer_sha256 replaces mcpcache: pass revalidation=False")
    folder = NotebookFolder(directory)
    response_memo = _Memo(ttl_seconds=TTL_MS // 1000) if memo else None
    # Masked: an unexpected exception's text (an OSError names absolute paths) never reaches a client.
    server = FastMCP(
        name,
        middleware=[response_memo.middleware] if response_memo is not None else None,
        mask_error_details=True,
    )
    read_only = ToolAnnotations(read_only_hint=True)

    @server.tool(annotations=read_only)
    def list_notebooks() -> NotebookList:
        """List the notebooks in the served folder (relative paths, sizes in bytes).

        Hidden folders, symbolic links and anything unreadable are left out.
        """
        return {"kind": KIND_LIST, "notebooks": folder.entries()}

    @server.tool(annotations=read_only)
    def read_notebook(path: str) -> NotebookAnswer:
        """Read a whole notebook: every cell with its source and outputs (images as base64 PNG).

        `path` is relative to the served folder; symbolic links are refused.
        """
        shown, notebook = folder.load(path)
        cells = [_cell_view(i, cell) for i, cell in enumerate(notebook["cells"]) if isinstance(cell, Mapping)]
        return {
            "kind": KIND_READ,
            "path": shown,
            "nbformat": int(notebook.get("nbformat", 4)),
            "nbformat_minor": int(notebook.get("nbformat_minor", 0)),
            "metadata": dict(notebook.get("metadata") or {}),
            "cell_count": len(cells),
            "cells": cells,
        }

    @server.tool(annotations=read_only)
    def read_cell(path: str, index: int) -> CellAnswer:
        """Read one cell (0-based index) with its source and outputs."""
        shown, notebook = folder.load(path)
        cells = notebook["cells"]
        i = _cell_index(index, cells, shown)
        return {
            "kind": KIND_CELL,
            "path": shown,
            "cell_count": len(cells),
            "cell": _cell_view(i, cells[i]),
        }

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True))
    async def edit_cell(path: str, index: int, source: str) -> EditAnswer:
        """Replace the source of one cell (0-based index); its outputs are kept until it is run again."""

        answer = await anyio.to_thread.run_sync(folder.edit, path, index, source)
        if response_memo is not None:
            await response_memo.invalidate()
        return answer

    if peer_sha256:
        from mcpcache.demo.peers import Sha256Revalidation

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
        delta_history_bytes=delta_history_bytes,
    )
    return server
