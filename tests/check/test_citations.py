"""Every rule a scenario cites is a heading of the document it names, written as that document writes it,
and of the proposal that specifies it (the core SEP, docs/extension.md, or a follow-up in docs/seps/), so
the section `mcpcache check` prints can be found and the docs cannot renumber a section unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mcpcache.check.client_rules import CLIENT_SCENARIOS
from mcpcache.check.core import PROPOSALS, Rule
from mcpcache.check.suite import SERVER_SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
RULES = sorted({s.rule for s in SERVER_SCENARIOS} | {s.scenario.rule for s in CLIENT_SCENARIOS}, key=Rule.cite)


def headings(doc: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^#{2,4} (.+)$", (ROOT / doc).read_text(), re.MULTILINE)}


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: f"{rule.proposal.key}: {rule.cite()}")
def test_a_cited_section_is_a_heading_of_its_document(rule: Rule) -> None:
    assert rule.section in headings(rule.doc)
    assert rule.proposal_section in headings(rule.proposal.doc), "the proposal's section for this rule"


def test_every_proposal_has_checks_and_each_follow_up_requires_the_core() -> None:
    for proposal in PROPOSALS:
        assert any(rule.proposal == proposal for rule in RULES), proposal.key
        text = (ROOT / proposal.doc).read_text()
        if proposal.doc != PROPOSALS[0].doc:
            assert re.search(r"^- \*\*Requires\*\*: .*extension\.md", text, re.MULTILINE), proposal.doc
