"""The `mcpcache` command: the group in `mcpcache.cli.app`, and one module per command, each registering
itself on import, in the order `mcpcache --help` lists them."""

# ruff: noqa: I001  # the order of these imports is the order of the commands in `mcpcache --help`
from mcpcache.cli import demo, bench, gateway, check, proxy, cache  # noqa: F401  # each registers its command
from mcpcache.cli.app import app

__all__ = ["app"]
