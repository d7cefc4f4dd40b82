"""The suite written out in the shape of the MCP conformance suite's scenarios, from the same data the
checker runs: one JSON file per scenario (what is sent, what must come back, which section of the
proposal it checks) and a requirements file in the shape of that suite's per-SEP YAML (each requirement's
text and the check that covers it, or why none can).

`python -m mcpcache.check.export DIR` writes them (docs/conformance/ holds the current ones, and
tests/check/test_export.py fails when they fall behind the scenarios). Check ids are
`tool-revalidation-<scenario>` and `tool-revalidation-client-<scenario>`; a failing `required` scenario
is a FAILURE there, a `recommended` one a WARNING, an `info` one INFO.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mcpcache.check.client_rules import CLIENT_SCENARIOS, TOOL, ClientScenario, planned_result
from mcpcache.check.core import PROPOSAL, Kind, Rule, Scenario
from mcpcache.check.observations import ToolObservations
from mcpcache.check.server_rules import PROBES, SERVER_SCENARIOS
from mcpcache.delta import FORMAT
from mcpcache.protocol import META_KEY

SEVERITY: dict[Kind, str] = {"required": "FAILURE", "recommended": "WARNING", "info": "INFO"}

EXCLUDED: tuple[tuple[str, str], ...] = (
    (
        "A tag derived from a validator MUST be read before the tool body runs",
        "Server-side ordering; a race between the body and the validator is not observable from one client",
    ),
    (
        "Servers MUST NOT rely on cacheScope for access control",
        "Server-side access control; not observable through protocol messages",
    ),
    (
        "In a store shared by several principals the key MUST be a collision-resistant digest",
        "Client storage; not observable on the wire",
    ),
    (
        "A server MUST NOT compute a delta against an answer it sent to another partition",
        "Needs two verified callers; the checker connects as one (tests/server/test_delta_replies.py covers it)",
    ),
    (
        "An entry whose freshness was ended by a write is never served stale",
        "Serving stale is specified; its checks come with the reference implementation",
    ),
)
"""Requirements of the proposal that no scenario checks, and why (the requirements file lists them too)."""


def anchor(heading: str) -> str:
    """The GitHub anchor of a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def references(rule: Rule) -> list[dict[str, str]]:
    return [
        {"id": f"Proposal: {rule.proposal}", "url": f"{PROPOSAL}#{anchor(rule.proposal)}"},
        {"id": rule.cite(), "url": f"{rule.doc}#{anchor(rule.section)}"},
    ]


def _header(scenario: Scenario[Any], side: str) -> dict[str, Any]:
    prefix = "tool-revalidation-" + ("client-" if side == "client" else "")
    return {
        "name": prefix + scenario.id,
        "side": side,
        "description": scenario.title,
        "kind": scenario.kind,
        "severityWhenNotMet": SEVERITY[scenario.kind],
        "specReferences": references(scenario.rule),
    }


def _request(probe_name: str) -> dict[str, Any]:
    probe = next(p for p in PROBES if p.name == probe_name)
    params: dict[str, Any] = {
        "name": "<TOOL>",
        "arguments": "<ARGUMENTS the input schema refuses>" if probe.invalid else "<ARGUMENTS>",
    }
    if probe.shown is not None:
        block: dict[str, Any] = {"etag": probe.shown}  # as the probe sends it, malformed tags included
        if probe.accept_delta:
            block["acceptDelta"] = list(probe.accept_delta)
        params["_meta"] = {META_KEY: block}
    step: dict[str, Any] = {"step": probe.name, "purpose": probe.purpose}
    if probe.phase == "after":
        step["after"] = "the mutating calls the operator names (for example an edit of what <TOOL> reads)"
    step["request"] = {"method": "tools/call", "params": params}
    return step


def server_scenario(scenario: Scenario[ToolObservations]) -> dict[str, Any]:
    return {
        **_header(scenario, "server"),
        "subject": "each tool that declares a cache block in tools/list or is read-only and answers with one",
        "sends": [_request(name) for name in scenario.sends],
        "mustReturn": scenario.expects,
    }


def client_scenario(item: ClientScenario) -> dict[str, Any]:
    key = item.script.key
    steps = []
    for index, step in enumerate(item.script.steps, start=1):
        replies = [planned_result(key, step.partition, reply) for reply in step.replies]
        notes = ["the last reply repeats for further requests in the step"] if len(replies) > 1 else []
        if any(reply.kind in ("delta", "corrupt-delta") for reply in step.replies):
            notes.append(
                f"a delta reply goes only to a request that lists {FORMAT} under acceptDelta; any other request "
                "gets the full answer of the same edition"
            )
        steps.append(
            {
                "step": index,
                "clientCalls": {"tool": TOOL, "arguments": {"key": key}, "as": f"partition {step.partition}"},
                "serverReplies": replies,
                "note": "; ".join(notes),
            }
        )
    return {
        **_header(item.scenario, "client"),
        "setup": "the client under test calls the scripted server's `read` tool through its cache, as the "
        "step's partition, and reports what its caller got",
        "steps": steps,
        "mustDo": item.scenario.expects,
    }


def _yaml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid YAML scalar


def requirements() -> str:
    lines = [
        "# The proposal's requirements and the check that covers each, in the shape of the MCP conformance",
        "# suite's per-SEP files. Generated by `python -m mcpcache.check.export`; do not edit.",
        "sep: null  # assigned when the proposal is opened",
        f"spec_url: {PROPOSAL}",
        "requirements:",
    ]
    for scenario in SERVER_SCENARIOS:
        lines += [f"  - check: tool-revalidation-{scenario.id}", f"    text: {_yaml_string(scenario.title)}"]
    for item in CLIENT_SCENARIOS:
        lines += [
            f"  - check: tool-revalidation-client-{item.scenario.id}",
            f"    text: {_yaml_string(item.scenario.title)}",
        ]
    for text, why in EXCLUDED:
        lines += [f"  - text: {_yaml_string(text)}", f"    excluded: {_yaml_string(why)}"]
    return "\n".join(lines) + "\n"


def files() -> dict[str, str]:
    """Relative path -> content of every file the export writes."""
    out: dict[str, str] = {}

    def put(path: str, document: Mapping[str, Any]) -> None:
        out[path] = json.dumps(document, indent=2, ensure_ascii=False) + "\n"

    for scenario in SERVER_SCENARIOS:
        put(f"server/{scenario.id}.json", server_scenario(scenario))
    for item in CLIENT_SCENARIOS:
        put(f"client/{item.scenario.id}.json", client_scenario(item))
    out["requirements.yaml"] = requirements()
    return out


def export(directory: Path) -> list[Path]:
    written = []
    for relative, content in files().items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/conformance")
    for path in export(target):
        print(path)
