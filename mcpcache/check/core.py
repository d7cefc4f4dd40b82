"""The vocabulary every conformance scenario shares: rules, kinds, verdicts, and what a run adds up to.

A scenario is data: an id, a title, the rule it checks (a section of docs/protocol.md or docs/client.md,
and the section of the proposal that specifies it: the core one, docs/extension.md, or a follow-up in
docs/seps/) and its kind, plus a pure judge that turns observations into a `Verdict`. Nothing here does
I/O, so each judge is tested on hand-made observations as well as against real servers and clients.

Kinds follow the HTTP cache-tests suite: a `required` scenario that does not hold is a failure (exit
status 1); a `recommended` one is a warning (the peer is correct but misses what the rule is for);
`info` scenarios only report figures. A judge that could not try its rule says whether the rule does not
apply here (no output schema, no `_meta` of the tool's own) or applies but went unexercised, and then
what would exercise it: a run never concludes "conforms" while a required rule went unexercised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

Status = Literal["pass", "fail", "warn", "n/a", "info"]
Kind = Literal["required", "recommended", "info"]
STATUSES: tuple[Status, ...] = ("pass", "fail", "warn", "n/a", "info")

Outcome = Literal["conforms", "does not conform", "does not implement", "inconclusive", "incomplete"]
EXIT_STATUS: dict[Outcome, int] = {
    "conforms": 0,
    "does not conform": 1,
    "does not implement": 1,
    "inconclusive": 3,
    "incomplete": 3,
}
"""2 is a usage error (the CLI's). 3 says: nothing is known to be wrong, but not everything required was
shown to be right ("inconclusive": nothing at all; "incomplete": some required rules went unexercised, or
some tools the check meant to probe could not be called)."""

Stamping = Literal["seen", "none", "unknown"]
"""Whether any answer (or tools/list entry) carried a cache block; "unknown" when no call succeeded."""

Obs = TypeVar("Obs")

Side = Literal["server", "client"]


@dataclass(frozen=True)
class Proposal:
    """One of the proposals the suite checks: the core SEP or a follow-up that requires it. Its checks are
    named `<prefix>-<scenario>` (`<prefix>-client-<scenario>` for a client's), as the MCP conformance
    suite names a SEP's checks, and listed in its own requirements file (`mcpcache.check.export`)."""

    key: str
    title: str
    doc: str
    prefix: str
    extension: str
    """The extension identifier its capability is advertised under until MCP adopts it."""


CORE = Proposal(
    "core",
    "Revalidating tool results",
    "docs/extension.md",
    "tool-revalidation",
    "io.github.mcpcache/revalidation",
)
DELTAS = Proposal(
    "deltas", "Delta replies", "docs/seps/deltas.md", "tool-result-deltas", "io.github.mcpcache/revalidation"
)
STALE = Proposal(
    "stale-serving",
    "Serving stale tool results",
    "docs/seps/stale-serving.md",
    "tool-result-stale",
    "io.github.mcpcache/revalidation",
)
KEY_ARGUMENTS = Proposal(
    "key-arguments",
    "Key arguments",
    "docs/seps/key-arguments.md",
    "tool-key-arguments",
    "io.github.mcpcache/revalidation",
)
PROPOSALS: tuple[Proposal, ...] = (CORE, DELTAS, STALE, KEY_ARGUMENTS)


def check_id(proposal: Proposal, scenario: str, side: Side) -> str:
    return f"{proposal.prefix}-client-{scenario}" if side == "client" else f"{proposal.prefix}-{scenario}"


@dataclass(frozen=True)
class Rule:
    """Where a rule is written: a document of this project and the heading of its section, exactly as the
    document writes it (numbered in docs/protocol.md), and the proposal and its section that specify it
    for other implementations (tests/check/test_citations.py checks all exist)."""

    doc: str
    section: str
    proposal_section: str
    proposal: Proposal = CORE

    def cite(self) -> str:
        return f"{self.doc} § {self.section}"


PROTOCOL = "docs/protocol.md"
CLIENT = "docs/client.md"
PROPOSAL = CORE.doc

BLOCK = Rule(PROTOCOL, "1. The cache block", "The cache block")
TAG = Rule(PROTOCOL, "2. The entity tag", "Entity tags")
META_COVERED = Rule(PROTOCOL, "2.2 Peers whose tag leaves `_meta` out", "Entity tags")
REPLY = Rule(PROTOCOL, "4. The not-modified reply", "The not-modified reply")
CALL = Rule(CLIENT, "What happens on a call", "Clients")
UNMATCHED = Rule(CLIENT, "Not-modified replies that cannot be matched", "Clients")
PARTITIONS = Rule(CLIENT, "Partitions and sharing", "Clients")
DELTA = Rule(PROTOCOL, "11. Delta replies", "The delta reply", DELTAS)
DELTA_CLIENT = Rule(PROTOCOL, "11. Delta replies", "Clients", DELTAS)
STALE_BLOCK = Rule(PROTOCOL, "12. Serving stale", "The stale windows", STALE)
STALE_CLIENT = Rule(PROTOCOL, "12. Serving stale", "Clients", STALE)
KEY_DECLARATION = Rule(PROTOCOL, "8.1 Key arguments", "The declaration", KEY_ARGUMENTS)
KEY_CLIENT = Rule(PROTOCOL, "8.1 Key arguments", "Clients", KEY_ARGUMENTS)


@dataclass(frozen=True)
class Judged:
    """What a judge found: it held, it did not, or it could not be tried (with why, in every case)."""

    held: bool | None
    """None: not tried (the detail says why)."""
    detail: str
    needs: str = ""
    """Not tried although the rule applies: what would exercise it (a `--mutate` call that changes the
    answer, say). Empty when the rule does not apply here, or was tried."""

    @classmethod
    def ok(cls, detail: str) -> Judged:
        return cls(True, detail)

    @classmethod
    def broken(cls, detail: str) -> Judged:
        return cls(False, detail)

    @classmethod
    def not_applicable(cls, detail: str) -> Judged:
        """The rule does not apply here (the tool has no output schema, its answers no `_meta` of their own)."""
        return cls(None, detail)

    @classmethod
    def untried(cls, detail: str, needs: str) -> Judged:
        """The rule applies but this run could not exercise it; `needs`: what would."""
        return cls(None, detail, needs)


@dataclass(frozen=True)
class Scenario(Generic[Obs]):
    """One row of the suite: what it checks, where the rule is written, and how it is judged."""

    id: str
    title: str
    rule: Rule
    kind: Kind
    judge: Callable[[Obs], Judged] = field(repr=False, compare=False)
    expects: str = ""
    """What must come back (or, for a client, what it must do), in words: the scenario as another test
    suite would write it (`mcpcache.check.export`)."""
    sends: tuple[str, ...] = ()
    """A server scenario: the probes (`server_rules.PROBES`, by name) whose replies its judge reads."""

    def verdict(self, observations: Obs) -> Verdict:
        return Verdict.of(self, self.judge(observations))

    def check_id(self, side: Side) -> str:
        """The id of its check in the MCP conformance suite's shape: `<proposal prefix>-<id>`, with `client-`
        before the id for a client's."""
        return check_id(self.rule.proposal, self.id, side)


@dataclass(frozen=True)
class Verdict:
    """A scenario's outcome against one subject (a tool of a server, or a client)."""

    scenario: str
    title: str
    rule: str
    kind: Kind
    status: Status
    detail: str
    needs: str = ""
    """For an n/a verdict of a rule that applies: what would exercise it."""
    proposal: Proposal = CORE

    @classmethod
    def of(cls, scenario: Scenario[Any], judged: Judged) -> Verdict:
        return cls(
            scenario.id,
            scenario.title,
            scenario.rule.cite(),
            scenario.kind,
            status_of(scenario.kind, judged),
            judged.detail,
            judged.needs if judged.held is None else "",
            scenario.rule.proposal,
        )

    @property
    def unexercised(self) -> bool:
        """A rule that applies, left untried."""
        return self.status == "n/a" and bool(self.needs)

    def to_json(self) -> dict[str, str]:
        out = {
            "scenario": self.scenario,
            "title": self.title,
            "rule": self.rule,
            "proposal": self.proposal.key,
            "kind": self.kind,
            "status": self.status,
            "detail": self.detail,
        }
        if self.needs:
            out["needs"] = self.needs
        return out


def status_of(kind: Kind, judged: Judged) -> Status:
    if judged.held is None:
        return "n/a"
    if kind == "info":
        return "info"
    if judged.held:
        return "pass"
    return "fail" if kind == "required" else "warn"


@dataclass(frozen=True)
class Subject:
    """What a group of verdicts is about (a tool and its arguments, or the client under test)."""

    name: str
    arguments: Mapping[str, Any] | None
    verdicts: tuple[Verdict, ...]
    note: str = ""
    revalidated: bool = True
    """A server's tool: its answer carried a tag and the conditional calls were made with it. False for
    a tool answered with a block but no tag (nothing to revalidate), or one that failed outright."""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "arguments": dict(self.arguments) if self.arguments is not None else None,
            "note": self.note,
            "revalidated": self.revalidated,
            "verdicts": [v.to_json() for v in self.verdicts],
        }


@dataclass(frozen=True)
class Report:
    """A whole run: what was checked, the verdicts, and what was left out (with why)."""

    mode: Side
    target: str
    protocol: str | None
    subjects: tuple[Subject, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    """(tool, why it was not probed)."""
    stamping: Stamping = "seen"
    unchecked: tuple[str, ...] = ()
    """Tools the check meant to probe (they declare a cache block, or are read-only, or were named) but could
    not: their calls failed, answered an error, or need arguments nobody gave. Their `skipped` entry says how
    to add them."""

    def counts(self) -> dict[Status, int]:
        counted: dict[Status, int] = dict.fromkeys(STATUSES, 0)
        for verdict in self.verdicts():
            counted[verdict.status] += 1
        return counted

    def verdicts(self) -> Iterable[Verdict]:
        for subject in self.subjects:
            yield from subject.verdicts

    @property
    def outcome(self) -> Outcome:
        """What the run shows. A server conforms only if at least one tool with a tag went through the
        revalidation scenarios (blocks without tags, or no tool called at all, show nothing either way),
        every required rule that applies was exercised, and every tool the check meant to probe was."""
        if self.mode == "server" and self.stamping == "none":
            return "does not implement"
        if self.counts()["fail"]:
            return "does not conform"
        if self.mode == "client" and not self.subjects:
            return "does not conform"
        if self.mode == "server" and not any(s.revalidated for s in self.subjects):
            return "inconclusive"
        if self.unexercised() or self.unchecked:
            return "incomplete"
        return "conforms"

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.outcome]

    @property
    def ok(self) -> bool:
        return self.outcome == "conforms"

    def untried(self) -> list[str]:
        """Scenarios that could not be tried on any subject (n/a everywhere), in the suite's order."""
        seen: dict[str, bool] = {}
        for verdict in self.verdicts():
            seen[verdict.scenario] = seen.get(verdict.scenario, False) or verdict.status != "n/a"
        return [scenario for scenario, tried in seen.items() if not tried]

    def unexercised(self) -> list[tuple[str, str]]:
        """Required rules tried on no subject though they apply to one: (scenario, what would exercise it),
        in the suite's order. A rule counts as exercised when any subject tried it."""
        tried: set[str] = set()
        needs: dict[str, list[str]] = {}
        for verdict in self.verdicts():
            if verdict.kind != "required":
                continue
            if verdict.status != "n/a":
                tried.add(verdict.scenario)
            elif verdict.needs:
                wanted = needs.setdefault(verdict.scenario, [])
                if verdict.needs not in wanted:
                    wanted.append(verdict.needs)
        return [(scenario, " or ".join(wanted)) for scenario, wanted in needs.items() if scenario not in tried]

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "target": self.target,
            "protocol": self.protocol,
            "outcome": self.outcome,
            "exitStatus": self.exit_status,
            "ok": self.ok,
            "stamping": self.stamping,
            "counts": self.counts(),
            "unexercised": [{"scenario": scenario, "needs": needs} for scenario, needs in self.unexercised()],
            "unchecked": list(self.unchecked),
            "subjects": [s.to_json() for s in self.subjects],
            "skipped": [{"name": name, "why": why} for name, why in self.skipped],
        }


def judge_all(scenarios: Sequence[Scenario[Obs]], observations: Obs) -> tuple[Verdict, ...]:
    return tuple(scenario.verdict(observations) for scenario in scenarios)
