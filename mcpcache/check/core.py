"""The vocabulary every conformance scenario shares: rules, kinds, verdicts, and what a run adds up to.

A scenario is data: an id, a title, the rule it checks (a section of docs/protocol.md or docs/client.md)
and its kind, plus a pure judge that turns observations into a `Verdict`. Nothing here does I/O, so
each judge is tested on hand-made observations as well as against real servers and clients.

Kinds follow the HTTP cache-tests suite: a `required` scenario that does not hold is a failure (exit
status 1); a `recommended` one is a warning (the peer is correct but misses what the rule is for);
`info` scenarios only report figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

Status = Literal["pass", "fail", "warn", "n/a", "info"]
Kind = Literal["required", "recommended", "info"]
STATUSES: tuple[Status, ...] = ("pass", "fail", "warn", "n/a", "info")

Outcome = Literal["conforms", "does not conform", "does not implement", "inconclusive"]
EXIT_STATUS: dict[Outcome, int] = {"conforms": 0, "does not conform": 1, "does not implement": 1, "inconclusive": 3}
"""2 is a usage error (the CLI's). 3 says: nothing is known to be wrong, but nothing was shown to be right."""

Stamping = Literal["seen", "none", "unknown"]
"""Whether any answer (or tools/list entry) carried a cache block; "unknown" when no call succeeded."""

Obs = TypeVar("Obs")


@dataclass(frozen=True)
class Rule:
    """Where a rule is written: a document of this project and the heading of its section, exactly as the
    document writes it (numbered in docs/protocol.md), and the section of the proposal (docs/extension.md)
    that specifies it for other implementations (tests/check/test_citations.py checks both exist)."""

    doc: str
    section: str
    proposal: str

    def cite(self) -> str:
        return f"{self.doc} § {self.section}"


PROTOCOL = "docs/protocol.md"
CLIENT = "docs/client.md"
PROPOSAL = "docs/extension.md"

BLOCK = Rule(PROTOCOL, "1. The cache block", "The cache block")
TAG = Rule(PROTOCOL, "2. The entity tag", "Entity tags")
META_COVERED = Rule(PROTOCOL, "2.2 Peers whose tag leaves `_meta` out", "Entity tags")
REPLY = Rule(PROTOCOL, "4. The not-modified reply", "The not-modified reply")
DELTA = Rule(PROTOCOL, "11. Delta replies", "Delta replies")
CALL = Rule(CLIENT, "What happens on a call", "Clients")
UNMATCHED = Rule(CLIENT, "Not-modified replies that cannot be matched", "Clients")
PARTITIONS = Rule(CLIENT, "Partitions and sharing", "Clients")


@dataclass(frozen=True)
class Judged:
    """What a judge found: it held, it did not, or it could not be tried (with why, in every case)."""

    held: bool | None
    """None: not applicable."""
    detail: str

    @classmethod
    def ok(cls, detail: str) -> Judged:
        return cls(True, detail)

    @classmethod
    def broken(cls, detail: str) -> Judged:
        return cls(False, detail)

    @classmethod
    def not_applicable(cls, detail: str) -> Judged:
        return cls(None, detail)


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


@dataclass(frozen=True)
class Verdict:
    """A scenario's outcome against one subject (a tool of a server, or a client)."""

    scenario: str
    title: str
    rule: str
    kind: Kind
    status: Status
    detail: str

    @classmethod
    def of(cls, scenario: Scenario[Any], judged: Judged) -> Verdict:
        return cls(
            scenario.id,
            scenario.title,
            scenario.rule.cite(),
            scenario.kind,
            status_of(scenario.kind, judged),
            judged.detail,
        )

    def to_json(self) -> dict[str, str]:
        return {
            "scenario": self.scenario,
            "title": self.title,
            "rule": self.rule,
            "kind": self.kind,
            "status": self.status,
            "detail": self.detail,
        }


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

    mode: Literal["server", "client"]
    target: str
    protocol: str | None
    subjects: tuple[Subject, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    """(tool, why it was not probed)."""
    stamping: Stamping = "seen"

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
        revalidation scenarios: blocks without tags, or no tool called at all, show nothing either way."""
        if self.mode == "server" and self.stamping == "none":
            return "does not implement"
        if self.counts()["fail"]:
            return "does not conform"
        if self.mode == "client":
            return "conforms" if self.subjects else "does not conform"
        return "conforms" if any(s.revalidated for s in self.subjects) else "inconclusive"

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
            "subjects": [s.to_json() for s in self.subjects],
            "skipped": [{"name": name, "why": why} for name, why in self.skipped],
        }


def judge_all(scenarios: Sequence[Scenario[Obs]], observations: Obs) -> tuple[Verdict, ...]:
    return tuple(scenario.verdict(observations) for scenario in scenarios)
