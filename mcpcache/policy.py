"""Moved to `mcpcache.client.policy` (the client half owns its decisions); kept for one version."""

from mcpcache.client.policy import *  # noqa: F403
from mcpcache.client.policy import __all__ as __all__
