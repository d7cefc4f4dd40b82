"""Servers the tests talk to: the same tools on FastMCP and on the MCP SDK's MCPServer."""
