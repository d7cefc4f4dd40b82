"""The report on a terminal (one rich table per subject) and as JSON for CI."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from mcpcache.check.core import Report, Status

STYLE: dict[Status, str] = {"pass": "green", "fail": "bold red", "warn": "yellow", "n/a": "dim", "info": "cyan"}


def render(report: Report, console: Console) -> None:
    where = f"{report.target}" + (f" (protocol {report.protocol})" if report.protocol else "")
    console.print(Text(f"mcpcache check{' --client' if report.mode == 'client' else ''}: {where}", style="bold"))
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
    counts = report.counts()
    summary = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    if not report.subjects:
        console.print(Text("nothing was checked", style="bold red"))
    else:
        outcome = "conforms" if report.ok else "does not conform"
        console.print(Text(f"{outcome}: {summary}", style="bold green" if report.ok else "bold red"))


def to_json(report: Report) -> str:
    return json.dumps(report.to_json(), indent=2, sort_keys=False)
