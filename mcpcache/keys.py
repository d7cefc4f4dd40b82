"""Moved to `mcpcache.client.keys` (only the client half keys its answers); kept for one version."""

from mcpcache.client.keys import *  # noqa: F403
from mcpcache.client.keys import __all__ as __all__
