"""Which tools of one FastMCP server are cacheable: declarations in a tool's own `meta` (`cache_meta`)
or by name in a `ToolPolicies` registry, resolved for tools renamed above their declared function and
for tools of mounted servers, with warnings for names that match no tool."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

from fastmcp.tools.base import Tool

from mcpcache.protocol import META_KEY
from mcpcache.server.policies import CachePolicy, DeclarationError, ToolPolicies, Validator, policy_from_block

__all__ = ["UNRESOLVED", "ToolDeclarations", "Unresolved"]

logger = logging.getLogger("mcpcache.server")


class Unresolved:
    """Not known from the name alone: the tool object must be looked up (one instance, `UNRESOLVED`)."""

    __slots__ = ()


UNRESOLVED = Unresolved()
_MAX_NAMES_IN_WARNING = 12


def _functions_of(tool: Tool) -> list[object]:
    """The user functions behind a tool: a function tool's own, and those of the tools a transformed
    tool (a `ToolTransform` rename) was made from."""
    found: list[object] = []
    current: Tool | None = tool
    while current is not None and len(found) < 8:
        fn = getattr(current, "fn", None)
        if fn is not None:
            found.append(fn)
        parent = getattr(current, "parent_tool", None)
        current = parent if isinstance(parent, Tool) else None
    return found


class ToolDeclarations:
    """Which tools of one FastMCP server are cacheable, by the name they are called by.

    A tool is declared, in this order of precedence:
    1. by name, in the `ToolPolicies` registry (`install(mcp, {"read": CachePolicy(...)})`,
       `policies.declare`, `@policies.cacheable(name=...)`);
    2. in its own `meta`, under the cache key (`@mcp.tool(meta=cache_meta(ttl_ms=5000))`); a tool of a
       mounted server carries its meta, and the block its own server lists, under the mounted name;
    3. by its function, when `@policies.cacheable` registered that function under another name (the
       tool was renamed: `@mcp.tool(name="read")` above `@policies.cacheable(...)`).
    `validators` adds a validator, by the name the tool is called by, to whichever declaration applies.

    What is resolved from a tool object is remembered by name, so a call does not look the tool up
    again (a FastMCP lookup costs a few hundred microseconds). The memory is refreshed whenever the
    server lists its tools or hands a tool out for a call.
    """

    def __init__(
        self,
        policies: ToolPolicies | None = None,
        validators: Mapping[str, Validator] | None = None,
        *,
        meta_key: str = META_KEY,
    ) -> None:
        self.policies = policies if policies is not None else ToolPolicies()
        self.validators = dict(validators or {})
        for name, validator in self.validators.items():
            if not callable(validator):
                raise TypeError(f"the validator for {name!r} is not callable")
        self.meta_key = meta_key
        self._resolved: dict[str, CachePolicy | None] = {}
        self._with_validator: dict[str, tuple[CachePolicy, CachePolicy]] = {}
        # The policy read from each tool's meta block, kept with the block it was read from: the same
        # block object comes back on every call, and is parsed once.
        self._parsed: dict[str, tuple[object, CachePolicy | None]] = {}
        self._matched: set[str] = set()
        self._renamed: dict[str, str] = {}  # tool name -> the name its function was declared under
        self._warned: set[str] = set()

    # Resolution

    def lookup(self, name: str) -> CachePolicy | Unresolved | None:
        """The declaration of the tool called `name`, None when it has none, or `UNRESOLVED` when that
        can only be told from the tool object (the caller then looks it up and calls `for_tool`)."""
        policy = self.policies.get(name)
        if policy is not None:
            return self._validated(name, policy)
        return self._resolved.get(name, UNRESOLVED)

    def for_tool(self, tool: Tool) -> CachePolicy | None:
        """The declaration of `tool`, resolved from the tool object and remembered under its name."""
        name = tool.name
        policy = self.policies.get(name)
        if policy is not None:
            self._matched.add(name)
        else:
            policy = self._from_meta(tool)
            if policy is None:
                policy = self._from_function(tool)
        if policy is not None:
            policy = self._validated(name, policy)
        elif name in self.validators:
            self._warn_once(
                f"validator:{name}",
                "tool %r has a validator but no cache declaration; the validator is not used",
                name,
            )
        self._resolved[name] = policy
        return policy

    def _from_meta(self, tool: Tool) -> CachePolicy | None:
        meta = tool.meta
        if not meta or self.meta_key not in meta:
            return None
        block = meta[self.meta_key]
        cached = self._parsed.get(tool.name)
        if cached is not None and cached[0] is block:
            return cached[1]
        policy: CachePolicy | None
        try:
            policy = policy_from_block(block)
        except DeclarationError as exc:
            self._warn_once(
                f"meta:{tool.name}",
                "tool %r: the cache declaration in its meta cannot be read (%s); the tool is not cached",
                tool.name,
                exc,
            )
            policy = None
        self._parsed[tool.name] = (block, policy)
        return policy

    def _from_function(self, tool: Tool) -> CachePolicy | None:
        for fn in _functions_of(tool):
            found = self.policies.for_function(fn)
            if found is not None:
                declared_as, policy = found
                self._matched.add(declared_as)
                if declared_as != tool.name:
                    self._renamed[tool.name] = declared_as
                    logger.debug("tool %r: declared as %r (the same function)", tool.name, declared_as)
                return policy
        # A copy that lost its function (FastMCP's response memo lists plain `Tool`s) keeps the match.
        alias = self._renamed.get(tool.name)
        return self.policies.get(alias) if alias is not None else None

    def _validated(self, name: str, policy: CachePolicy) -> CachePolicy:
        validator = self.validators.get(name)
        if validator is None or policy.validator is validator:
            return policy
        cached = self._with_validator.get(name)
        if cached is not None and cached[0] is policy:
            return cached[1]
        try:
            merged = replace(policy, validator=validator)
        except ValueError as exc:
            self._warn_once(f"validator:{name}", "tool %r: the validator is not used (%s)", name, exc)
            merged = policy
        self._with_validator[name] = (policy, merged)
        return merged

    # Checking

    def check(self, tools: Sequence[Tool], server_name: str) -> None:
        """Warn, once per name, about every declaration and validator that matches none of `tools`."""
        for tool in tools:
            self.for_tool(tool)
        names = sorted({tool.name for tool in tools})
        for declared in self.policies:
            if declared not in self._matched:
                self._warn_unmatched("cache declaration", declared, names, server_name)
        for declared in self.validators:
            if declared not in names:
                self._warn_unmatched("validator", declared, names, server_name)

    def _warn_unmatched(self, what: str, declared: str, names: list[str], server_name: str) -> None:
        import difflib  # only when there is something to warn about

        close = difflib.get_close_matches(declared, names, n=1, cutoff=0.6)
        close += [name for name in names if name.endswith(f"_{declared}") and name not in close]
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listed = ", ".join(names[:_MAX_NAMES_IN_WARNING]) + (", ..." if len(names) > _MAX_NAMES_IN_WARNING else "")
        self._warn_once(
            f"unmatched:{what}:{declared}",
            "%s %r matches no tool of server %r%s (its tools: %s). A tool renamed with @mcp.tool(name=...) "
            "or mounted under a namespace is called by its new name; declare it under that name, or in "
            "the tool's own meta (cache_meta).",
            what,
            declared,
            server_name,
            hint,
            listed or "none",
        )

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)
