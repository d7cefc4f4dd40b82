"""What a server check concludes, and its exit status: "conforms" (0) only when a tool with a tag went
through the revalidation scenarios and every required rule that applies was exercised; "incomplete" (3)
when one was not, naming it and what would exercise it; "inconclusive" (3) when no tagged tool could be
checked, naming each tool not called and what to add; "does not implement tool-result caching" (1) when no
answer carried a cache block.

The servers are real (tests/check/outsiders.py, the demo server, mcpcache's own), reached over memory
streams by the check's stock MCP client, and over stdio through the `mcpcache check` command.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp.client._memory import InMemoryTransport

from mcpcache.check.core import Report
from mcpcache.check.probe import CheckOptions, Target, check_server
from mcpcache.check.selection import ToolCall
from mcpcache.demo.notebooks import generate_notebook
from mcpcache.demo.server import build_demo_server

from .outsiders import build_outsider

OUTSIDERS = Path(__file__).resolve().parent / "outsiders.py"


async def check(server: Any, options: CheckOptions | None = None) -> Report:
    lowlevel = getattr(server, "_mcp_server", server)  # FastMCP's low-level server is private
    return await check_server(Target.of("in memory", lambda: InMemoryTransport(lowlevel)), options or CheckOptions())


def statuses(report: Report, tool: str) -> dict[str, str]:
    subject = next(s for s in report.subjects if s.name == tool)
    return {v.scenario: v.status for v in subject.verdicts}


@pytest.mark.anyio
async def test_a_server_whose_only_tagged_tool_needs_arguments_is_inconclusive() -> None:
    report = await check(build_outsider("keyed"))
    assert (report.outcome, report.exit_status, report.ok) == ("inconclusive", 3, False)
    # `status` answered with a block but no tag: checked, and it counts for nothing either way.
    assert [(s.name, s.revalidated) for s in report.subjects] == [("status", False)]
    hint = dict(report.skipped)["lookup"]
    assert """add --tool lookup --args '{"key": <string>}'""" in hint
    assert "--args-from FILE" in hint


@pytest.mark.anyio
async def test_the_arguments_it_asked_for_make_it_checked_but_its_unchanging_answer_leaves_it_incomplete() -> None:
    """`lookup` revalidates correctly, but nothing can change its answer: the mutation rule (a new tag after a
    change) is never exercised, nor is the size bound on its tiny answer, so it never "conforms"."""
    named = await check(build_outsider("keyed"), CheckOptions(calls=(ToolCall("lookup", {"key": "k"}),)))
    from_file = await check(build_outsider("keyed"), CheckOptions(known_arguments={"lookup": {"key": "k"}}))
    for report in (named, from_file):
        assert (report.outcome, report.exit_status) == ("incomplete", 3), report.to_json()
        assert statuses(report, "lookup")["not-modified"] == "pass"
        assert [scenario for scenario, _ in report.unexercised()] == ["nm-size", "mutation", "delta"]
    assert {s.name for s in from_file.subjects} == {"lookup", "status"}, "--args-from keeps the default choice"


@pytest.mark.anyio
async def test_a_server_that_stamps_nothing_does_not_implement_it() -> None:
    by_default = await check(build_outsider("plain"))
    assert (by_default.outcome, by_default.exit_status) == ("does not implement", 1)
    assert dict(by_default.skipped)["now"] == "its answer carries no cache block"
    assert by_default.stamping == "none"

    # Named, a tool fails `block`; the conclusion is still that the server does not implement it.
    named = await check(build_outsider("plain"), CheckOptions(calls=(ToolCall("convert", {"value": "x"}),)))
    assert statuses(named, "convert")["block"] == "fail"
    assert (named.outcome, named.exit_status) == ("does not implement", 1)


@pytest.mark.anyio
async def test_the_demo_server_conforms_with_arguments_found_in_its_listing(tmp_path: Path) -> None:
    """No --tool: read_notebook's `path` comes from list_notebooks' answer, and read_cell's `index` from
    the cells read_notebook answered with; one edit exercises the mutation rule (its answers carry no `_meta`
    of their own, so the `_meta` rule does not apply)."""
    generate_notebook(tmp_path / "nb.ipynb", 4, seed=3)
    edit = ToolCall("edit_cell", {"path": "nb.ipynb", "index": 0, "source": "x = 2"})
    report = await check(build_demo_server(tmp_path), CheckOptions(mutations=(edit,)))
    assert (report.outcome, report.exit_status) == ("conforms", 0), report.to_json()
    read = next(s for s in report.subjects if s.name == "read_notebook")
    assert read.arguments == {"path": "nb.ipynb"}
    assert read.revalidated
    assert (
        read.note
        == """arguments found in listing answers: path="nb.ipynb" (key 'path' in the answer of list_notebooks)"""
    )
    assert "fail" not in statuses(report, "read_notebook").values()
    cell = next(s for s in report.subjects if s.name == "read_cell")
    assert (cell.arguments, cell.revalidated) == ({"path": "nb.ipynb", "index": 0}, True)
    assert "index=0 (key 'index' in the answer of read_notebook)" in cell.note
    assert dict(report.skipped) == {
        "edit_cell": "neither declares a cache block nor is annotated read-only; name it with --tool"
    }
    assert statuses(report, "read_notebook")["mutation"] == "pass"
    from mcpcache.check.render import outcome_line

    assert outcome_line(report)[0] == "conforms: 38 pass, 13 n/a, 3 info", "no call asked for: one was given"
    assert statuses(report, "read_notebook")["meta"] == "n/a"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mcpcache", "check", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env={"COLUMNS": "160", **_env()})


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "COLUMNS"}


@pytest.mark.slow
def test_the_cli_exits_3_when_inconclusive_and_1_when_not_implemented(tmp_path: Path) -> None:
    keyed = run_cli("--", sys.executable, str(OUTSIDERS), "keyed")
    assert keyed.returncode == 3, keyed.stderr
    assert "inconclusive: no tool whose answers carry an entity tag could be checked" in keyed.stdout
    assert "--tool lookup --args '{\"key\": <string>}'" in " ".join(keyed.stdout.split())

    plain = run_cli("--", sys.executable, str(OUTSIDERS), "plain")
    assert plain.returncode == 1, plain.stderr
    header, first, *rest = plain.stdout.splitlines()
    assert header.startswith("mcpcache check: ")
    assert "does not implement tool-result caching: no answer carried a cache block (now answered without one)" in first
    assert rest[-1] == "does not implement tool-result caching"

    arguments = tmp_path / "arguments.json"
    arguments.write_text(json.dumps({"lookup": {"key": "k"}}))
    given = run_cli("--args-from", str(arguments), "--", sys.executable, str(OUTSIDERS), "keyed")
    assert given.returncode == 3, given.stderr
    closing = " ".join(given.stdout.split()).rsplit("incomplete: ", 1)[-1]
    assert closing.startswith("nothing failed (")
    assert "not exercised: nm-size (needs arguments that make an answer larger than 1,024 B" in closing
    assert "mutation (needs a mutating call that changes what the probed tools read" in closing

    arguments.write_text("[1]")
    refused = run_cli("--args-from", str(arguments), "--", sys.executable, str(OUTSIDERS), "keyed")
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith("mcpcache check: --args-from ")
