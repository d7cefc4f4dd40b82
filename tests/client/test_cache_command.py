"""`mcpcache cache ls | stats | clear`: what a newcomer sees of their cache, on real SQLite files and a real
redis-server, filled by a real `ToolCache` talking to a FastMCP server.

Most runs go through typer's CliRunner (the command in this process); one runs `python -m mcpcache` as a
user would, to see the command as it is installed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client, FastMCP
from stores.legacy import write_v2_file
from typer.testing import CliRunner

from mcpcache.cli import app
from mcpcache.client import ToolCache
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.stores import RedisStore, SQLiteStore, Store

SERVER = "http://127.0.0.1:8765/mcp"
CALLS = [
    ("read_notebook", {"path": "big.ipynb"}),
    ("read_notebook", {"path": "notes/" + "deep/" * 40 + "long.ipynb"}),
    ("list_files", {}),
]


def notebook_server() -> FastMCP:
    server = FastMCP("notebooks")

    # No output schemas: the client then has nothing to check, and never compiles jsonschema's grammar (seconds).
    @server.tool(output_schema=None)
    def read_notebook(path: str) -> str:
        return f"# {path}\n" + "print('hello')\n" * 500

    @server.tool(output_schema=None)
    def list_files() -> list[str]:
        return ["big.ipynb", "notes/long.ipynb"]

    @server.tool(output_schema=None)
    def run_cell(path: str) -> str:  # no cache block: never stored
        return "ran"

    install(
        server, ToolPolicies({"read_notebook": CachePolicy(ttl_ms=60_000), "list_files": CachePolicy(ttl_ms=5_000)})
    )
    return server


def fill(store: Store | None = None, server_id: str = SERVER) -> None:
    """What a quickstart would leave behind: three answers kept (and one call that is not)."""

    async def main() -> None:
        async with ToolCache(store) as cache, Client(notebook_server()) as client:
            view = cache.wrap(client, server_id=server_id)
            # First: a call without a cache block ends the freshness of what the server's answers before it.
            await view.call_tool("run_cell", {"path": "big.ipynb"})
            for tool, arguments in CALLS:
                await view.call_tool(tool, arguments)

    anyio.run(main)


def cache_command(*args: str, input: str | None = None) -> tuple[int, str]:
    # Without COLUMNS (pytest's workers may set it): output that is not a terminal is laid out for 140 columns.
    result = CliRunner().invoke(app, ["cache", *args], input=input, env={"COLUMNS": None})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder `ToolCache()` keeps its default file in, for this test only."""
    monkeypatch.setenv("MCPCACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_ls_shows_a_newcomer_what_was_cached(cache_dir: Path) -> None:
    fill()
    code, out = cache_command("ls")
    assert code == 0, out
    assert "3 cached answers" in out
    assert str(cache_dir / "tools.db") in out
    for heading in ("Server", "Tool", "Arguments", "Size", "Age", "Freshness", "Tag"):
        assert heading in out
    assert SERVER in out
    assert out.count("read_notebook") == 2
    assert '{"path":"big.ipynb"}' in out
    assert "…" in out  # the long arguments are cut short
    assert "fresh, " in out
    assert 'W/"' in out
    assert "run_cell" not in out
    assert "served again without asking the server" in out  # the legend: readable without the docs


def test_ls_shows_the_stale_windows_an_entry_has(cache_dir: Path) -> None:
    """Issue 23: the stale windows an answer was stamped with, beside its freshness; none, nothing said."""
    server = FastMCP("windows")

    @server.tool(output_schema=None)
    def read_notebook(path: str) -> str:
        return path

    @server.tool(output_schema=None)
    def list_files() -> list[str]:
        return ["a"]

    policies = {
        "read_notebook": CachePolicy(ttl_ms=60_000, stale_while_revalidate_ms=30_000, stale_if_error_ms=600_000),
        "list_files": CachePolicy(ttl_ms=5_000),
    }
    install(server, ToolPolicies(policies))

    async def main() -> None:
        async with ToolCache() as cache, Client(server) as client:
            view = cache.wrap(client, server_id=SERVER)
            await view.call_tool("read_notebook", {"path": "a.ipynb"})
            await view.call_tool("list_files", {})

    anyio.run(main)
    code, out = cache_command("ls")
    assert code == 0, out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("read_notebook", "list_files"))}
    assert "stale windows: 30.0 s while revalidating, 10.0 min on error" in rows["read_notebook"], out
    assert "stale windows" not in rows["list_files"]
    assert "how long after freshness ends the answer may still be served" in out  # the legend


