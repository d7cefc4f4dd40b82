"""Which arguments name a tool's answer, as the client cache decides it (docs/client.md, "Key arguments").

In order: the cache's own per-tool override (`CacheSettings(key_arguments=..., ignore_arguments=...)`), then, only
when the cache trusts the server (`trusted=True`, the rule that already believes its readOnlyHint), the
tool's declaration in `tools/list`; else every argument. A declaration that cannot be read is not used (the
tool is keyed on every argument) and is warned about once: a misread one could only ever share too little.
The server's declarations are listed once per server and remembered until the tools change.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from mcpcache.client.contracts import Declaring
from mcpcache.client.keys import CallIdentity
from mcpcache.key_arguments import KeyArguments, MalformedKeyArguments, key_arguments_of

__all__ = ["KeyRules", "overrides"]

logger = logging.getLogger("mcpcache.client")

_MOST_SERVERS = 1024


def overrides(
    key_arguments: Mapping[str, Iterable[str]] | None, ignore_arguments: Mapping[str, Iterable[str]] | None
) -> dict[str, KeyArguments]:
    """The per-tool rules a `ToolCache` is given, checked now (a bad one raises here, not at a call)."""
    rules: dict[str, KeyArguments] = {}
    for given, make in ((key_arguments, KeyArguments.keep), (ignore_arguments, KeyArguments.drop)):
        for tool, names in (given or {}).items():
            if not isinstance(tool, str):
                raise TypeError(f"tool names are strings, not {tool!r}")
            if tool in rules:
                raise ValueError(f"tool {tool!r}: give key_arguments or ignore_arguments, not both")
            if isinstance(names, str):
                raise TypeError(f"tool {tool!r}: give a list of argument names, not the string {names!r}")
            rules[tool] = make(names)
    return rules


class KeyRules:
    """The rule each tool's calls are keyed by, for one `ToolCache`."""

    def __init__(self, own: Mapping[str, KeyArguments], *, trusted: bool) -> None:
        self.own = dict(own)
        self.trusted = trusted
        self._declared: dict[str, dict[str, KeyArguments]] = {}
        """By server id: the rules its `tools/list` declared, by tool (only readable, non-trivial ones)."""
        self._warned: set[tuple[str, str]] = set()

    def forget(self) -> None:
        """The tools changed (a `list_changed` notification): list the declarations again."""
        self._declared.clear()

    def known(self, server_id: str, tool: str) -> KeyArguments | None:
        """The rule for `tool` without asking anyone: the override, or a declaration listed before."""
        own = self.own.get(tool)
        if own is not None:
            return own
        return self._declared.get(server_id, {}).get(tool) if self.trusted else None

    async def rule(self, conn: Declaring, tool: str) -> KeyArguments | None:
        own = self.own.get(tool)
        if own is not None or not self.trusted:
            return own
        declared = self._declared.get(conn.server_id)
        if declared is None:
            blocks = await conn.declarations()
            if blocks is None:
                return None  # not listed (it failed): every argument, and listed again next time
            declared = self._read(conn.server_id, blocks)
            if len(self._declared) >= _MOST_SERVERS:
                self._declared.clear()
            self._declared[conn.server_id] = declared
        return declared.get(tool)

    def _read(self, server_id: str, blocks: Mapping[str, Any]) -> dict[str, KeyArguments]:
        rules: dict[str, KeyArguments] = {}
        for tool, block in blocks.items():
            read = key_arguments_of(block)
            if isinstance(read, MalformedKeyArguments):
                if (server_id, tool) not in self._warned:
                    self._warned.add((server_id, tool))
                    logger.warning(
                        "tool %r: its key arguments in tools/list cannot be read (%s); its calls are keyed on "
                        "every argument",
                        tool,
                        read.reason,
                    )
            elif read is not None and not read.trivial:
                rules[tool] = read
        return rules

    @staticmethod
    def identity(
        rule: KeyArguments | None,
        server_id: str,
        partition: str,
        era: str,
        tool: str,
        arguments: dict[str, Any],
        variant: str,
    ) -> CallIdentity:
        """The identity a call is kept under: its arguments projected by `rule`, with every argument to send."""
        if rule is None or rule.trivial:
            return CallIdentity(server_id, partition, era, tool, arguments, variant)
        return CallIdentity(
            server_id, partition, era, tool, rule.project(arguments), variant, rule.label(), sent=arguments
        )
