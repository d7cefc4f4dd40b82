"""`mcpcache gateway`: the server half of mcpcache in front of MCP servers that never heard of it.

A FastMCP proxy of one or more upstream servers that stamps weak tags on the answers of the tools its
configuration declares, answers not-modified to callers that send the current tag, and, with a shared
store, serves answers within their freshness without calling upstream, partitioned by the caller's
verified credential, and sends a caller that holds an older answer only the change (a delta reply), from
a history of the answers sent kept in that store. See docs/gateway.md.

`config` and `decisions` are pure; `middleware`, `deltas`, `history` and `app` do the I/O.
"""

from mcpcache.gateway.config import ConfigError, GatewayConfig, load_config, parse_config, quick_config

__all__ = ["ConfigError", "GatewayConfig", "load_config", "parse_config", "quick_config"]
