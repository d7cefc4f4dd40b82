"""What the README and the docs tell users to write, run as written."""

from __future__ import annotations

import re
import runpy
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

README = Path(__file__).resolve().parent.parent / "README.md"
CLIENT_GUIDE = README.parent / "docs" / "client.md"


def test_the_documented_names_import() -> None:
    from mcpcache import CachePolicy, References, ToolCache, ToolPolicies
    from mcpcache.server.fastmcp import install
    from mcpcache.server.sdk import RevalidationExtension
    from mcpcache.stores import MemoryStore, RedisStore, SQLiteStore

    assert all((CachePolicy, References, ToolCache, ToolPolicies, install, RevalidationExtension))
    assert all((MemoryStore, RedisStore, SQLiteStore))


def test_the_client_guides_first_example_runs_as_a_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = re.search(r"```python\n(.*?)```", CLIENT_GUIDE.read_text(), re.S)
    assert first is not None
    assert "asyncio.run(main())" in first.group(1), "docs/client.md opens with a complete script"
    monkeypatch.setenv("MCPCACHE_DIR", str(tmp_path / "cache"))
    script = tmp_path / "wrap.py"
    script.write_text(first.group(1))
    runpy.run_path(str(script), run_name="__main__")  # as `python wrap.py`, without a second interpreter
    printed = [line.split(" - ")[0] for line in capsys.readouterr().out.splitlines()]
    assert printed == ["miss", "fresh_hit"]


@pytest.mark.anyio
async def test_the_readme_server_example_stamps_and_answers_not_modified(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    server = [block for block in blocks if "FastMCP(" in block]
    assert len(server) == 1, "the README has one FastMCP server example"
    namespace: dict[str, Any] = {}
    exec(compile(server[0], str(README), "exec"), namespace)  # the example as a user would paste it
    text = tmp_path / "a.txt"
    text.write_text("1 + 1")
    async with Client(namespace["mcp"]) as client:
        first = await client.call_tool_mcp("read_file", {"path": str(text)})
        block_meta = (first.meta or {})["io.modelcontextprotocol/cache"]
        again = await client.call_tool_mcp(
            "read_file",
            {"path": str(text)},
            meta={"io.modelcontextprotocol/cache": {"etag": block_meta["etag"]}},
        )
    assert first.structured_content == {"kind": "file.read", "text": "1 + 1"}
    assert block_meta["ttlMs"] == 5000
    assert again.meta is not None
    assert again.meta["io.modelcontextprotocol/cache"]["notModified"] is True
    assert again.structured_content == {"kind": "file.read"}


@pytest.mark.anyio
async def test_the_embedded_default_is_a_sqlite_file_in_the_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpcache import References, ToolCache
    from mcpcache.stores import SQLiteStore

    monkeypatch.setenv("MCPCACHE_DIR", str(tmp_path / "cache"))
    cache, refs = ToolCache(), References(conversation_id="c")
    assert isinstance(cache.store, SQLiteStore)
    assert isinstance(refs.store, SQLiteStore)
    stored = await refs.put({"rows": list(range(10))}, server="s", tool="t", arguments={})
    await refs.store.close()
    reopened = References(conversation_id="c")  # a new object on the same file, as after a restart
    assert await reopened.load(str(stored.uri)) == {"rows": list(range(10))}
    assert cache.store.path == tmp_path / "cache" / "tools.db"
    assert reopened.store.path == tmp_path / "cache" / "refs.db"
    await reopened.store.close()
    await cache.store.close()
