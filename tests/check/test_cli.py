"""The `mcpcache check` command itself: usage errors are one line and exit status 2; an unreachable server
is one line and exit status 1; and one real run over stdio against the catalogue server, as a user types it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from support.transports import SERVE_SCRIPT
from typer.testing import CliRunner

from mcpcache.cli import app
from mcpcache.cli.check import _paired_calls
from mcpcache.processes import free_port

from .test_export import CHECKS_FILE


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "give a server"),
        (["--url", "http://127.0.0.1:1/mcp", "--", "python", "server.py"], "give a server"),
        (["--args", "{}", "--url", "http://127.0.0.1:1/mcp"], "--args must follow"),
        (["--url", "http://127.0.0.1:1/mcp", "--tool", "t", "--args", "{not json"], "--args is not JSON"),
        (["--url", "http://127.0.0.1:1/mcp", "--tool", "t", "--args", "[1]"], "must be a JSON object"),
        (["--url", "http://127.0.0.1:1/mcp", "--tool", "t", "--args", "{}", "--args", "{}"], "--args must follow"),
        (["--url", "http://127.0.0.1:1/mcp", "--bogus"], "No such option"),
        (["--client", "--url", "http://127.0.0.1:1/mcp"], "--client serves a scripted server"),
        (["--calls", "3", "--url", "http://127.0.0.1:1/mcp"], "--http and --calls go with --client"),
        (["--url", "not-a-url"], "--url must be an http:// or https:// URL, got 'not-a-url'"),
        (["--url", "ftp://example.com/mcp"], "--url must be an http:// or https:// URL"),
        (["--url", "http:///mcp"], "--url must be an http:// or https:// URL"),
    ],
)
def test_a_usage_error_is_one_line_and_exit_status_2(args: list[str], says: str) -> None:
    result = CliRunner().invoke(app, ["check", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("mcpcache check: ")
    assert says in lines[0]


def test_an_unreachable_server_is_one_line_and_exit_status_1() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    result = CliRunner().invoke(app, ["check", "--url", url, "--timeout", "5"])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"mcpcache check: could not check {url}: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_a_stdio_server_that_dies_at_start_is_named_with_its_own_last_words(tmp_path: Path) -> None:
    """The SDK says only "Connection closed"; the server said why on stderr, and the one line says it too."""
    missing = tmp_path / "no-such-folder"
    command = [sys.executable, "-m", "mcpcache", "demo-server", "--dir", str(missing)]
    result = CliRunner().invoke(app, ["check", "--timeout", "30", "--", *command])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("mcpcache check: could not check ")
    assert "the server's stderr ended with: mcpcache demo-server: Invalid value for --dir" in lines[0]
    assert "Traceback" not in result.output


def test_each_args_goes_to_the_tool_or_mutation_before_it() -> None:
    tools, mutations = _paired_calls(
        ["--tool", "a", "--args", '{"x": 1}', "--mutate", "m", "--args={}", "--tool=b", "--json", "--", "--tool", "c"],
        json.loads,
    )
    assert tools == [("a", {"x": 1}), ("b", None)]
    assert mutations == [("m", {})]


@pytest.mark.slow
def test_the_cli_checks_the_catalogue_server_over_stdio(tmp_path: Path) -> None:
    checks = tmp_path / "checks.json"
    # A key this long makes the answer larger than 1 KiB, so the not-modified size bound is exercised too.
    key = "k" * 1100
    read = json.dumps({"key": key})
    command = [
        sys.executable, "-m", "mcpcache", "check", "--json", "--checks", str(checks),
        "--tool", "doc_dict", "--args", read,
        "--tool", "doc_model", "--args", read,
        "--mutate", "write_doc", "--args", json.dumps({"key": key, "text": "k: second edition"}),
        "--", sys.executable, str(SERVE_SCRIPT), "sdk", "stdio",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    by_tool = {s["name"]: {v["scenario"]: v["status"] for v in s["verdicts"]} for s in report["subjects"]}
    assert by_tool["doc_dict"]["mutation"] == by_tool["doc_dict"]["not-modified"] == "pass"
    # doc_model's output schema requires more than `kind`: its current tag gets the full answer.
    assert by_tool["doc_model"]["nm-schema"] == by_tool["doc_model"]["not-modified"] == "pass"
    assert report["counts"]["fail"] == 0
    # The same run in the MCP conformance suite's checks.json form.
    written = json.loads(checks.read_text())
    jsonschema.validate(written, CHECKS_FILE)
    assert checks.read_text().startswith('[\n  {\n    "id": "tool-revalidation-block",')
    statuses = {(c["id"], c["details"]["subject"]): c["status"] for c in written}
    assert statuses["tool-revalidation-mutation", "doc_dict"] == "SUCCESS"
    assert statuses["tool-revalidation-nm-schema", "doc_model"] == "SUCCESS"
    assert "FAILURE" not in statuses.values()
