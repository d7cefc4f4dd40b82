"""The `mcpcache` command's entry point: the console script, and `python -m mcpcache`.

The command itself (`mcpcache.cli`) needs the cli extra; it is imported here, lazily, so that without that
extra the command still answers, in one line, with what to install.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from mcpcache.extras import MissingExtra, missing_module


def main(argv: Sequence[str] | None = None) -> None:
    try:
        import rich  # noqa: F401  # typer draws help and errors with it, importing it as it goes

        from mcpcache.cli import app
    except ImportError as exc:
        if not missing_module(exc, "cli"):
            raise
        print(MissingExtra("the mcpcache command", "cli"), file=sys.stderr)
        raise SystemExit(2) from None
    app(args=None if argv is None else list(argv), prog_name="mcpcache")


if __name__ == "__main__":
    main()
