"""Figures taken on a notebook's real answer, in the runner's own process.

The tag's share of server CPU: the scenario's server CPU includes the tool body (reading and parsing the
notebook), the same in every configuration, so the tag is also timed alone, mcpcache's against the
SHA-256 form. And what a model reads: the answer's text in o200k tokens (counted here, not in the
workers, so loading the tokenizer does not show up in a configuration's client memory).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from fastmcp import Client

from mcpcache.demo.peers import datalayer_tag
from mcpcache.etag import content_tag, wire_content
from mcpcache.tokens import count_tokens


async def _answer(directory: str, name: str) -> tuple[list[Any], Any]:
    from mcpcache.demo.server import build_demo_server

    async with Client(build_demo_server(directory, revalidation=False)) as client:
        result = await client.call_tool_mcp("read_notebook", {"path": name})
    return list(result.content), result.structured_content


def _best_ms(fn: Any, runs: int) -> float:
    fn()
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best * 1000


def measure(label: str, notebook: Path, runs: int = 7) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / notebook.name).write_bytes(notebook.read_bytes())
        content, structured = anyio.run(_answer, tmp, notebook.name)
    mcpcache_ms = _best_ms(lambda: content_tag(content, structured), runs)
    document = {"content": wire_content(content), "structuredContent": structured}
    sha256_ms = _best_ms(lambda: datalayer_tag(document), runs)
    text = "".join(block.text for block in content if getattr(block, "type", None) == "text")
    return {
        "size": label,
        "mcpcache_ms": mcpcache_ms,
        "sha256_form_ms": sha256_ms,
        "ratio": sha256_ms / mcpcache_ms,
        "model_tokens": count_tokens(text).to_json(),
    }
