"""Deltas computed from the tool's return value (`mcpcache.server.raw_deltas`): over random notebooks and
random edits, through a real FastMCP server, the answer a client builds from the delta is the stock full
read, byte for byte, in both digest forms, under a TypedDict return annotation (FastMCP drops undeclared
keys and writes ints in float fields as floats) and under `dict[str, Any]`."""

from __future__ import annotations

import copy
from typing import Any, Required

import anyio
import fastmcp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typing_extensions import TypedDict

import mcpcache.server.revalidator as revalidator
from mcpcache.client.patching import Patched, patch_answer
from mcpcache.delta import FORMAT, TREE_FORMAT
from mcpcache.protocol import META_KEY, DeltaBlock, conditional_request_meta, parse_cache_block
from mcpcache.server import CachePolicy
from mcpcache.server.fastmcp import install
from tests.delta.strategies import _edit_string, cells, long_text, texts


class Cell(TypedDict, total=False):
    index: int
    id: str
    cell_type: str
    source: str
    execution_count: int | None
    outputs: list[dict[str, Any]]
    weight: float


class Notebook(TypedDict, total=False):
    kind: Required[str]
    path: str
    metadata: dict[str, Any]
    cell_count: int
    cells: list[Cell]


def _server(state: dict[str, Any]) -> tuple[fastmcp.FastMCP, Any]:
    server = fastmcp.FastMCP("raw-deltas")

    def answer() -> dict[str, Any]:
        # A fresh value each read, as a tool that reads a file makes; its parts are the state's own objects.
        numbered = [{"index": i, **cell} for i, cell in enumerate(state["cells"])]
        return {
            "kind": "notebook.read",
            "path": "nb.ipynb",
            "metadata": state["metadata"],
            "cell_count": len(numbered),
            "cells": numbered,
            "undeclared": state["undeclared"],
        }

    @server.tool()
    def typed() -> Notebook:
        return answer()  # type: ignore[return-value]

    @server.tool()
    def plain() -> dict[str, Any]:
        return answer()

    layer = install(server, {"typed": CachePolicy(ttl_ms=0), "plain": CachePolicy(ttl_ms=0)})
    return server, layer


def _wire(result: Any) -> str:
    return str(result.model_dump_json(by_alias=True, exclude_none=True))


@st.composite
def _cell(draw: st.DrawFn) -> dict[str, Any]:
    cell = draw(cells())
    if draw(st.booleans()):
        cell["weight"] = draw(st.sampled_from([1, 2.5, 0]))  # an int in a float field: FastMCP writes 1.0
    if draw(st.booleans()):
        cell["extra"] = draw(texts)  # undeclared in the TypedDict: dropped there, kept under dict
    return cell


@st.composite
def _edits(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    before = {
        "cells": draw(st.lists(_cell(), min_size=0, max_size=10)),
        # Padded so that most edits' deltas are under half the answer, and sent.
        "metadata": {"kernel": draw(st.sampled_from(["python3", "ir"])), "notes": "n" * 4000},
        "undeclared": 0,
    }
    after = copy.deepcopy(before)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["insert", "delete", "move", "source", "extra", "metadata", "undeclared", "all"]))
        cells_after = after["cells"]
        if kind == "insert" or not cells_after:
            cells_after.insert(draw(st.integers(0, len(cells_after))), draw(_cell()))
        elif kind == "delete":
            del cells_after[draw(st.integers(0, len(cells_after) - 1))]
        elif kind == "move":
            cells_after.insert(
                draw(st.integers(0, len(cells_after) - 1)), cells_after.pop(draw(st.integers(0, len(cells_after) - 1)))
            )
        elif kind == "source":
            at = draw(st.integers(0, len(cells_after) - 1))
            cells_after[at]["source"] = _edit_string(draw, cells_after[at]["source"])
        elif kind == "extra":
            cells_after[draw(st.integers(0, len(cells_after) - 1))]["extra"] = draw(long_text(max_words=5))
        elif kind == "metadata":
            after["metadata"] = {**after["metadata"], "edited": draw(texts)}
        elif kind == "undeclared":
            after["undeclared"] += 1
        else:
            after["cells"] = []
    return before, after


