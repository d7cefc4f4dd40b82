"""Where mcpcache keeps its files when the user does not say."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcpcache.stores.base import Store


def cache_dir() -> Path:
    """`$MCPCACHE_DIR`, else `$XDG_CACHE_HOME/mcpcache`, else `~/.cache/mcpcache` (created on demand)."""
    explicit = os.environ.get("MCPCACHE_DIR")
    if explicit:
        base = Path(explicit)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "mcpcache"
    base.mkdir(parents=True, exist_ok=True)
    return base


def default_path(filename: str) -> Path:
    return cache_dir() / filename


def default_store(filename: str) -> Store:
    """The embedded default: a SQLite file of that name in `cache_dir()`, so what is kept survives a restart."""
    from mcpcache.stores.sqlite import SQLiteStore

    return SQLiteStore(default_path(filename))
