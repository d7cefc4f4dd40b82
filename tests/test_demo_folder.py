"""The demo server's folder: symlinks refused, unreadable entries skipped, errors without the folder's
location, and edits that keep every number of the notebook exactly as it was written."""

from __future__ import annotations

import difflib
import json
import os
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastmcp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpcache.demo import exact_json
from mcpcache.demo.notebooks import build_notebook, generate_notebook, notebook_text
from mcpcache.demo.server import build_demo_server

pytestmark = pytest.mark.anyio

BIG = "123456789012345678901234567890"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    served = tmp_path / "served"
    served.mkdir()
    generate_notebook(served / "a.ipynb", 6, seed=1)
    (served / "sub").mkdir()
    generate_notebook(served / "sub" / "b.ipynb", 4, seed=2)
    (tmp_path / "secret.ipynb").write_text(notebook_text(build_notebook(2, seed=3)))
    return served


async def call(folder: Path, tool: str, arguments: dict[str, Any]) -> Any:
    async with fastmcp.Client(build_demo_server(folder, validator=True)) as client:
        return await client.call_tool_mcp(tool, arguments)


def error_text(result: Any) -> str:
    assert result.is_error
    text: str = result.content[0].text
    return text


def listed(result: Any) -> list[str]:
    assert not result.is_error, result.content
    return [entry["path"] for entry in result.structured_content["notebooks"]]


# --- listing --------------------------------------------------------------------------------------------


async def test_a_symlink_loop_does_not_break_the_listing(folder: Path) -> None:
    (folder / "loop.ipynb").symlink_to("loop.ipynb")
    (folder / "ping").symlink_to("pong")
    (folder / "pong").symlink_to("ping")
    (folder / "sub" / "round.ipynb").symlink_to("../sub/round.ipynb")
    (folder / "broken.ipynb").symlink_to("nowhere.ipynb")
    (folder / "up").symlink_to("..")  # a directory link back out: never walked into
    os.mkfifo(folder / "fifo.ipynb")
    (folder / "folder.ipynb").mkdir()
    result = await call(folder, "list_notebooks", {})
    assert listed(result) == ["a.ipynb", "sub/b.ipynb"]
    sizes = {entry["path"]: entry["size_bytes"] for entry in result.structured_content["notebooks"]}
    assert sizes["a.ipynb"] == (folder / "a.ipynb").stat().st_size


async def test_links_inside_the_folder_are_not_listed(folder: Path) -> None:
    (folder / "alias.ipynb").symlink_to("a.ipynb")
    (folder / "linked-sub").symlink_to("sub")
    assert listed(await call(folder, "list_notebooks", {})) == ["a.ipynb", "sub/b.ipynb"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
async def test_an_unreadable_notebook_or_folder_is_skipped(folder: Path) -> None:
    generate_notebook(folder / "locked.ipynb", 2, seed=4)
    (folder / "locked.ipynb").chmod(0)
    (folder / "closed").mkdir()
    generate_notebook(folder / "closed" / "c.ipynb", 2, seed=5)
    (folder / "closed").chmod(0)
    try:
        assert listed(await call(folder, "list_notebooks", {})) == ["a.ipynb", "sub/b.ipynb"]
        text = error_text(await call(folder, "read_notebook", {"path": "locked.ipynb"}))
        assert "permission denied" in text
        assert str(folder) not in text
    finally:
        (folder / "closed").chmod(0o755)


# --- symlinks are refused -------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["read_notebook", "read_cell", "edit_cell"])
async def test_a_symlink_is_refused_even_inside_the_folder(folder: Path, tool: str) -> None:
    (folder / "alias.ipynb").symlink_to("a.ipynb")
    before = (folder / "a.ipynb").read_bytes()
    arguments: dict[str, Any] = {"path": "alias.ipynb", "index": 0, "source": "x"}
    if tool == "read_notebook":
        del arguments["index"], arguments["source"]
    elif tool == "read_cell":
        del arguments["source"]
    text = error_text(await call(folder, tool, arguments))
    assert text == "refused: 'alias.ipynb' is a symbolic link (the demo server follows no symlinks)"
    assert (folder / "a.ipynb").read_bytes() == before
    assert (folder / "alias.ipynb").is_symlink()


async def test_a_linked_folder_on_the_way_is_refused(folder: Path) -> None:
    (folder / "linked").symlink_to(folder / "sub")
    (folder / "out").symlink_to(folder.parent)
    text = error_text(await call(folder, "read_notebook", {"path": "linked/b.ipynb"}))
    assert text == (
        "refused: 'linked/b.ipynb' goes through 'linked', which is a symbolic link"
        " (the demo server follows no symlinks)"
    )
    secret = (folder.parent / "secret.ipynb").read_bytes()
    text = error_text(await call(folder, "edit_cell", {"path": "out/secret.ipynb", "index": 0, "source": "x"}))
    assert "goes through 'out', which is a symbolic link" in text
    assert (folder.parent / "secret.ipynb").read_bytes() == secret


async def test_an_edit_replaces_nothing_outside_through_a_link_at_the_parent(folder: Path) -> None:
    (folder / "sub" / "deeper").mkdir()
    generate_notebook(folder / "sub" / "deeper" / "d.ipynb", 3, seed=6)
    result = await call(folder, "edit_cell", {"path": "sub/deeper/../deeper/d.ipynb", "index": 1, "source": "y = 1"})
    assert not result.is_error
    assert result.structured_content["path"] == "sub/deeper/d.ipynb"
    assert sorted(os.listdir(folder / "sub" / "deeper")) == ["d.ipynb"], "no temporary file left"


# --- errors never show where the folder is -------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("missing.ipynb", "no notebook at 'missing.ipynb' (use list_notebooks to see what is there)"),
        ("sub/missing.ipynb", "no notebook at 'sub/missing.ipynb' (use list_notebooks to see what is there)"),
        ("nosuch/x.ipynb", "no notebook at 'nosuch/x.ipynb' (use list_notebooks to see what is there)"),
        ("a.ipynb/x.ipynb", "no notebook at 'a.ipynb/x.ipynb' (use list_notebooks to see what is there)"),
        ("FOLDER/missing.ipynb", "no notebook at 'missing.ipynb' (use list_notebooks to see what is there)"),
        ("FOLDER/../elsewhere.ipynb", "refused: that absolute path is outside the notebook folder"),
        ("loop.ipynb", "refused: 'loop.ipynb' is a symbolic link (the demo server follows no symlinks)"),
        ("dir.ipynb", "no notebook at 'dir.ipynb': it is a folder"),
        ("fifo.ipynb", "no notebook at 'fifo.ipynb': it is not a regular file"),
        ("bad.ipynb", "'bad.ipynb' is not valid notebook JSON"),
    ],
)
@pytest.mark.parametrize("tool", ["read_notebook", "edit_cell"])
async def test_errors_name_paths_relative_to_the_folder(folder: Path, path: str, message: str, tool: str) -> None:
    (folder / "loop.ipynb").symlink_to("loop.ipynb")
    (folder / "dir.ipynb").mkdir()
    os.mkfifo(folder / "fifo.ipynb")
    (folder / "bad.ipynb").write_text("{not json")
    path = path.replace("FOLDER", str(folder))
    arguments: dict[str, Any] = {"path": path} if tool == "read_notebook" else {"path": path, "index": 0, "source": ""}
    text = error_text(await call(folder, tool, arguments))
    assert message in text
    for shown in (str(folder), str(folder.parent)):
        assert shown not in text


