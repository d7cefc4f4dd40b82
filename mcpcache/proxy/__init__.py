"""`mcpcache proxy`: revalidation and results by reference for a host and a server that never heard of
mcpcache. The host starts the proxy as a stdio MCP server; the proxy starts (or reaches) the upstream
server and answers every `tools/call` through a `ToolCache` (docs/proxy.md).

`settings` is the pure part (what a command line means, the translation rules); `link`, `calls` and
`server` do the I/O.
"""

from mcpcache.proxy.settings import (
    HttpUpstream,
    ProxySettings,
    RefsSettings,
    SettingsError,
    StdioUpstream,
    StoreChoice,
)

__all__ = ["HttpUpstream", "ProxySettings", "RefsSettings", "SettingsError", "StdioUpstream", "StoreChoice"]
