"""Run mcpcache as a lean install would: with the optional packages refused at import.

    python lean.py NAMES sdk             the SDK client and server half, references (asserts, prints a report)
    python lean.py NAMES cli ARGS...     the `mcpcache` command

NAMES is a comma-separated list of top-level modules that cannot be imported (a `sys.meta_path` finder
refuses them, as if they were not installed); everything else imports from the real environment.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import sys
from collections.abc import Sequence
from typing import Any

OPTIONAL = ("fastmcp", "key_value", "redis", "hiredis", "bpe_openai", "typer", "rich", "nbformat", "matplotlib")
"""What the core install does not bring (the extras' packages)."""


class Refuse(importlib.abc.MetaPathFinder):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


async def sdk() -> None:
    import mcp
    from mcp.server.mcpserver import MCPServer

    from mcpcache import CachePolicy, References, ToolCache
    from mcpcache.extras import MissingExtra
    from mcpcache.refs import call_for_model
    from mcpcache.server.sdk import RevalidationExtension
    from mcpcache.stores import MemoryStore
    from mcpcache.tokens import count_tokens, count_tokens_async

    runs = {"read": 0}
    server = MCPServer("lean", extensions=[RevalidationExtension({"read": CachePolicy(ttl_ms=0)})])

    # JSON in a text block, without an output schema: the client would import jsonschema (seconds) to check one.
    @server.tool(structured_output=False)
    def read(key: str) -> str:
        runs["read"] += 1
        return json.dumps({"key": key, "rows": [{"i": i, "text": f"row {i} of {key}"} for i in range(2_000)]})

    cache = ToolCache(MemoryStore())
    references = References(MemoryStore(), threshold_bytes=1_000)
    async with mcp.Client(server) as client:
        cached = cache.wrap(client, server_id="lean")
        first = await cached.call_raw("read", {"key": "a"})
        again = await cached.call_raw("read", {"key": "a"})
        assert (first.outcome.status, first.outcome.stored) == ("miss", True), first.outcome
        assert again.outcome.status == "revalidated", again.outcome
        assert again.result.content == first.result.content
        model = await call_for_model(cached, "read", {"key": "b"}, references=references)
    assert model.view is not None, model.envelope
    assert model.view.uri is not None, model.envelope
    assert model.view.tokens.method == "estimate", model.view.tokens
    assert (await references.load(model.view.uri))["key"] == "b"
    assert count_tokens("more text").method == "estimate"
    assert (await count_tokens_async("x" * 100_000)).method == "estimate"
    print(f"sdk: miss, revalidated, by reference; the tool ran {runs['read']} times")

    try:
        from mcpcache.stores import RedisStore  # noqa: F401
    except MissingExtra as exc:
        print(f"redis: {exc}")
    loaded = sorted(name for name in OPTIONAL if name in sys.modules)
    print(f"optional modules imported: {loaded}")


def main(argv: list[str]) -> None:
    names, mode, *rest = argv
    sys.meta_path.insert(0, Refuse({name for name in names.split(",") if name}))
    if mode == "sdk":
        import anyio

        anyio.run(sdk)
    elif mode == "cli":
        from mcpcache.__main__ import main as command

        command(rest)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
