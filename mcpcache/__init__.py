"""mcpcache: make MCP tool results cheap to ask for twice."""

from mcpcache.etag import content_tag, weak_equal
from mcpcache.protocol import EXTENSION_ID, META_KEY, CacheBlock, parse_cache_block
from mcpcache.server.policies import CachePolicy, ToolPolicies

__all__ = [
    "EXTENSION_ID",
    "META_KEY",
    "CacheBlock",
    "CachePolicy",
    "ToolPolicies",
    "content_tag",
    "parse_cache_block",
    "weak_equal",
]
__version__ = "0.1.0"
