"""The demo server and its notebook generator, through real FastMCP and MCP SDK clients."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import fastmcp
import httpx2
import mcp
import nbformat
import pytest
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from typer.testing import CliRunner

from mcpcache.cli import app
from mcpcache.demo.notebooks import (
    build_notebook,
    generate_notebook,
    generate_notebook_of_size,
    notebook_text,
    png_bytes,
)
from mcpcache.demo.server import build_demo_server
from mcpcache.protocol import META_KEY
from mcpcache.wire_count import CountingTransport

CONFIGS = {
    "hash": {"validator": False, "memo": False},
    "validator": {"validator": True, "memo": False},
    "memo": {"validator": False, "memo": True},
    "validator+memo": {"validator": True, "memo": True},
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    served = tmp_path / "served"
    served.mkdir()
    generate_notebook(served / "a.ipynb", 12, seed=1)
    (served / "sub").mkdir()
    generate_notebook(served / "sub" / "b.ipynb", 6, seed=2)
    (served / "notes.txt").write_text("not a notebook")
    (tmp_path / "secret.ipynb").write_text(notebook_text(build_notebook(2, seed=3)))
    return served


def block(result: Any) -> dict[str, Any]:
    meta = result.meta or {}
    found = meta.get(META_KEY)
    assert isinstance(found, dict), f"no cache block in {meta!r}"
    return found


def conditional(tag: str) -> dict[str, Any]:
    return {META_KEY: {"etag": tag}}


class BodyCounter(Middleware):
    """Innermost middleware: counts the calls that reach the tool body."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: CallNext[Any, ToolResult]) -> ToolResult:
        self.calls.append(context.message.name)
        return await call_next(context)


# --- the generator ----------------------------------------------------------------------------------


def test_generated_notebooks_are_valid_and_reproducible(tmp_path: Path) -> None:
    first = generate_notebook(tmp_path / "one.ipynb", 30, seed=7)
    second = generate_notebook(tmp_path / "two.ipynb", 30, seed=7)
    other = generate_notebook(tmp_path / "three.ipynb", 30, seed=8)
    assert first.read_bytes() == second.read_bytes()
    assert first.read_bytes() != other.read_bytes()
    notebook = nbformat.read(first, as_version=4)
    nbformat.validate(notebook)
    assert len(notebook.cells) == 30
    kinds = {cell.cell_type for cell in notebook.cells}
    output_types = {out.output_type for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs}
    assert kinds == {"code", "markdown"}
    assert {"stream", "display_data", "execute_result"} <= output_types
    # Written as nbformat writes it, so its size on disk is a real notebook's.
    assert nbformat.writes(notebook) + "\n" == first.read_text(encoding="utf-8")


@pytest.mark.parametrize("target", [10_000, 100_000, 1_000_000])
def test_generated_notebook_is_roughly_the_requested_size(tmp_path: Path, target: int) -> None:
    path = generate_notebook_of_size(tmp_path / "sized.ipynb", target)
    assert 0.9 * target <= path.stat().st_size <= 1.1 * target
    nbformat.validate(nbformat.read(path, as_version=4))