# --- numbers stay exactly as written -------------------------------------------------------------------

_NUMBERS = {"big": BIG, "negative_big": "-" + BIG, "tenth": "0.1", "trailing": "1.50", "exponent": "1e5"}
_NUMBERS |= {
    "upper": "2E-3",
    "negative_zero": "-0.0",
    "int_zero": "-0",
    "small": "5e-324",
    "max": "1.7976931348623157e308",
}


def _notebook_with_numbers() -> str:
    notebook = build_notebook(5, seed=9, images=False)
    notebook["metadata"]["numbers"] = {key: f"@{key}@" for key in _NUMBERS}
    notebook["cells"][3].setdefault("outputs", [])
    notebook["cells"][3]["cell_type"] = "code"
    notebook["cells"][3]["execution_count"] = 7
    notebook["cells"][3]["outputs"] = [
        {
            "output_type": "execute_result",
            "execution_count": 7,
            "metadata": {},
            "data": {"application/json": {"big": "@big@", "values": ["@tenth@", "@exponent@"]}, "text/plain": BIG},
        }
    ]
    text = notebook_text(notebook)
    # Spliced in as text: no Python value would keep these spellings.
    return re.sub(r'"@(\w+)@"', lambda m: _NUMBERS[m.group(1)], text)


async def test_edit_keeps_every_other_number_exactly(folder: Path) -> None:
    original = _notebook_with_numbers()
    (folder / "n.ipynb").write_text(original, encoding="utf-8")
    result = await call(folder, "edit_cell", {"path": "n.ipynb", "index": 1, "source": "z = 2\nz"})
    assert not result.is_error, result.content
    edited = (folder / "n.ipynb").read_text(encoding="utf-8")

    before = json.loads(original, parse_float=Decimal, parse_int=Decimal)
    after = json.loads(edited, parse_float=Decimal, parse_int=Decimal)
    assert after["cells"][1]["source"] == ["z = 2\n", "z"]
    after["cells"][1]["source"] = before["cells"][1]["source"]
    assert after == before, "only the edited cell's source changed"
    # And byte for byte: the only lines that differ are the edited cell's source lines.
    diff = list(difflib.ndiff(original.splitlines(), edited.splitlines()))
    removed = [line[2:] for line in diff if line.startswith("- ")]
    added = [line[2:] for line in diff if line.startswith("+ ")]
    old_source = before["cells"][1]["source"]
    assert removed == [f"    {json.dumps(line, ensure_ascii=False)}," for line in old_source[:-1]] + [
        f"    {json.dumps(old_source[-1], ensure_ascii=False)}"
    ]
    assert added == ['    "z = 2\\n",', '    "z"']
    assert edited.count(BIG) == original.count(BIG) == 4


async def test_read_answers_carry_big_integers_exactly(folder: Path) -> None:
    (folder / "n.ipynb").write_text(_notebook_with_numbers(), encoding="utf-8")
    result = await call(folder, "read_notebook", {"path": "n.ipynb"})
    assert not result.is_error, result.content
    numbers = result.structured_content["metadata"]["numbers"]
    assert numbers["big"] == int(BIG)
    assert numbers["negative_big"] == -int(BIG)
    assert numbers["tenth"] == 0.1
    assert result.structured_content["cells"][3]["outputs"][0]["data"]["application/json"]["big"] == int(BIG)


def test_exact_json_writes_nbformat_text_unchanged(tmp_path: Path) -> None:
    text = notebook_text(build_notebook(30, seed=4))
    assert exact_json.dumps(exact_json.loads(text)) + "\n" == text


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_json_values)
def test_exact_json_round_trips_what_nbformat_writes(value: object) -> None:
    text = json.dumps(value, indent=1, sort_keys=True, separators=(",", ": "), ensure_ascii=False)
    assert exact_json.dumps(exact_json.loads(text)) == text
