"""Where mcpcache keeps its files when the user does not say."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

if TYPE_CHECKING:
    from mcpcache.stores.base import Store


def cache_dir() -> Path:
    """`$MCPCACHE_DIR`, else the platform's user cache folder for mcpcache (created on demand).

    That folder is platformdirs' `user_cache_dir`: `$XDG_CACHE_HOME/mcpcache`, else `~/.cache/mcpcache`, on
    Linux; `~/Library/Caches/mcpcache` on macOS; `%LOCALAPPDATA%\\mcpcache\\Cache` on Windows.

    Cached tool answers can be private: the folder is created readable by its owner only (0700), and the
    `mcpcache` folder of the default location is made so if an older version created it more open. A folder
    named by `$MCPCACHE_DIR` that already exists is the user's, and is left as it is."""
    explicit = os.environ.get("MCPCACHE_DIR")
    base = Path(explicit) if explicit else Path(platformdirs.user_cache_dir("mcpcache", appauthor=False))
    base.mkdir(mode=0o700, parents=True, exist_ok=True)  # parents get the umask's mode; only ours is private
    if not explicit:
        with contextlib.suppress(OSError):  # a folder of another owner: its mode is not ours to change
            os.chmod(base, 0o700)
    return base


def default_path(filename: str) -> Path:
    return cache_dir() / filename


def default_store(filename: str) -> Store:
    """The embedded default: a SQLite file of that name in `cache_dir()`, so what is kept survives a restart."""
    from mcpcache.stores.sqlite import SQLiteStore

    return SQLiteStore(default_path(filename))
