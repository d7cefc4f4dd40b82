"""The official MCP conformance suite, run directly against an everything server and through the gateway
and the proxy, compared scenario by scenario."""
