"""`mcpcache check`: a conformance suite for tool-result revalidation.

Against a server (`probe.check_server`), every chosen tool is called a fixed set of ways (`server_rules.PROBES`)
and each scenario of `suite.SERVER_SCENARIOS` (the core proposal's from `server_rules`, the follow-ups' from
`sep_rules`) is judged on the raw replies. Against a client, the scripted server of `scripted` plays the
scripts of `client_rules` and judges what the client sent and reported. The scenarios are data with pure
judges (`core.Scenario`); only `probe` and `scripted` do I/O. The rules are docs/protocol.md's and
docs/client.md's; docs/check.md describes each scenario.
"""

from mcpcache.check.core import Report, Scenario, Subject, Verdict

__all__ = ["Report", "Scenario", "Subject", "Verdict"]
