"""A run's results in the MCP conformance suite's `checks.json` form (`mcpcache check --checks FILE`).

That suite writes, for each scenario it runs, `checks.json`: a JSON array of checks, each `{id, name,
description, status, timestamp, specReferences?, details?, errorMessage?, logs?}` with `status` one of
SUCCESS, FAILURE, WARNING, SKIPPED, INFO (its `ConformanceCheck` type), indented by two spaces. Its tools
(the tier check, expected-failure baselines, traceability) read checks by `id` and `status`, and a check
id may repeat within a run (one per tool here, as the suite's own scenarios repeat one per request).

Each verdict becomes one check: the id the exported scenarios give it (`mcpcache.check.export`), `pass`
SUCCESS, `fail` FAILURE, `warn` WARNING, `info` INFO, `n/a` SKIPPED; `details` names the tool and its
arguments, and for a rule that applies but went unexercised, what would exercise it (`needs`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from mcpcache.check.core import Report, Status, Verdict, check_id
from mcpcache.check.export import camel, references
from mcpcache.check.suite import CLIENT_SCENARIOS, SERVER_SCENARIOS

STATUS: dict[Status, str] = {
    "pass": "SUCCESS",
    "fail": "FAILURE",
    "warn": "WARNING",
    "n/a": "SKIPPED",
    "info": "INFO",
}


def _timestamp(moment: datetime) -> str:
    """As ECMAScript's `Date.prototype.toISOString` writes it: UTC, milliseconds, `Z`."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def conformance_checks(report: Report, moment: datetime | None = None) -> list[dict[str, Any]]:
    """Every verdict of `report` as a check of the conformance suite, in the report's order."""
    at = _timestamp(moment or datetime.now(UTC))
    rules = {
        scenario.id: scenario.rule
        for scenario in (SERVER_SCENARIOS if report.mode == "server" else [i.scenario for i in CLIENT_SCENARIOS])
    }
    checks: list[dict[str, Any]] = []
    for subject in report.subjects:
        for verdict in subject.verdicts:
            checks.append(_check(report, subject.name, subject.arguments, verdict, rules, at))
    return checks


def _check(
    report: Report, subject: str, arguments: Any, verdict: Verdict, rules: dict[str, Any], at: str
) -> dict[str, Any]:
    details: dict[str, Any] = {
        "subject": subject,
        "target": report.target,
        "protocolVersion": report.protocol,
        "scenario": verdict.scenario,
        "kind": verdict.kind,
        "detail": verdict.detail,
    }
    if arguments is not None:
        details["arguments"] = dict(arguments)
    if verdict.needs:
        details["needs"] = verdict.needs
    check: dict[str, Any] = {
        "id": check_id(verdict.proposal, verdict.scenario, report.mode),
        "name": camel(verdict.scenario),
        "description": verdict.title,
        "status": STATUS[verdict.status],
        "timestamp": at,
        "specReferences": references(rules[verdict.scenario]),
        "details": details,
    }
    if verdict.status in ("fail", "warn"):
        check["errorMessage"] = verdict.detail
    return check


def to_checks_json(report: Report, moment: datetime | None = None) -> str:
    """The file's text, as the suite writes it (`JSON.stringify(checks, null, 2)`)."""
    return json.dumps(conformance_checks(report, moment), indent=2, ensure_ascii=False)