def test_png_is_a_real_png_with_noisy_pixels() -> None:
    import random

    data = png_bytes(64, 48, random.Random(0))
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    chunks = []
    offset = 8
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        tag = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert crc == zlib.crc32(tag + body) & 0xFFFFFFFF
        chunks.append((tag, body))
        offset += 12 + length
    assert [tag for tag, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    width, height = struct.unpack(">II", chunks[0][1][:8])
    raw = zlib.decompress(chunks[1][1])
    assert (width, height) == (64, 48)
    assert len(raw) == height * (1 + width * 3)
    # Noise keeps it from collapsing the way a flat image would.
    assert len(chunks[1][1]) > len(raw) // 4


# --- the server, in memory ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_tools_are_declared_as_the_protocol_needs(folder: Path) -> None:
    async with fastmcp.Client(build_demo_server(folder)) as client:
        tools = {tool.name: tool for tool in await client.list_tools()}
    assert set(tools) == {"list_notebooks", "read_notebook", "read_cell", "edit_cell"}
    for name in ("list_notebooks", "read_notebook", "read_cell"):
        assert tools[name].annotations is not None
        assert tools[name].annotations.read_only_hint is True
        # A not-modified reply's {"kind": K} must satisfy the schema a client validates it against.
        schema = tools[name].output_schema
        assert schema is not None
        assert schema["required"] == ["kind"]
    edit = tools["edit_cell"].annotations
    assert edit is not None
    assert edit.read_only_hint is False


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("config", list(CONFIGS))
async def test_read_notebook_revalidates_to_not_modified(folder: Path, config: str, mode: str) -> None:
    async with fastmcp.Client(build_demo_server(folder, **CONFIGS[config]), mode=mode) as client:
        full = await client.call_tool_mcp("read_notebook", {"path": "a.ipynb"})
        assert not full.is_error
        stamped = block(full)
        assert stamped["ttlMs"] == 5000
        assert stamped["cacheScope"] == "private"
        assert stamped["etag"].startswith('W/"')
        assert full.structured_content is not None
        assert full.structured_content["kind"] == "notebook.read"
        assert full.structured_content["cell_count"] == 12

        again = await client.call_tool_mcp("read_notebook", {"path": "a.ipynb"}, meta=conditional(stamped["etag"]))
        assert again.content == []
        assert again.structured_content == {"kind": "notebook.read"}
        assert block(again) == {**stamped, "notModified": True}

        # The parsed form goes through the SDK's output-schema validation too.
        parsed = await client.call_tool("read_notebook", {"path": "a.ipynb"}, meta=conditional(stamped["etag"]))
        assert parsed.structured_content == {"kind": "notebook.read"}


@pytest.mark.anyio
@pytest.mark.parametrize("config", list(CONFIGS))
async def test_edit_then_read_gives_a_new_tag_and_the_new_content(folder: Path, config: str) -> None:
    async with fastmcp.Client(build_demo_server(folder, **CONFIGS[config])) as client:
        before = await client.call_tool_mcp("read_notebook", {"path": "a.ipynb"})
        cell_before = await client.call_tool_mcp("read_cell", {"path": "a.ipynb", "index": 3})
        edited = await client.call_tool_mcp("edit_cell", {"path": "a.ipynb", "index": 3, "source": "x = 42\nx"})
        assert not edited.is_error
        assert edited.structured_content == {"kind": "notebook.edit", "path": "a.ipynb", "index": 3, "cell_count": 12}
        assert META_KEY not in (edited.meta or {}), "edit_cell is not declared, so it is never stamped"

        after = await client.call_tool_mcp(
            "read_notebook", {"path": "a.ipynb"}, meta=conditional(block(before)["etag"])
        )
        assert block(after).get("notModified") is not True
        assert block(after)["etag"] != block(before)["etag"]
        assert after.structured_content is not None
        assert after.structured_content["cells"][3]["source"] == "x = 42\nx"

        cell_after = await client.call_tool_mcp(
            "read_cell", {"path": "a.ipynb", "index": 3}, meta=conditional(block(cell_before)["etag"])
        )
        assert cell_after.structured_content is not None
        assert cell_after.structured_content["cell"]["source"] == "x = 42\nx"
        assert block(cell_after)["etag"] != block(cell_before)["etag"]
    nbformat.validate(nbformat.read(folder / "a.ipynb", as_version=4))


@pytest.mark.anyio
@pytest.mark.parametrize("config", list(CONFIGS))
async def test_a_change_by_another_program_is_seen(folder: Path, config: str) -> None:
    path = folder / "a.ipynb"
    async with fastmcp.Client(build_demo_server(folder, **CONFIGS[config])) as client:
        before = await client.call_tool_mcp("read_notebook", {"path": "a.ipynb"})
        stat = path.stat()
        notebook = json.loads(path.read_text(encoding="utf-8"))
        source = notebook["cells"][0]["source"]
        # Same length, same mtime: only the content says it changed.
        notebook["cells"][0]["source"] = [line.replace("n", "N") for line in source]
        path.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        if "memo" in config:
            # The memo cannot see a change made by another program: it serves its answer until its ttl,
            # validator or not (mcpcache does not trust a validator behind a memo), under that answer's tag.
            stale = await client.call_tool_mcp("read_notebook", {"path": "a.ipynb"})
            assert stale.structured_content == before.structured_content
            assert block(stale)["etag"] == block(before)["etag"]
            return
        after = await client.call_tool_mcp(
            "read_notebook", {"path": "a.ipynb"}, meta=conditional(block(before)["etag"])
        )
    assert block(after).get("notModified") is not True
    assert block(after)["etag"] != block(before)["etag"]
    assert after.structured_content is not None
    assert after.structured_content["cells"][0]["source"] == "".join(notebook["cells"][0]["source"])


@pytest.mark.anyio
async def test_validator_answers_not_modified_without_running_the_body(folder: Path) -> None:
    counter = BodyCounter()
    server = build_demo_server(folder, validator=True)
    server.add_middleware(counter)  # appended: innermost, right before the tool body
    async with fastmcp.Client(server) as client:
        full = await client.call_tool_mcp("read_notebook", {"path": "a.ipynb"})
        again = await client.call_tool_mcp("read_notebook", {"path": "a.ipynb"}, meta=conditional(block(full)["etag"]))
        cell = await client.call_tool_mcp("read_cell", {"path": "a.ipynb", "index": 0})
        cell_again = await client.call_tool_mcp(
            "read_cell", {"path": "a.ipynb", "index": 0}, meta=conditional(block(cell)["etag"])
        )
    assert block(again)["notModified"] is True
    assert block(cell_again)["notModified"] is True
    assert cell_again.structured_content == {"kind": "notebook.cell"}
    assert counter.calls == ["read_notebook", "read_cell"]


@pytest.mark.anyio
async def test_without_mcpcache_there_is_no_cache_block(folder: Path) -> None:
    async with fastmcp.Client(build_demo_server(folder, revalidation=False)) as client:
        full = await client.call_tool_mcp("read_notebook", {"path": "a.ipynb"})
    assert not full.is_error
    assert META_KEY not in (full.meta or {})


@pytest.mark.anyio
async def test_list_notebooks_lists_only_notebooks_inside_the_folder(folder: Path) -> None:
    (folder / "escape.ipynb").symlink_to(folder.parent / "secret.ipynb")
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / ".ipynb_checkpoints" / "a-checkpoint.ipynb").write_text("{}")
    async with fastmcp.Client(build_demo_server(folder)) as client:
        listed = await client.call_tool_mcp("list_notebooks", {})
    assert listed.structured_content is not None
    assert [entry["path"] for entry in listed.structured_content["notebooks"]] == ["a.ipynb", "sub/b.ipynb"]
    assert block(listed)["etag"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("read_notebook", {"path": "../secret.ipynb"}, "outside the notebook folder"),
        ("read_notebook", {"path": "sub/../../secret.ipynb"}, "outside the notebook folder"),
        ("read_notebook", {"path": "ABSOLUTE_SECRET"}, "outside the notebook folder"),
        ("read_notebook", {"path": "escape.ipynb"}, "'escape.ipynb' is a symbolic link (the demo server follows no"),
        ("read_notebook", {"path": "notes.txt"}, "not a .ipynb notebook"),
        ("read_notebook", {"path": "missing.ipynb"}, "no notebook at 'missing.ipynb'"),
        ("read_notebook", {"path": ""}, "path must name a notebook"),
        ("read_cell", {"path": "a.ipynb", "index": 12}, "no cell 12 in 'a.ipynb': it has 12 cells (0-11)"),
        ("read_cell", {"path": "a.ipynb", "index": -1}, "index must be a cell number >= 0"),
        ("read_cell", {"path": "../secret.ipynb", "index": 0}, "outside the notebook folder"),
        ("edit_cell", {"path": "../secret.ipynb", "index": 0, "source": "x"}, "outside the notebook folder"),
        ("edit_cell", {"path": "a.ipynb", "index": 99, "source": "x"}, "no cell 99"),
    ],
)
@pytest.mark.parametrize("validator", [False, True])
async def test_bad_paths_and_indexes_are_clear_errors(
    folder: Path, tool: str, arguments: dict[str, Any], message: str, validator: bool
) -> None:
    (folder / "escape.ipynb").symlink_to(folder.parent / "secret.ipynb")
    if arguments.get("path") == "ABSOLUTE_SECRET":
        arguments = {**arguments, "path": str(folder.parent / "secret.ipynb")}
    secret = (folder.parent / "secret.ipynb").read_bytes()
    async with fastmcp.Client(build_demo_server(folder, validator=validator)) as client:
        result = await client.call_tool_mcp(tool, arguments, meta=conditional('W/"00000000000000000000000000000000"'))
    assert result.is_error
    assert message in result.content[0].text
    assert str(folder.parent) not in result.content[0].text, "errors name paths relative to the folder only"
    assert META_KEY not in (result.meta or {}), "an error is never stamped"
    assert (folder.parent / "secret.ipynb").read_bytes() == secret


