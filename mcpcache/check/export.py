"""The suite written out in the shape of the MCP conformance suite (`@modelcontextprotocol/conformance`),
from the same data the checker runs, one folder per proposal (the core SEP, docs/extension.md, and each
follow-up in docs/seps/):

- `server.json`: the proposal's server scenario: the calls made to each tool under check (`steps`, each a
  `tools/call` request with placeholders such as `<TOOL>`), and the checks it emits (`checks`: each an
  `id`, `name`, `description`, `specReferences`, the severity of a miss, the steps whose replies it reads
  and what must come back), as that suite's scenarios emit checks;
- `client-<script>.json`: a client scenario: the steps a client under test is taken through (its call, as
  which partition, and the exact results the scripted server answers with) and the checks judged on them;
- `requirements.yaml`: each requirement with the check that covers it, or why none can, in the shape of
  that suite's per-SEP files (`src/seps/sep-NNNN.yaml` there).

`python -m mcpcache.check.export DIR` writes them (docs/conformance/ holds the current ones, and
tests/check/test_export.py fails when they fall behind the scenarios). A failing `required` check is a
FAILURE there, a `recommended` one a WARNING, an `info` one INFO; `mcpcache check --checks FILE` writes a
run's results in that suite's `checks.json` form (`mcpcache.check.checks_json`).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mcpcache.check.client_rules import ClientScenario, Script, planned_result
from mcpcache.check.core import PROPOSALS, Kind, Proposal, Rule, Scenario, Side
from mcpcache.check.observations import ToolObservations
from mcpcache.check.server_rules import PROBES
from mcpcache.check.suite import CLIENT_SCENARIOS, SERVER_SCENARIOS
from mcpcache.delta import FORMAT
from mcpcache.protocol import META_KEY

SEVERITY: dict[Kind, str] = {"required": "FAILURE", "recommended": "WARNING", "info": "INFO"}

EXCLUDED: dict[str, tuple[tuple[str, str], ...]] = {
    "core": (
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
    ),
    "deltas": (
        (
            "A server MUST NOT compute a delta against an answer it sent to another partition",
            "Needs two verified callers; the checker connects as one (tests/server/test_delta_replies.py covers it)",
        ),
    ),
    "stale-serving": (
        (
            "Within staleWhileRevalidateMs a client revalidates in the background, one request per entry",
            "Background timing: when the revalidation arrives is not tied to a step a scripted server can judge",
        ),
    ),
    "key-arguments": (
        (
            "A client MUST NOT leave an argument out of its keys unless told, by a server it trusts or its user",
            "Which servers a client trusts is its own configuration; a scripted server cannot tell the cases apart",
        ),
        (
            "Declaring an argument that changes the answer is the server's promise, as ttlMs is",
            "Whether a tool reads an argument is not observable without knowing what its answers should be",
        ),
    ),
}
"""Requirements of each proposal that no check covers, and why (its requirements file lists them too)."""


def anchor(heading: str) -> str:
    """The GitHub anchor of a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def references(rule: Rule) -> list[dict[str, str]]:
    proposal = rule.proposal
    return [
        {
            "id": f"{proposal.title}: {rule.proposal_section}",
            "url": f"{proposal.doc}#{anchor(rule.proposal_section)}",
        },
        {"id": rule.cite(), "url": f"{rule.doc}#{anchor(rule.section)}"},
    ]


def camel(identifier: str) -> str:
    """A check's `name` as the suite writes them: `same-tag` -> `SameTag`."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", identifier) if part)


def check_header(scenario: Scenario[Any], side: Side) -> dict[str, Any]:
    return {
        "id": scenario.check_id(side),
        "name": camel(scenario.id),
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


def _source(proposal: Proposal) -> dict[str, str]:
    # The suite marks a scenario outside the dated spec timeline by its extension identifier.
    return {"extensionId": proposal.extension}


def server_scenario(proposal: Proposal, scenarios: Sequence[Scenario[ToolObservations]]) -> dict[str, Any]:
    """The proposal's server scenario: every probe its checks read, in the order they are made, and the checks."""
    read = {name for scenario in scenarios for name in scenario.sends}
    return {
        "name": proposal.prefix,
        "side": "server",
        "description": f"{proposal.title} ({proposal.doc}), checked on each tool of the server under test",
        "source": _source(proposal),
        "subject": "each tool that declares a cache block in tools/list, is read-only and answers with one, or "
        "is named by the operator; the mutating calls are named by the operator",
        "steps": [_request(probe.name) for probe in PROBES if probe.name in read],
        "checks": [
            {**check_header(scenario, "server"), "reads": list(scenario.sends), "mustReturn": scenario.expects}
            for scenario in scenarios
        ],
    }


