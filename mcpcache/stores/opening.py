"""Opening a store: where mcpcache keeps its files when the user does not say, and the one way every
command (`mcpcache proxy`, `mcpcache gateway`, `mcpcache cache`) opens the store a setting names.

The stores themselves are imported only when opened: a SQLite file needs no Redis client, and Redis is
an extra.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import platformdirs

if TYPE_CHECKING:
    from mcpcache.stores.base import Store

logger = logging.getLogger("mcpcache.stores")

__all__ = [
    "DEFAULT_NAMESPACE",
    "TOOLS_FILE",
    "CacheFolderError",
    "cache_dir",
    "default_path",
    "default_store",
    "open_store",
]

TOOLS_FILE = "tools.db"
"""The file `ToolCache()` keeps answers in, in `cache_dir()`."""

DEFAULT_NAMESPACE = "mcpcache"
"""The namespace a store keeps its keys under when none is named."""


class CacheFolderError(OSError):
    """The cache folder cannot be used (a file at its path, no permission, a read-only disk); the message is
    one line that names the folder, where it came from and why."""


def _folder() -> tuple[Path, bool]:
    explicit = os.environ.get("MCPCACHE_DIR")
    return (
        (Path(explicit), True) if explicit else (Path(platformdirs.user_cache_dir("mcpcache", appauthor=False)), False)
    )


def cache_dir() -> Path:
    """`$MCPCACHE_DIR`, else the platform's user cache folder for mcpcache (created on demand).

    That folder is platformdirs' `user_cache_dir`: `$XDG_CACHE_HOME/mcpcache`, else `~/.cache/mcpcache`, on
    Linux; `~/Library/Caches/mcpcache` on macOS; `%LOCALAPPDATA%\\mcpcache\\Cache` on Windows.

    Cached tool answers can be private: the folder is created readable by its owner only (0700), and the
    `mcpcache` folder of the default location is made so if an older version created it more open. A folder
    named by `$MCPCACHE_DIR` that already exists is the user's, and is left as it is. Raises
    `CacheFolderError` when the folder cannot be made or used."""
    base, explicit = _folder()
    try:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)  # parents get the umask's mode; only ours is private
    except OSError as exc:
        named = f"MCPCACHE_DIR={base}" if explicit else f"the cache folder {base}"
        why = "a file is in its place" if isinstance(exc, FileExistsError | NotADirectoryError) else exc.strerror
        raise CacheFolderError(f"{named} cannot be used as a folder: {why or exc}") from exc
    if not os.access(base, os.W_OK | os.X_OK):
        named = f"MCPCACHE_DIR={base}" if explicit else f"the cache folder {base}"
        raise CacheFolderError(f"{named} cannot be written to")
    if not explicit:
        with contextlib.suppress(OSError):  # a folder of another owner: its mode is not ours to change
            os.chmod(base, 0o700)
    return base


def default_path(filename: str) -> Path:
    return cache_dir() / filename


def default_store(filename: str) -> Store:
    """The embedded default: a SQLite file of that name in `cache_dir()`, so what is kept survives a restart.

    A cache folder that cannot be used costs the cache, never the caller: a store that fails every operation
    with the reason (`UnusableStore`), which the store fence of its user turns into misses, counted, and one
    line naming the folder and why."""
    from mcpcache.stores.sqlite import SQLiteStore

    try:
        return SQLiteStore(default_path(filename))
    except CacheFolderError as exc:
        from mcpcache.stores.unusable import UnusableStore

        return UnusableStore(CacheFolderError(f"{exc} (set MCPCACHE_DIR to a folder you can write)"))


def open_store(
    *,
    sqlite: str | os.PathLike[str] | None = None,
    redis: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    otherwise: Literal["default file", "memory"] = "default file",
) -> Store:
    """The store a setting names: a Redis URL, a SQLite file, or, when it names neither, the default file
    (`ToolCache()`'s, in `cache_dir()`) or a store in this process's memory. A setting that names both is the
    caller's to refuse, in its own words."""
    if redis is not None:
        from mcpcache.stores.redis import RedisStore

        return RedisStore(redis, namespace=namespace)
    if sqlite is not None:
        from mcpcache.stores.sqlite import SQLiteStore

        return SQLiteStore(sqlite, namespace=namespace)
    if otherwise == "memory":
        from mcpcache.stores.memory import MemoryStore

        return MemoryStore()
    return default_store(TOOLS_FILE)
