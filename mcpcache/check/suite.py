"""Every scenario of the suite, in the order the report shows them: the core proposal's, then each
follow-up's (docs/seps/), which require it."""

from __future__ import annotations

from mcpcache.check.client_rules import CLIENT_SCENARIOS, ClientScenario
from mcpcache.check.core import Scenario
from mcpcache.check.observations import ToolObservations
from mcpcache.check.sep_rules import DELTA_SCENARIOS, KEY_ARGUMENT_SCENARIOS, STALE_SCENARIOS
from mcpcache.check.server_rules import CORE_SCENARIOS

__all__ = ["CLIENT_SCENARIOS", "SERVER_SCENARIOS", "ClientScenario"]

SERVER_SCENARIOS: tuple[Scenario[ToolObservations], ...] = (
    *CORE_SCENARIOS,
    *DELTA_SCENARIOS,
    *STALE_SCENARIOS,
    *KEY_ARGUMENT_SCENARIOS,
)