@pytest.mark.anyio
async def test_absolute_path_inside_the_folder_is_allowed(folder: Path) -> None:
    async with fastmcp.Client(build_demo_server(folder)) as client:
        result = await client.call_tool_mcp("read_cell", {"path": str(folder / "a.ipynb"), "index": 0})
    assert result.structured_content is not None
    assert result.structured_content["path"] == "a.ipynb"


# --- the command, over real transports ------------------------------------------------------------------


def _console_script() -> str:
    script = shutil.which("mcpcache", path=str(Path(sys.executable).parent)) or shutil.which("mcpcache")
    assert script is not None, "the mcpcache console script is not installed"
    return script


@pytest.mark.slow
@pytest.mark.anyio
async def test_stdio_demo_server_generates_and_revalidates(tmp_path: Path) -> None:
    async with fastmcp.Client(build_demo_server(_generated_copy(tmp_path))) as client:
        reference = block(await client.call_tool_mcp("read_notebook", {"path": "demo-6.ipynb"}))["etag"]

    served = tmp_path / "stdio"
    served.mkdir()
    params = StdioServerParameters(
        command=_console_script(), args=["demo-server", "--dir", str(served), "--generate", "6"]
    )
    transport = CountingTransport(stdio_client(params))
    async with mcp.Client(transport) as client:
        full = await client.call_tool("read_notebook", {"path": "demo-6.ipynb"})
        tag = block(full)["etag"]
        mark = transport.log.mark()
        again = await client.call_tool("read_notebook", {"path": "demo-6.ipynb"}, meta=conditional(tag))
    # Same notebook, same tag, whatever the process or transport.
    assert tag == reference
    assert again.structured_content == {"kind": "notebook.read"}
    assert block(again)["notModified"] is True
    _request, reply = transport.log.exchange("tools/call", since=mark)
    assert reply.nbytes < 400
    assert (served / "demo-6.ipynb").is_file()


