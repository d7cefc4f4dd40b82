"""`mcpcache check` against the real jupyter-mcp-server 2.2.4 (the interop extra): it passes every rule except
where it is known to deviate, the check names each deviation precisely, and without the calls that exercise
those rules it never says "conforms".

- Its tag hashes the structured content only, so when a cell's id changes and its source does not (cell 0
  deleted and inserted again), the tag stays the same while `_meta["io.jupyter-mcp/cell_id"]` changes, and
  the old tag still gets not-modified: the `meta` scenario fails, naming the key and both values.
- It compares tags as strings, not weakly: the strong form of its tag gets the full answer, a warning.

The stack is the session's (tests/support/jupyter.py), shared with tests/client/test_jupyter_interop.py.
Without jupyter-mcp-server the module is skipped locally and fails under CI=true, as that module does.
"""

from __future__ import annotations

import pytest
from support.jupyter import JupyterStack, require_jupyter_mcp_server

require_jupyter_mcp_server()


from mcpcache.check.probe import CheckOptions, Target, check_server  # noqa: E402
from mcpcache.check.selection import ToolCall  # noqa: E402

pytestmark = pytest.mark.anyio

CELL = {"notebook_name": "default", "cell_index": 0}
NOTEBOOK = {"notebook_name": "default", "response_format": "detailed"}
# Cell 0 deleted and inserted again with the same source: same content, a new cell id.
SAME_CELL_NEW_ID = (
    ToolCall("delete_cell", {"notebook_name": "default", "cell_indices": [0]}),
    ToolCall(
        "insert_cell",
        {"notebook_name": "default", "cell_index": 0, "cell_type": "code", "cell_source": "x = 1\nprint(x)"},
    ),
)


@pytest.mark.slow
async def test_the_check_reports_jupyters_known_deviations_precisely(jupyter_stack: JupyterStack) -> None:
    options = CheckOptions(
        calls=(ToolCall("read_cell", CELL), ToolCall("read_notebook", NOTEBOOK)), mutations=SAME_CELL_NEW_ID
    )
    report = await check_server(Target.http(jupyter_stack.url), options)
    by_tool = {s.name: {v.scenario: v for v in s.verdicts} for s in report.subjects}

    for tool, verdicts in by_tool.items():
        # What it gets right: the block, stable tags, the not-modified reply's shape and schema, full answers
        # to tags it never issued and to malformed ones, unstamped errors.
        for scenario in (
            "block",
            "same-tag",
            "ordinary",
            "not-modified",
            "nm-schema",
            "other-tag",
            "malformed-tag",
            "error",
        ):
            assert verdicts[scenario].status == "pass", (tool, verdicts[scenario])
        assert verdicts["weak-compare"].status == "warn", (tool, verdicts["weak-compare"])
        assert "compared as strings" in verdicts["weak-compare"].detail

    meta = by_tool["read_cell"]["meta"]
    assert meta.status == "fail"
    assert "_meta key io.jupyter-mcp/cell_id: " in meta.detail
    assert "the old tag got not-modified after the mutation" in meta.detail
    assert by_tool["read_cell"]["mutation"].status == "n/a", "the content did not change, only _meta"
    assert by_tool["read_notebook"]["meta"].status == "n/a", "read_notebook carries no cell id"
    assert not report.ok
    assert [v.scenario for v in report.verdicts() if v.status == "fail"] == ["meta"]


@pytest.mark.slow
async def test_without_tool_names_the_check_finds_a_notebook_and_says_what_it_could_not_try(
    jupyter_stack: JupyterStack,
) -> None:
    """Its listing tools answer with `ttlMs` and no tag, which shows nothing about revalidation; the check
    reads the notebook's name from list_notebooks' answer, revalidates read_notebook with it, and says
    which tools it could not call (read_cell needs an index or id nobody gave) and which scenarios need
    a mutating call."""
    report = await check_server(Target.http(jupyter_stack.url), CheckOptions())
    revalidated = {s.name: s for s in report.subjects if s.revalidated}
    assert set(revalidated) == {"read_notebook"}, report.to_json()
    assert revalidated["read_notebook"].arguments == {"notebook_name": "default"}
    assert "key 'Name' in the answer of list_notebooks" in revalidated["read_notebook"].note
    untagged = {s.name for s in report.subjects if not s.revalidated}
    assert {"list_notebooks", "list_files"} <= untagged
    assert "answered an error" in dict(report.skipped)["read_cell"]
    # It never says "conforms": the mutation rule went unexercised (no --mutate), and read_cell, whose answers
    # carry `_meta` of their own (the cell id its tag leaves out), was not checked at all.
    from mcpcache.check.render import outcome_line

    assert (report.outcome, report.exit_status) == ("incomplete", 3)
    assert "mutation" in [scenario for scenario, _ in report.unexercised()]
    assert report.unchecked == ("read_cell",)
    line, _ = outcome_line(report)
    assert "conforms" not in line
    assert "not exercised: " in line
    assert "not checked: read_cell" in line