def client_scenario(proposal: Proposal, script: Script, items: Sequence[ClientScenario]) -> dict[str, Any]:
    """One scripted server a client under test is run against, and the checks judged on what it did."""
    key = script.key
    steps = []
    for index, step in enumerate(script.steps, start=1):
        replies = [planned_result(key, step.partition, reply) for reply in step.replies]
        notes = ["the last reply repeats for further requests in the step"] if len(replies) > 1 else []
        if any(reply.kind in ("delta", "corrupt-delta") for reply in step.replies):
            notes.append(
                f"a delta reply goes only to a request that lists {FORMAT} under acceptDelta; any other request "
                "gets the full answer of the same edition"
            )
        for position, reply in enumerate(step.replies):
            if reply.kind == "jsonrpc-error":
                replies[position] = {"jsonrpcError": {"code": -32603, "message": "<the scripted failure>"}}
        steps.append(
            {
                "step": index,
                "clientCalls": {
                    "tool": step.tool,
                    "arguments": step.arguments(key),
                    "as": f"partition {step.partition}",
                },
                "serverReplies": replies,
                "note": "; ".join(notes),
            }
        )
    return {
        "name": f"{proposal.prefix}-client-{key}",
        "side": "client",
        "description": f"{proposal.title} ({proposal.doc}): the client under test is run against a scripted "
        f"server playing `{key}`",
        "source": _source(proposal),
        "setup": "the client under test calls the scripted server's tools through its cache, as the step's "
        "partition, and reports what its caller got",
        "steps": steps,
        "checks": [{**check_header(item.scenario, "client"), "mustDo": item.scenario.expects} for item in items],
    }


def _yaml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid YAML scalar


def requirements(proposal: Proposal) -> str:
    lines = [
        f"# {proposal.title}: the proposal's requirements and the check that covers each, in the shape of the",
        "# MCP conformance suite's per-SEP files. Generated by `python -m mcpcache.check.export`; do not edit.",
        "sep: null  # assigned when the proposal is opened",
        f"spec_url: {proposal.doc}",
    ]
    if proposal.key != "core":
        lines.append(f"# Requires: {PROPOSALS[0].title} ({PROPOSALS[0].doc})")
    lines.append("requirements:")
    for scenario in SERVER_SCENARIOS:
        if scenario.rule.proposal == proposal:
            lines += [f"  - check: {scenario.check_id('server')}", f"    text: {_yaml_string(scenario.title)}"]
    for item in CLIENT_SCENARIOS:
        if item.scenario.rule.proposal == proposal:
            lines += [
                f"  - check: {item.scenario.check_id('client')}",
                f"    text: {_yaml_string(item.scenario.title)}",
            ]
    for text, why in EXCLUDED[proposal.key]:
        lines += [f"  - text: {_yaml_string(text)}", f"    excluded: {_yaml_string(why)}"]
    return "\n".join(lines) + "\n"


def client_scripts(proposal: Proposal) -> list[tuple[Script, list[ClientScenario]]]:
    """The proposal's scripts, each with the client scenarios judged on it, in the suite's order."""
    by_key: dict[str, tuple[Script, list[ClientScenario]]] = {}
    for item in CLIENT_SCENARIOS:
        if item.scenario.rule.proposal == proposal:
            by_key.setdefault(item.script.key, (item.script, []))[1].append(item)
    return list(by_key.values())


def files() -> dict[str, str]:
    """Relative path -> content of every file the export writes."""
    out: dict[str, str] = {}

    def put(path: str, document: Mapping[str, Any]) -> None:
        out[path] = json.dumps(document, indent=2, ensure_ascii=False) + "\n"

    for proposal in PROPOSALS:
        server = [scenario for scenario in SERVER_SCENARIOS if scenario.rule.proposal == proposal]
        if server:
            put(f"{proposal.key}/server.json", server_scenario(proposal, server))
        for script, items in client_scripts(proposal):
            put(f"{proposal.key}/client-{script.key}.json", client_scenario(proposal, script, items))
        out[f"{proposal.key}/requirements.yaml"] = requirements(proposal)
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
