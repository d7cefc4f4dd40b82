"""The report on a terminal (one rich table per subject) and as JSON for CI."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from mcpcache.check.core import Report, Status

STYLE: dict[Status, str] = {"pass": "green", "fail": "bold red", "warn": "yellow", "n/a": "dim", "info": "cyan"}


def not_implemented_line(report: Report) -> str:
    called = sorted(
        {s.name for s in report.subjects} | {name for name, why in report.skipped if "no cache block" in why}
    )
    return "does not implement tool-result caching: no answer carried a cache block" + (
        f" ({', '.join(called)} answered without one)" if called else ""
    )


def outcome_line(report: Report) -> tuple[str, str]:
    """The closing line and its style. It says "conforms" only when every required rule that applies was
    exercised; otherwise it names the rules left unexercised and what would exercise each."""
    counts = report.counts()
    summary = ", ".join(f"{n} {status}" for status, n in counts.items() if n) or "nothing judged"
    outcome = report.outcome
    if outcome == "does not implement":
        return "does not implement tool-result caching", "bold red"
    if outcome == "inconclusive":
        untagged = [s.name for s in report.subjects if not s.revalidated]
        why = "no tool whose answers carry an entity tag could be checked"
        if untagged:
            why += f" ({', '.join(untagged)}: no tag to revalidate)"
        return f"inconclusive: {why}; add the calls named above ({summary})", "bold yellow"
    if outcome == "does not conform":
        return f"{outcome}: {summary}", "bold red"
    if outcome == "incomplete":
        parts = []
        unexercised = report.unexercised()
        if unexercised:
            rules = "; ".join(f"{scenario} (needs {needs})" for scenario, needs in unexercised)
            parts.append(f"not exercised: {rules}")
        if report.unchecked:
            parts.append(f"not checked: {', '.join(report.unchecked)} (see above for what to add)")
        return f"incomplete: nothing failed ({summary}), but {'; '.join(parts)}", "bold yellow"
    return f"conforms: {summary}", "bold green"


def render(report: Report, console: Console) -> None:
    where = f"{report.target}" + (f" (protocol {report.protocol})" if report.protocol else "")
    console.print(Text(f"mcpcache check{' --client' if report.mode == 'client' else ''}: {where}", style="bold"))
    if report.outcome == "does not implement":
        console.print(Text(not_implemented_line(report), style="bold red"), soft_wrap=True)
    for subject in report.subjects:
        title = subject.name
        if subject.arguments is not None:
            title += " " + json.dumps(dict(subject.arguments), sort_keys=True)
        table = Table(title=title, title_justify="left", show_lines=True, expand=True)
        table.add_column("scenario", no_wrap=True)
        table.add_column("what it checks (the rule)", ratio=2)
        table.add_column("result", no_wrap=True)
        table.add_column("detail", overflow="fold", ratio=3)
        for verdict in subject.verdicts:
            checks = Text(verdict.title)
            checks.append(f"\n{verdict.rule}", style="dim")
            table.add_row(verdict.scenario, checks, Text(verdict.status, style=STYLE[verdict.status]), verdict.detail)
        console.print(table)
        if subject.note:
            console.print(subject.note)
    for name, why in report.skipped:
        console.print(Text(f"not checked: {name}: {why}", style="dim"))
    line, style = outcome_line(report)
    console.print(Text(line, style=style))


def to_json(report: Report) -> str:
    return json.dumps(report.to_json(), indent=2, sort_keys=False)