def test_ls_filters_and_limits(cache_dir: Path) -> None:
    fill()
    code, out = cache_command("ls", "--tool", "list_files")
    rows = [line for line in out.splitlines() if line.startswith("list_files")]
    assert (code, len(rows), "read_notebook" in out) == (0, 1, False)
    assert f"Server: {SERVER}" in out  # one server: named once, above the table
    code, out = cache_command("ls", "--server", "http://elsewhere/mcp")
    assert code == 0
    assert "No cached answers (server http://elsewhere/mcp)" in out
    code, out = cache_command("ls", "--limit", "1")
    assert code == 0
    assert "the first 1 are shown" in out
    fill(server_id="team-notebooks")  # a second server: the table names each row's
    code, out = cache_command("ls", "--tool", "list_files")
    rows = sorted(line.split()[0] for line in out.splitlines() if "list_files" in line and "(tool" not in line)
    assert (code, rows) == (0, [SERVER, "team-notebooks"])
    code, out = cache_command("ls", "--server", "team-notebooks")
    assert "3 cached answers (" in out


def test_ls_json_is_every_field_for_a_program(cache_dir: Path) -> None:
    code, out = cache_command("ls", "--json")  # nothing cached yet: still a document, never prose
    assert code == 0, out
    assert json.loads(out) == {"store": str(cache_dir / "tools.db"), "answers": 0, "bytes": 0, "entries": []}
    fill()
    code, out = cache_command("ls", "--json", "--tool", "read_notebook", "--limit", "1")
    assert code == 0, out
    listed = json.loads(out)  # the whole output is one JSON document: no table, no legend
    assert (listed["store"], listed["answers"], len(listed["entries"])) == (str(cache_dir / "tools.db"), 2, 1)
    [entry] = listed["entries"]
    assert (entry["server"], entry["tool"], entry["fresh"]) == (SERVER, "read_notebook", True)
    assert entry["etag"].startswith('W/"')  # whole, where the table shortens it
    assert entry["arguments"].startswith('{"path":')
    assert entry["ttl_ms"] == 60_000
    assert entry["size"] > 0
    assert entry["age_s"] >= 0
    assert entry["freshness"].startswith("fresh, ")


def test_stats_totals_by_tool(cache_dir: Path) -> None:
    fill()
    code, out = cache_command("stats")
    assert code == 0, out
    assert "3 cached answers: 3 fresh, 0 stale" in out
    rows = [line.split() for line in out.splitlines() if SERVER in line]
    assert sorted((row[1], row[2]) for row in rows) == [("list_files", "1"), ("read_notebook", "2")]


def test_clear_asks_first_and_removes_what_was_chosen(cache_dir: Path) -> None:
    fill()
    code, out = cache_command("clear", "--tool", "read_notebook", input="n\n")
    assert code == 0
    assert "This removes 2 cached answers" in out
    assert "Nothing removed." in out
    code, out = cache_command("clear", "--tool", "read_notebook", input="y\n")
    assert (code, "Removed 2 cached answers." in out) == (0, True)
    code, out = cache_command("ls")
    assert "1 cached answer " in out
    assert "list_files" in out
    code, out = cache_command("clear", input="")
    assert code == 1
    assert "nothing removed" in out
    code, out = cache_command("clear", "--yes")
    assert (code, "Removed 1 cached answer." in out) == (0, True)
    code, out = cache_command("stats")
    assert "No cached answers." in out


@pytest.mark.parametrize("engine", ["redis_url", pytest.param("redis_cluster_url", marks=pytest.mark.slow)])
def test_a_cache_in_redis(engine: str, request: pytest.FixtureRequest) -> None:
    redis_url = request.getfixturevalue(engine)  # one Redis, or a cluster: redis+cluster://h:p,h:p,...
    namespace = f"cli-{uuid.uuid4().hex[:8]}"
    fill(RedisStore(redis_url, namespace=namespace))
    where = ["--redis", redis_url, "--namespace", namespace]
    code, out = cache_command("ls", *where)
    assert code == 0, out
    assert "3 cached answers" in out
    assert out.count("read_notebook") == 2
    code, out = cache_command("stats", *where, "--tool", "read_notebook")
    assert "2 cached answers: 2 fresh, 0 stale" in out
    code, out = cache_command("clear", *where, "--yes")
    assert (code, "Removed 3 cached answers." in out) == (0, True)
    code, out = cache_command("ls", "--redis", redis_url, "--namespace", "someone-else")
    assert "No cached answers" in out


