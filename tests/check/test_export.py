"""docs/conformance/ is the suite in the shape of the MCP conformance suite's scenarios, generated from the
scenarios the checker runs (mcpcache/check/export.py): it must be what the export writes today, and
every scenario must say what it sends and what must come back."""

from __future__ import annotations

import json
from pathlib import Path

from mcpcache.check.client_rules import CLIENT_SCENARIOS
from mcpcache.check.export import files
from mcpcache.check.server_rules import PROBES, SERVER_SCENARIOS

CONFORMANCE = Path(__file__).resolve().parents[2] / "docs" / "conformance"


def test_the_checked_in_files_are_what_the_export_writes() -> None:
    on_disk = {
        str(path.relative_to(CONFORMANCE)): path.read_text(encoding="utf-8")
        for path in CONFORMANCE.rglob("*")
        if path.is_file() and path.name != "README.md"
    }
    assert on_disk == files(), "regenerate with: python -m mcpcache.check.export docs/conformance"


def test_one_file_per_scenario_saying_what_is_sent_and_what_must_come_back() -> None:
    written = files()
    probes = {probe.name for probe in PROBES}
    for scenario in SERVER_SCENARIOS:
        document = json.loads(written[f"server/{scenario.id}.json"])
        assert document["mustReturn"] == scenario.expects != ""
        assert [step["step"] for step in document["sends"]] == list(scenario.sends)
        assert set(scenario.sends) <= probes
        assert document["specReferences"][0]["url"].startswith("docs/extension.md#")
    for item in CLIENT_SCENARIOS:
        document = json.loads(written[f"client/{item.scenario.id}.json"])
        assert document["mustDo"] == item.scenario.expects != ""
        assert len(document["steps"]) == len(item.script.steps)
    requirements = written["requirements.yaml"]
    for scenario in SERVER_SCENARIOS:
        assert f"check: tool-revalidation-{scenario.id}\n" in requirements
    for item in CLIENT_SCENARIOS:
        assert f"check: tool-revalidation-client-{item.scenario.id}\n" in requirements
