"""docs/which-part.md: the four rows the README points to, and its snippet (a conditional call from a stock
`mcp.ClientSession`, no mcpcache on the client side) run as written against the demo server over
streamable HTTP (uvicorn in a thread of this process), on a notebook whose answer is over 1 MB."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from gateway.conftest import served_in_thread

from mcpcache.demo.notebooks import generate_notebook
from mcpcache.demo.server import build_demo_server

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "which-part.md"
ROWS = ("I write the server", "I write the client", "I run a host I cannot change", "I front servers I cannot change")


def test_the_readme_and_the_guide_have_the_four_rows() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "(docs/which-part.md)" in readme
    for text in (readme, GUIDE.read_text()):
        rows = [line for line in text.splitlines() if line.startswith("| **I ")]
        assert [re.sub(r"^\| \*\*(.*?)\*\*.*", r"\1", row) for row in rows] == list(ROWS)


@pytest.mark.anyio
async def test_the_conditional_call_snippet_gets_a_not_modified_reply(tmp_path: Path) -> None:
    notebook = generate_notebook(tmp_path / "demo-120.ipynb", 120, seed=0)
    assert notebook.stat().st_size > 500_000  # answered as text and structured content: over 1 MB
    found = re.search(
        r"```python\n(# A conditional call from a stock mcp\.ClientSession.*?)```", GUIDE.read_text(), re.S
    )
    assert found is not None, "docs/which-part.md lost its snippet"
    scope: dict[str, Any] = {}
    exec(compile(found.group(1), str(GUIDE), "exec"), scope)  # defines read_twice(url, path)
    with served_in_thread(build_demo_server(tmp_path)) as url:
        kept, reply = await scope["read_twice"](url, "demo-120.ipynb")
    block = reply.meta["io.modelcontextprotocol/cache"]
    assert block["notModified"] is True
    assert block["etag"] == kept.meta["io.modelcontextprotocol/cache"]["etag"]
    assert block["ttlMs"] > 0
    assert reply.content == []
    assert reply.structured_content == {"kind": "notebook.read"}
    assert len(kept.model_dump_json()) > 1_000_000
    assert len(reply.model_dump_json()) < 1_000
