"""Run the official MCP conformance suite (`npx conformance server`, pinned in package.json here) against a
URL and read its verdict scenario by scenario.

The suite is installed by the README's test command (`npm ci --prefix tests/conformance`). Node 20 needs
the shim beside this file (node20-shim.mjs says why); it is loaded through NODE_OPTIONS for the run only.
`python -m tests.conformance.suite URL [URL...]` prints the verdicts side by side.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
SHIM = HERE / "node20-shim.mjs"
VERSION = "0.2.0-alpha.12"
SUITE_TIMEOUT_S = 600.0
"""A whole `--suite all` run; it takes about 15 s on a quiet machine."""

TIMEOUT = ("--timeout", "120000")
"""Per scenario, in ms (the suite's default is 30 s): on two cores shared with other test runs a scenario
through the proxy, which starts a process per host session, can take longer without being wrong."""

_FOLDER = re.compile(r"^server-(?P<name>.+)-\d{4}-\d\d-\d\dT[\d-]+Z$")


class SuiteMissing(RuntimeError):
    """node, or the installed suite, is not there (install it: `npm ci --prefix tests/conformance`)."""


@dataclass(frozen=True)
class Verdict:
    """One scenario's checks: passed when none failed (warnings and skips do not fail a scenario)."""

    scenario: str
    failures: tuple[str, ...]
    warnings: tuple[str, ...]
    checks: int
    skipped: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.failures

    def short(self) -> str:
        if self.failures:
            return "FAIL " + ", ".join(self.failures)
        return "pass" + (f" ({len(self.warnings)} warning(s))" if self.warnings else "")


def runner_problem() -> str | None:
    """Why the suite cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not RUNNER.exists():
        return f"the conformance suite is not installed: npm ci --prefix {HERE}"
    return None


def run_suite(
    url: str, *, extra: Sequence[str] = (), scenarios: Sequence[str] = (), timeout_s: float = SUITE_TIMEOUT_S
) -> dict[str, Verdict]:
    """`conformance server --url URL --suite all` (or each of `scenarios`), each scenario's verdict by name."""
    problem = runner_problem()
    if problem is not None:
        raise SuiteMissing(problem)
    env = dict(os.environ)
    env["NODE_OPTIONS"] = f"{env.get('NODE_OPTIONS', '')} --import {SHIM.as_uri()}".strip()
    selections = [["--scenario", name] for name in scenarios] or [["--suite", "all"]]
    with tempfile.TemporaryDirectory(prefix="mcpcache-conformance-") as out:
        for selection in selections:
            command = ["node", str(RUNNER), "server", "--url", url, *selection, "-o", out, *TIMEOUT, *extra]
            done = subprocess.run(command, env=env, cwd=out, capture_output=True, text=True, timeout=timeout_s)
        verdicts = read_verdicts(Path(out))
    if not verdicts:
        raise RuntimeError(f"the suite ran no scenario (exit {done.returncode}): {done.stderr[-2000:]}")
    return verdicts


def read_verdicts(folder: Path) -> dict[str, Verdict]:
    verdicts: dict[str, Verdict] = {}
    for checks_file in sorted(folder.glob("*/checks.json")):
        match = _FOLDER.match(checks_file.parent.name)
        if match is None:
            continue
        checks = json.loads(checks_file.read_text(encoding="utf-8"))
        failures = tuple(str(c.get("id")) for c in checks if c.get("status") == "FAILURE")
        warnings = tuple(str(c.get("id")) for c in checks if c.get("status") == "WARNING")
        skipped = tuple(str(c.get("id")) for c in checks if c.get("status") == "SKIPPED")
        verdicts[match["name"]] = Verdict(match["name"], failures, warnings, len(checks), skipped)
    return verdicts


def without(verdicts: Mapping[str, Verdict], scenarios: frozenset[str], checks: frozenset[str]) -> dict[str, Verdict]:
    """The verdicts less the named scenarios, and less the named checks' failures in the others."""
    return {
        name: Verdict(name, tuple(f for f in v.failures if f not in checks), v.warnings, v.checks, v.skipped)
        for name, v in verdicts.items()
        if name not in scenarios
    }


def losses(direct: Mapping[str, Verdict], through: Mapping[str, Verdict], *, only_run: bool = False) -> dict[str, str]:
    """Scenarios that pass directly and not through the other, or pass with warnings or skipped checks they
    do not have directly: name -> what failed, warned or was skipped there (`only_run`: among the scenarios
    run through the other)."""
    lost: dict[str, str] = {}
    for name, verdict in direct.items():
        if not verdict.passed or (only_run and name not in through):
            continue
        other = through.get(name)
        if other is None:
            lost[name] = "not run"
        elif not other.passed:
            lost[name] = other.short()
        elif weaker := sorted(set(other.warnings + other.skipped) - set(verdict.warnings + verdict.skipped)):
            lost[name] = "warned or skipped " + ", ".join(weaker)
    return lost


def table(columns: Mapping[str, Mapping[str, Verdict]]) -> str:
    """A Markdown table: one row per scenario, one column per run."""
    names = sorted({name for verdicts in columns.values() for name in verdicts})
    lines = ["| scenario | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for name in names:
        cells = []
        for verdicts in columns.values():
            verdict = verdicts.get(name)
            cells.append("-" if verdict is None else ("pass" if verdict.passed else "**fail**"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(urls: Sequence[str]) -> None:
    columns = {url: run_suite(url) for url in urls}
    print(table(columns))
    first = columns[urls[0]]
    for url in urls[1:]:
        for name, why in sorted(losses(first, columns[url]).items()):
            print(f"lost through {url}: {name}: {why}")


if __name__ == "__main__":
    main(sys.argv[1:])