def _generated_copy(tmp_path: Path) -> Path:
    reference = tmp_path / "reference"
    reference.mkdir()
    generate_notebook(reference / "demo-6.ipynb", 6, seed=0)
    return reference


@pytest.fixture
async def http_server(folder: Path) -> AsyncIterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await anyio.open_process(
        [_console_script(), "demo-server", "--dir", str(folder), "--http", str(port), "--validator"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        with anyio.fail_after(20):
            while True:
                try:
                    async with httpx2.AsyncClient() as http:
                        await http.get(url)
                    break
                except httpx2.TransportError:
                    assert process.returncode is None, "the demo server exited"
                    await anyio.sleep(0.1)
        yield url
    finally:
        process.terminate()
        with anyio.fail_after(10):
            await process.wait()


@pytest.mark.anyio
async def test_http_demo_server(http_server: str) -> None:
    async with mcp.Client(http_server) as client:
        full = await client.call_tool("read_cell", {"path": "a.ipynb", "index": 1})
        again = await client.call_tool(
            "read_cell", {"path": "a.ipynb", "index": 1}, meta=conditional(block(full)["etag"])
        )
    assert block(again)["notModified"] is True
    assert again.structured_content == {"kind": "notebook.cell"}


def test_cli_refuses_a_missing_folder(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo-server", "--dir", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "not a folder" in result.output


def test_cli_refuses_validator_without_mcpcache(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo-server", "--dir", str(tmp_path), "--validator", "--no-revalidation"])
    assert result.exit_code == 2


@pytest.mark.slow
def test_stdio_mode_keeps_stdout_for_the_protocol(tmp_path: Path) -> None:
    # With stdin closed at once the server starts, generates, and exits: anything on stdout is a stray print.
    finished = subprocess.run(
        [_console_script(), "demo-server", "--dir", str(tmp_path), "--generate", "2"],
        input=b"",
        capture_output=True,
        timeout=30,
        check=True,
    )
    assert finished.stdout == b""
    assert b"demo-2.ipynb" in finished.stderr
    nbformat.validate(nbformat.read(tmp_path / "demo-2.ipynb", as_version=4))


@pytest.mark.slow
def test_generate_without_a_folder_writes_to_the_demo_folder_not_where_it_is_run(tmp_path: Path) -> None:
    """The README's `mcpcache demo-server --generate 200`, run in a clone, left demo-200.ipynb in it (and a
    host running the proxy's example in its own working folder): without --dir the demo folder is served."""
    here, cache = tmp_path / "clone", tmp_path / "cache"
    here.mkdir()
    finished = subprocess.run(
        [_console_script(), "demo-server", "--generate", "2"],
        input=b"",
        capture_output=True,
        timeout=30,
        check=True,
        cwd=here,
        env={**os.environ, "MCPCACHE_DIR": str(cache)},
    )
    assert list(here.iterdir()) == []
    assert f"mcpcache: wrote {cache / 'demo' / 'demo-2.ipynb'} (".encode() in finished.stderr
    nbformat.validate(nbformat.read(cache / "demo" / "demo-2.ipynb", as_version=4))


def test_an_unusable_demo_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    result = CliRunner().invoke(app, ["demo-server", "--generate", "2"], env={"MCPCACHE_DIR": str(tmp_path / "file")})
    assert result.exit_code == 2
    assert "the demo folder cannot be used" in result.output
    assert "name one with --dir" in result.output


@pytest.mark.anyio
async def test_concurrent_edits_both_land_and_keep_the_file_mode(folder: Path) -> None:
    path = folder / "a.ipynb"
    path.chmod(0o644)
    async with fastmcp.Client(build_demo_server(folder)) as client, anyio.create_task_group() as group:
        for index in range(6):
            group.start_soon(client.call_tool, "edit_cell", {"path": "a.ipynb", "index": index, "source": f"# {index}"})
    notebook = nbformat.read(path, as_version=4)
    assert [cell.source for cell in notebook.cells[:6]] == [f"# {index}" for index in range(6)]
    assert path.stat().st_mode & 0o777 == 0o644
    assert sorted(os.listdir(folder)) == ["a.ipynb", "notes.txt", "sub"], "no temporary file left"
