"""Every rule a scenario cites is a heading of the document it names, written as that document writes it,
so the section `mcpcache check` prints can be found (and the docs cannot renumber a section unnoticed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mcpcache.check.client_rules import CLIENT_SCENARIOS
from mcpcache.check.core import PROPOSAL, Rule
from mcpcache.check.server_rules import SERVER_SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
RULES = sorted({s.rule for s in SERVER_SCENARIOS} | {s.scenario.rule for s in CLIENT_SCENARIOS}, key=Rule.cite)


def headings(doc: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^#{2,4} (.+)$", (ROOT / doc).read_text(), re.MULTILINE)}


@pytest.mark.parametrize("rule", RULES, ids=Rule.cite)
def test_a_cited_section_is_a_heading_of_its_document(rule: Rule) -> None:
    assert rule.section in headings(rule.doc)
    assert rule.proposal in headings(PROPOSAL), "the proposal's section for this rule"
