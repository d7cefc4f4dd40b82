"""Optional dependencies: which extra brings which package, and the error that says so.

The core install is what the client, the SDK server half and references need. Everything else is an extra
(`pip install -e '.[NAME]'` in a clone), imported only by the part that needs it, so a missing one fails
there, once, with a line naming the extra rather than a `ModuleNotFoundError` deep in a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Iterator
from pathlib import Path

_CLI = ("typer", "rich", "nbformat", "fastmcp", "key_value")

EXTRAS: dict[str, tuple[str, ...]] = {
    "fastmcp": ("fastmcp", "key_value"),
    "redis": ("redis",),
    "tokens": ("bpe_openai",),
    "cli": _CLI,
    "bench": (*_CLI, "bpe_openai", "matplotlib"),
}
"""The top-level modules each extra installs (and the extras it includes)."""


@functools.cache
def _clone() -> Path | None:
    """The clone this mcpcache runs from (an editable install, or the source tree itself), if it is one."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "mcpcache" / "extras.py").is_file() else None


def install_command(extra: str) -> str:
    """The command that installs `extra` for this mcpcache. It is not published on a package index yet, so
    it comes from a clone: the one it runs from when it knows it (an editable install), else "a clone"."""
    clone = _clone()
    if clone is not None:
        return f"pip install -e '{clone}[{extra}]'"
    return f"pip install '.[{extra}]' in a clone of mcpcache"


class MissingExtra(ImportError):
    """An optional dependency is not installed. The message is one line naming the extra that brings it."""

    def __init__(self, what: str, extra: str, *, name: str | None = None) -> None:
        super().__init__(f"mcpcache: {what} needs the {extra} extra: {install_command(extra)}", name=name)
        self.what = what
        self.extra = extra


def missing_module(exc: ImportError, extra: str) -> bool:
    """Whether `exc` is the import of one of `extra`'s own packages failing, rather than some other import
    (one inside an installed package, say), which must surface as it is."""
    top = (exc.name or "").partition(".")[0]
    return isinstance(exc, ModuleNotFoundError) and top in EXTRAS[extra]


@contextlib.contextmanager
def needs(extra: str, what: str) -> Iterator[None]:
    """Turn the failed import of one of `extra`'s packages inside the block into a `MissingExtra`."""
    try:
        yield
    except ImportError as exc:
        if isinstance(exc, MissingExtra) or not missing_module(exc, extra):
            raise
        raise MissingExtra(what, extra, name=exc.name) from exc


def require(extra: str, what: str) -> None:
    """Raise `MissingExtra` unless every package of `extra` is installed (found, not imported): for a
    command that should say so before it starts rather than fail halfway."""
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise MissingExtra(what, extra, name=module)