def test_a_file_from_the_previous_release_is_listed_after_its_migration(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    write_v2_file(path)
    code, out = cache_command("ls", "--store", str(path))
    assert code == 0, out
    assert "1 cached answer " in out
    assert "read_notebook" in out
    assert "(not recorded)" in out  # the previous release kept neither the server nor the arguments


def test_nothing_cached_yet(cache_dir: Path) -> None:
    code, out = cache_command("ls")
    assert code == 0
    assert "Nothing cached yet" in out
    assert not (cache_dir / "tools.db").exists(), "looking creates nothing"


def test_mistakes_are_one_line_and_change_nothing(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a cache\n")
    closed_port = "redis://127.0.0.1:1/0"
    for args, code in [
        (["ls", "--store", str(tmp_path / "missing.db")], 2),
        (["ls", "--store", str(notes)], 2),
        (["clear", "--yes", "--store", str(tmp_path)], 2),
        (["ls", "--store", str(notes), "--redis", closed_port], 2),
        (["stats", "--redis", closed_port], 1),
        (["ls", "--redis", "http://127.0.0.1:6379"], 2),
        (["clear", "--yes", "--redis", "redis+cluster://127.0.0.1:not-a-port"], 2),
    ]:
        result = CliRunner().invoke(app, ["cache", *args])
        assert result.exit_code == code, (args, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1, (args, result.output)
        assert lines[0].startswith("mcpcache cache: "), (args, result.output)
    assert notes.read_text() == "not a cache\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"], "no file was moved aside or created"


@pytest.fixture
def filled_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "tools.db"
    fill(SQLiteStore(path))
    yield path
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_the_installed_command(filled_file: Path) -> None:
    tree = [str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(part for part in tree if part)}
    env.pop("COLUMNS", None)  # pytest's workers may set it: output that is not a terminal gets 140 columns
    run = subprocess.run(
        [sys.executable, "-m", "mcpcache", "cache", "ls", "--store", str(filled_file)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "3 cached answers" in run.stdout
    table = [line for line in run.stdout.splitlines() if "read_notebook" in line]
    assert len(table) == 2
    assert all(len(line) <= 140 for line in run.stdout.splitlines())
    assert all("fresh, " in line and 'W/"' in line for line in table), table  # nothing squeezed off the edge


def _truncated(path: Path) -> None:
    with path.open("r+b") as file:
        file.truncate(2 * 4096)


def _pages_overwritten(path: Path) -> None:
    with path.open("r+b") as file:
        file.seek(4096)
        file.write(b"\xab" * 4096 * 4)


def _header_damaged(path: Path) -> None:
    with path.open("r+b") as file:
        file.seek(100)
        file.write(b"\x00" * 3000)


@pytest.mark.parametrize("damage", [_truncated, _pages_overwritten, _header_damaged])
@pytest.mark.parametrize("command", [["ls"], ["stats"], ["clear", "--yes"]])
def test_a_damaged_cache_file_is_named_in_one_line_with_what_to_do_and_nothing_is_created(
    tmp_path: Path, damage: Any, command: list[str]
) -> None:
    """`cache ls` on a damaged file created -wal and -shm files beside it (or moved it aside and listed a new,
    empty store) and said nothing of what to do."""
    path = tmp_path / "tools.db"
    store = SQLiteStore(path)
    fill(store)
    anyio.run(store.close)  # the log written into the file: what a user's file looks like between runs
    damage(path)
    before = path.read_bytes()
    result = CliRunner().invoke(app, ["cache", *command, "--store", str(path)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"mcpcache cache: {path} is a damaged cache file ("), lines[0]
    assert lines[0].endswith(
        "it holds only cached answers: delete it or move it aside (ToolCache() moves a damaged file aside by "
        "itself and starts a new one)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tools.db"], "nothing created beside it or moved aside"
    assert path.read_bytes() == before


def test_ls_shows_the_protocol_version_that_tells_one_calls_two_entries_apart(cache_dir: Path) -> None:
    """A `fastmcp.Client` (2026-07-28) and an `mcp.ClientSession` (2025-11-25) on one server under one
    `server_id` keep one entry each, as the protocol version is part of the key: their answers differ (the
    2026-07-28 one carries the server's name and version in `_meta`). `ls` showed two identical rows."""
    import mcp
    from gateway.conftest import served_in_thread
    from mcp.client.streamable_http import streamable_http_client

    async def main(url: str) -> tuple[Any, Any]:
        async with ToolCache() as cache:
            async with Client(url) as client:
                modern = await cache.wrap(client, server_id="notes").call("list_files", {})
            async with streamable_http_client(url) as (read, write), mcp.ClientSession(read, write) as session:
                await session.initialize()
                legacy = await cache.wrap(session, server_id="notes").call("list_files", {})
        return modern, legacy

    with served_in_thread(notebook_server()) as url:
        modern, legacy = anyio.run(main, url)
    assert (modern.outcome.status, legacy.outcome.status) == ("miss", "miss")
    assert "io.modelcontextprotocol/serverInfo" in (modern.result.meta or {})
    assert "io.modelcontextprotocol/serverInfo" not in (legacy.result.meta or {})
    code, out = cache_command("ls")
    assert code == 0, out
    assert "Server: notes\n" in out
    heading = next(line for line in out.splitlines() if line.startswith("Tool"))
    assert heading.split()[:3] == ["Tool", "Protocol", "Arguments"]
    rows = sorted(line.split()[:2] for line in out.splitlines() if line.startswith("list_files"))
    assert rows == [["list_files", "2025-11-25"], ["list_files", "2026-07-28"]]
    assert "One call is kept once per version" in " ".join(out.split())