async def _check(before: dict[str, Any], after: dict[str, Any], tool: str, form: str) -> bool:
    """Read, edit, ask for a delta, read in full: the patched answer is the full read. Whether the delta
    was computed from the return value's change."""
    state = copy.deepcopy(before)
    server, _ = _server(state)
    async with fastmcp.Client(server) as client:
        held = await client.call_tool_mcp(tool, {})
        block = parse_cache_block(held.meta)
        assert block is not None
        assert block.etag is not None
        state.clear()
        state.update(copy.deepcopy(after))
        reply = await client.call_tool_mcp(tool, {}, meta=conditional_request_meta(block.etag, accept_delta=[form]))
        full = await client.call_tool_mcp(tool, {})
    replied = parse_cache_block(reply.meta)
    assert replied is not None
    if replied.not_modified:
        assert _wire(held.model_copy(update={"meta": None})) == _wire(full.model_copy(update={"meta": None}))
        return False
    if not isinstance(replied.delta, DeltaBlock):
        assert _wire(reply) == _wire(full)
        return False
    assert replied.delta.format == form
    made = patch_answer(held, replied.delta, reply.meta, META_KEY)
    assert isinstance(made, Patched), made
    assert _wire(made.result) == _wire(full)
    return True


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_edits(), st.sampled_from(["typed", "plain"]), st.sampled_from([TREE_FORMAT, FORMAT]))
def test_a_delta_from_the_return_value_s_change_is_the_full_read_byte_for_byte(
    pair: tuple[dict[str, Any], dict[str, Any]], tool: str, form: str
) -> None:
    anyio.run(_check, pair[0], pair[1], tool, form)


@pytest.mark.anyio
@pytest.mark.parametrize("tool", ["typed", "plain"])
async def test_a_one_cell_edit_is_computed_from_the_change(tool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shortcut is taken (not only correct when it is): a one-cell edit is sent without converting the
    whole answer, and again from the version it made."""
    made: list[bool] = []
    original = revalidator.raw_delta

    def watched(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        made.append(result is not None)
        return result

    monkeypatch.setattr(revalidator, "raw_delta", watched)
    cell = {"id": "c", "cell_type": "code", "source": "x = 1", "outputs": [], "weight": 1}
    before = {"cells": [dict(cell, id=str(n)) for n in range(8)], "metadata": {}, "undeclared": 0}
    after = copy.deepcopy(before)
    after["cells"][3]["source"] = "x = 2"
    assert await _check(before, after, tool, TREE_FORMAT)
    assert made == [True]


def _nb(*sources: str) -> dict[str, Any]:
    # Long sources and metadata: the delta of each edge stays under half the answer, so it is sent.
    return {
        "cells": [{"id": s, "cell_type": "code", "source": s * 300, "outputs": [], "weight": 1} for s in sources],
        "metadata": {"kernel": "python3", "notes": "n" * 4000},
        "undeclared": 0,
    }


# Each edge of the splices of an array's text: appended at the end, removed at either end or whole,
# inserted into an empty array or at the start; and members other than the array.
EDGES = {
    "append at the end": (_nb("a", "b"), _nb("a", "b", "c")),
    "remove the last": (_nb("a", "b", "c"), _nb("a", "b")),
    "remove the first": (_nb("a", "b", "c"), _nb("b", "c")),
    "remove all": (_nb("a", "b"), _nb()),
    "insert into an empty array": (_nb(), _nb("a")),
    "replace the middle": (_nb("a", "b", "c"), _nb("a", "x", "c")),
    "metadata": (_nb("a"), {**_nb("a"), "metadata": {"kernel": "ir", "notes": "n" * 4000}}),
    "an undeclared member": (_nb("a"), {**_nb("a"), "undeclared": 1}),
}


@pytest.mark.anyio
@pytest.mark.parametrize("tool", ["typed", "plain"])
@pytest.mark.parametrize("edge", EDGES.values(), ids=EDGES.keys())
async def test_each_edge_of_a_splice_is_the_full_read(
    edge: tuple[dict[str, Any], dict[str, Any]], tool: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[bool] = []
    original = revalidator.raw_delta

    def watched(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        made.append(result is not None)
        return result

    monkeypatch.setattr(revalidator, "raw_delta", watched)
    assert await _check(*edge, tool, TREE_FORMAT)
    assert made == [True]  # computed from the change, not by the usual path
