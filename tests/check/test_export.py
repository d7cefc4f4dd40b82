"""docs/conformance/ is the suite in the shape of the MCP conformance suite (scenarios that emit checks with
ids and spec references, one requirements file per proposal), generated from the scenarios the checker runs
(mcpcache/check/export.py): it must be what the export writes today, and every check must say what it reads
and what must come back. `mcpcache check --checks FILE` writes a run's results as that suite's checks.json
(`CHECKS_FILE`, whose shape tests/check/test_cli.py also checks on a real run).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema

from mcpcache.check.checks_json import conformance_checks
from mcpcache.check.client_rules import CLIENT_SCENARIOS
from mcpcache.check.core import PROPOSALS, Judged, Report, Scenario, Subject
from mcpcache.check.export import files
from mcpcache.check.server_rules import PROBES
from mcpcache.check.suite import SERVER_SCENARIOS

CONFORMANCE = Path(__file__).resolve().parents[2] / "docs" / "conformance"

CONFORMANCE_CHECK = {
    # The suite's `ConformanceCheck` (src/types.ts of modelcontextprotocol/conformance, 0.2.0-alpha.12), which
    # its runner writes as `JSON.stringify(checks, null, 2)` to checks.json: an array of these.
    "type": "object",
    "required": ["id", "name", "description", "status", "timestamp"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "description": {"type": "string"},
        "status": {"enum": ["SUCCESS", "FAILURE", "WARNING", "SKIPPED", "INFO"]},
        "timestamp": {"type": "string", "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"},
        "specReferences": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id"],
                "additionalProperties": False,
                "properties": {"id": {"type": "string"}, "url": {"type": "string"}},
            },
        },
        "details": {"type": "object"},
        "metadata": {"type": "object"},
        "errorMessage": {"type": "string"},
        "logs": {"type": "array", "items": {"type": "string"}},
    },
}
CHECKS_FILE = {"type": "array", "items": CONFORMANCE_CHECK}


def test_the_checked_in_files_are_what_the_export_writes() -> None:
    on_disk = {
        str(path.relative_to(CONFORMANCE)): path.read_text(encoding="utf-8")
        for path in CONFORMANCE.rglob("*")
        if path.is_file() and path.name != "README.md"
    }
    assert on_disk == files(), "regenerate with: python -m mcpcache.check.export docs/conformance"


def test_each_proposal_has_a_scenario_whose_checks_have_ids_spec_references_and_what_must_come_back() -> None:
    written = files()
    probes = {probe.name for probe in PROBES}
    emitted: dict[str, str] = {}
    for proposal in PROPOSALS:
        requirements = written[f"{proposal.key}/requirements.yaml"]
        assert f"spec_url: {proposal.doc}\n" in requirements
        server = json.loads(written[f"{proposal.key}/server.json"])
        assert server["name"] == proposal.prefix
        assert server["source"] == {"extensionId": proposal.extension}
        steps = {step["step"] for step in server["steps"]}
        for check in server["checks"]:
            scenario = next(s for s in SERVER_SCENARIOS if s.check_id("server") == check["id"])
            assert scenario.rule.proposal == proposal
            assert check["mustReturn"] == scenario.expects != ""
            assert set(check["reads"]) <= steps <= probes
            assert check["specReferences"][0]["url"].startswith(proposal.doc + "#")
            emitted[check["id"]] = proposal.key
        for path, text in written.items():
            if path.startswith(f"{proposal.key}/client-"):
                for check in json.loads(text)["checks"]:
                    assert check["mustDo"] != ""
                    emitted[check["id"]] = proposal.key
    # Every check is in exactly one proposal's requirements file, and every scenario emits one.
    every = {s.check_id("server") for s in SERVER_SCENARIOS} | {i.scenario.check_id("client") for i in CLIENT_SCENARIOS}
    assert set(emitted) == every
    for check, key in emitted.items():
        assert f"  - check: {check}\n" in written[f"{key}/requirements.yaml"]


def _report() -> Report:
    def judged(held: bool | None, needs: str = "") -> Any:
        return lambda _: Judged(held, f"held={held}", needs)

    scenarios = {s.id: s for s in SERVER_SCENARIOS}
    verdicts = (
        Scenario("same-tag", "t", scenarios["same-tag"].rule, "required", judged(True)).verdict(None),
        Scenario("meta", "m", scenarios["meta"].rule, "required", judged(None, "a --mutate call")).verdict(None),
        Scenario("weak-compare", "w", scenarios["weak-compare"].rule, "recommended", judged(False)).verdict(None),
        Scenario("delta", "d", scenarios["delta"].rule, "required", judged(False)).verdict(None),
        Scenario("wire", "s", scenarios["wire"].rule, "info", judged(True)).verdict(None),
    )
    return Report("server", "http://127.0.0.1:1/mcp", "2026-07-28", (Subject("read", {"path": "a"}, verdicts),))


def test_checks_json_has_the_suites_shape_and_ids() -> None:
    checks = conformance_checks(_report(), datetime(2026, 12, 3, 15, 0, tzinfo=UTC))
    jsonschema.validate(checks, CHECKS_FILE)
    assert [(c["id"], c["status"]) for c in checks] == [
        ("tool-revalidation-same-tag", "SUCCESS"),
        ("tool-revalidation-meta", "SKIPPED"),
        ("tool-revalidation-weak-compare", "WARNING"),
        ("tool-result-deltas-delta", "FAILURE"),
        ("tool-revalidation-wire", "INFO"),
    ]
    assert checks[0]["timestamp"] == "2026-12-03T15:00:00.000Z"
    assert checks[1]["details"]["needs"] == "a --mutate call"
    assert checks[3]["errorMessage"] == "held=False"
    assert checks[3]["specReferences"][0]["url"] == "docs/seps/deltas.md#the-delta-reply"
    assert {c["details"]["subject"] for c in checks} == {"read"}
