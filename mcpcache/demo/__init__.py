"""A demo MCP server over a folder of Jupyter notebooks, and the notebook generator it and the benchmarks share."""
