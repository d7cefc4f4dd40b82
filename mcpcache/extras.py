"""Optional dependencies: which extra brings which package, and the error that says so.

The core install is what the client, the SDK server half and references need. Everything else is an extra
(`pip install 'mcpcache[NAME]'`), imported only by the part that needs it, so a missing one fails there,
once, with a line naming the extra rather than a `ModuleNotFoundError` deep in a traceback.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator

_CLI = ("typer", "rich", "nbformat", "fastmcp", "key_value")

EXTRAS: dict[str, tuple[str, ...]] = {
    "fastmcp": ("fastmcp", "key_value"),
    "redis": ("redis",),
    "tokens": ("bpe_openai",),
    "cli": _CLI,
    "bench": (*_CLI, "bpe_openai", "matplotlib"),
}
"""The top-level modules each extra installs (and the extras it includes)."""


class MissingExtra(ImportError):
    """An optional dependency is not installed. The message is one line naming the extra that brings it."""

    def __init__(self, what: str, extra: str, *, name: str | None = None) -> None:
        super().__init__(f"mcpcache: {what} needs the {extra} extra: pip install 'mcpcache[{extra}]'", name=name)
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
