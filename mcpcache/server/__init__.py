"""The server half: declare which tools are cacheable, and stamp their answers.

The adapters (`mcpcache.server.fastmcp`, `mcpcache.server.sdk`) are imported from their own modules so
that using one SDK never imports the other.
"""

from mcpcache.server.core import Revalidator
from mcpcache.server.policies import CachePolicy, ToolPolicies

__all__ = ["CachePolicy", "Revalidator", "ToolPolicies"]
