"""Re-read views under attack (issue 22 review): what a model holds after each view must still be the
server's answer when the earlier view was shortened, when a forget races parallel calls, and when calls
the model makes are refused before they reach the tool.

The model here is `ScriptedModel` (tests/refs/test_rereads.py): it applies changed views with its own
reading of the documented format. A shortened view's markers are resolved the way a model would pass
them on: by loading the reference each marker names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import fastmcp
import pytest

from mcpcache.client import ToolCache
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.demo.server import build_demo_server
from mcpcache.refs import References, ShownMemory, call_for_model
from mcpcache.stores import SQLiteStore

from .conftest import Harness
from .test_rereads import HeldStore, ScriptedModel, notebookish, read, whole_view

pytestmark = pytest.mark.anyio

MARKER = re.compile(r'^<elided .* give "(mcp\+cache://[^"]+)" as X_uri instead of X>$', re.DOTALL)


async def resolved(refs: References, held: Any) -> Any:
    """`held` with every marker replaced by what its reference resolves to (as a model passing it on gets)."""
    if isinstance(held, str):
        found = MARKER.match(held)
        return await refs.load(found.group(1)) if found else held
    if isinstance(held, dict):
        return {key: await resolved(refs, value) for key, value in held.items()}
    if isinstance(held, list):
        return [await resolved(refs, value) for value in held]
    return held


def log_answer(lines: list[str]) -> dict[str, Any]:
    """A log (one large member, elided in a shortened view) and rows small enough to stay in the view."""
    return {"log": "".join(lines), "rows": [{"i": i, "name": f"row {i}"} for i in range(100)]}


@pytest.mark.parametrize("where", ["first line", "a middle line", "the last line"])
async def test_a_changed_view_never_builds_on_a_shortened_view(harness: Harness, where: str) -> None:
    # The proxy's default: every stored answer is shown in at most 4096 bytes. The model's copy of the log is
    # then a marker, not the text: a change to a line of the log cannot be applied to it (applied to the
    # marker's one line, it replaces the marker: the model would hold a one-line log and believe it current).
    refs = harness.refs(max_view_bytes=4096, shown=ShownMemory())
    model = ScriptedModel()
    lines = [f"{i:04d} the quick brown fox jumps over the lazy dog\n" for i in range(400)]
    first = await refs.for_model(log_answer(lines), server="s", tool="read_log", tag='W/"1"')
    assert first.shortened == ["/log"]
    model.read(first.text())
    at = {"first line": 0, "a middle line": 200, "the last line": 399}[where]
    lines[at] = "CHANGED\n"
    view = await refs.for_model(log_answer(lines), server="s", tool="read_log", tag='W/"2"')
    uri, held = model.read(view.text())
    assert uri is not None
    assert await resolved(refs, held) == whole_view(log_answer(lines))
    # And the unchanged view that follows vouches for what the model holds.
    again = await refs.for_model(log_answer(lines), server="s", tool="read_log", tag='W/"2"')
    assert again.kind == "unchanged"
    _, held = model.read(again.text())
    assert await resolved(refs, held) == whole_view(log_answer(lines))


async def test_a_shortened_view_is_still_followed_by_unchanged(harness: Harness) -> None:
    refs = harness.refs(max_view_bytes=4096, shown=ShownMemory())
    lines = [f"{i:04d} a line\n" for i in range(2000)]
    assert (await refs.for_model(log_answer(lines), server="s", tool="t", tag='W/"1"')).shortened == ["/log"]
    assert (await refs.for_model(log_answer(lines), server="s", tool="t", tag='W/"1"')).kind == "unchanged"


async def test_a_changed_view_still_builds_on_a_whole_view_whose_next_view_is_shortened(harness: Harness) -> None:
    # The base was shown whole; the new answer grew past max_view_bytes: the model's copy is the whole old
    # answer, and the changes are applied to it.
    refs = harness.refs(threshold_bytes=1024, max_view_bytes=8192, shown=ShownMemory())
    model = ScriptedModel()
    answer = {"rows": [{"i": i, "v": "x" * 40} for i in range(100)]}
    first = await refs.for_model(answer, server="s", tool="t", tag='W/"1"')
    assert not first.shortened
    model.read(first.text())
    answer = {"rows": [*answer["rows"], {"i": 100, "v": "y" * 40}]}
    view = await refs.for_model(answer, server="s", tool="t", tag='W/"2"')
    assert view.kind == "changed"
    _, held = model.read(view.text())
    assert held == whole_view(answer)


async def test_a_view_made_across_a_forget_lives_no_longer_than_the_turn_bound() -> None:
    # max_turns=3: a view is built on while fewer than 3 further tool results were shown since its full view.
    # A view whose making straddles a forget, while another call of the conversation runs (parallel tool
    # calls), must not come out counted in the old numbering against the new one.
    store = HeldStore()
    memory = ShownMemory(max_turns=3)
    refs = References(store, conversation_id="c", shown=memory)
    for n in range(6):  # the conversation has gone on for a while: its turn count is 6
        await read(refs, {"small": n}, None, path=f"other{n}")
    await read(refs, notebookish(), 'W/"1"')
    store.gate = anyio.Event()
    views: list[str] = []

    async def reread() -> None:
        views.append((await read(refs, notebookish(), 'W/"1"'))[0])

    async with anyio.create_task_group() as tg:
        tg.start_soon(reread)
        await store.waiting.wait()  # the earlier answer is being read back
        memory.forget("c")  # the host compacted the conversation
        await read(refs, {"small": "parallel"}, None, path="parallel")  # a parallel call's result, shown
        store.gate.set()
    assert views == ["full"]
    # The full view just made is in the model's context; after it, re-reads: by the 4th (the 3rd further
    # tool result since that full view) it must have been shown whole again. Counted in a numbering that
    # restarted at the forget, it would be built on for 8 more turns.
    kinds = [(await read(refs, notebookish(), 'W/"1"'))[0] for _ in range(4)]
    assert "full" in kinds, kinds


async def test_a_refused_call_counts_as_a_turn(harness: Harness, tmp_path: Path) -> None:
    # A call whose reference cannot be resolved is not sent; the model is shown the error envelope, a tool
    # result like any other. `max_turns` counts tool results shown, so it must count that one too (the
    # proxy's --remember-shown N promises the host exactly that count).
    folder = tmp_path / "notebooks"
    folder.mkdir()
    generate_notebook_of_size(folder / "nb.ipynb", 20_000, seed=3, images=False)
    refs = harness.refs(shown=ShownMemory(max_turns=2))
    cache = ToolCache(SQLiteStore(tmp_path / "tools.db"))
    async with fastmcp.Client(build_demo_server(folder, ttl_ms=0)) as client:
        notebook = cache.wrap(client)
        kinds = []
        for step in range(4):
            called = await call_for_model(notebook, "read_notebook", {"path": "nb.ipynb"}, references=refs)
            assert called.view is not None
            kinds.append(called.view.kind)
            if step == 1:
                for _ in range(2):
                    refused = await call_for_model(
                        notebook, "read_cell", {"path_uri": "mcp+cache://c/AAAAAAAAAAA", "index": 0}, references=refs
                    )
                    assert not refused.called
                    json.dumps(refused.envelope)  # shown to the model
    # full; unchanged (1 further); then 2 refused calls and the read: 3 further since the full view.
    assert kinds[:2] == ["full", "unchanged"]
    assert kinds[2] == "full", kinds


async def test_an_error_between_reads_is_shown_whole_and_the_next_read_is_whole(harness: Harness) -> None:
    import mcp_types as mt

    refs = harness.refs(shown=ShownMemory())
    assert (await read(refs, notebookish(), 'W/"1"'))[0] == "full"
    error = mt.CallToolResult(
        content=[mt.TextContent(type="text", text="the notebook is locked " * 300)],
        is_error=True,
        _meta={"io.modelcontextprotocol/cache": {"etag": 'W/"1"'}},  # even under the same tag
    )
    view = await refs.for_model(error, server="s", tool="read", arguments={"path": "a"})
    assert view.kind == "full"
    assert "locked" in view.text()
    # The model's latest copy is the error: nothing to build on, even for the answer it read before it.
    assert (await read(refs, notebookish(), 'W/"1"'))[0] == "full"
    assert (await read(refs, notebookish(), 'W/"1"'))[0] == "unchanged"
