"""Per-tool cache declarations: which tools a server stamps, and how.

A declaration has two forms. `CachePolicy` is the Python value both server adapters work from. The
declaration block is its wire form, written into a tool's own `meta` (`cache_meta`) so that it sits
where the tool is declared and shows in `tools/list` under the cache key (docs/server.md). A registry
(`ToolPolicies`) holds declarations by the name the tool is called by, for the SDK adapter and for the
FastMCP users who prefer one mapping. Tools that are not declared are left exactly as they were.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mcpcache.key_arguments import (
    IGNORE_ARGUMENTS_FIELD,
    KEY_ARGUMENTS_FIELD,
    KeyArguments,
    MalformedKeyArguments,
    key_arguments_of,
)
from mcpcache.protocol import MAX_TTL_MS, META_KEY, STALE_IF_ERROR_KEY, STALE_WHILE_REVALIDATE_KEY, Scope

Validator = Callable[[Mapping[str, Any]], Any | Awaitable[Any]]
"""Called with the call's arguments; returns a JSON-able version of what the tool reads (sync or async)."""

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class CachePolicy:
    """How one tool's answers are stamped.

    ttl_ms: how long a client may serve the answer without asking (0: revalidate before every reuse).
    scope: "private" unless the answer holds nothing narrowed by who asked.
    kind: the `kind` a not-modified reply names when the answer has none of its own.
    etag: stamp a weak tag and answer not-modified to a matching conditional call.
    validator: a cheap function of the arguments naming the version of the source; with it the tag is
        computed before the body runs and a matching call skips the body.
    deltas: answer a conditional call whose tag is not current with a delta reply when the caller accepts
        one and the server still holds the answer it sent under that tag (docs/server.md, "Delta
        replies"). False: this tool's answers are never kept in the history nor sent as deltas.
    stale_while_revalidate_ms: how long after freshness ends a client may serve the stored answer at once
        while it revalidates in the background (docs/server.md, "Serving stale"). 0: never.
    stale_if_error_ms: how long after freshness ends a client may serve the stored answer when this server
        cannot be reached, times out or answers a JSON-RPC error. 0: never.
    key_arguments: the top-level arguments that name the answer, when others (a request id, a timestamp)
        never change it (docs/server.md, "Key arguments"); None: every argument does. Declared in
        `tools/list` as `keyArguments`; the server's own keys (the delta history, validator tags) use it.
    ignore_arguments: the top-level arguments that never change the answer (`ignoreArguments`); the other
        way of saying the same thing. Give one of the two at most. Naming an argument that does change the
        answer makes every cache that trusts the declaration serve wrong answers.
    """

    ttl_ms: int = 0
    scope: Scope = "private"
    kind: str | None = None
    etag: bool = True
    validator: Validator | None = None
    deltas: bool = True
    stale_while_revalidate_ms: int = 0
    stale_if_error_ms: int = 0
    key_arguments: tuple[str, ...] | None = None
    ignore_arguments: tuple[str, ...] = ()
    _key_rule: KeyArguments | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("ttl_ms", "stale_while_revalidate_ms", "stale_if_error_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int of milliseconds, not {type(value).__name__}")
            if not 0 <= value <= MAX_TTL_MS:
                raise ValueError(f"{name} must be between 0 and {MAX_TTL_MS} (24 h), got {value}")
        if self.scope not in ("private", "public"):
            raise ValueError(f'scope must be "private" or "public", got {self.scope!r}')
        if self.kind is not None and not isinstance(self.kind, str):
            raise TypeError("kind must be a string")
        if self.validator is not None and not callable(self.validator):
            raise TypeError("validator must be callable")
        if self.validator is not None and not self.etag:
            raise ValueError("a validator only serves tags; it makes no sense with etag=False")
        if not isinstance(self.deltas, bool):
            raise TypeError("deltas must be True or False")
        if isinstance(self.key_arguments, str) or isinstance(self.ignore_arguments, str):
            raise TypeError("key_arguments and ignore_arguments are lists of argument names, not a string")
        # Built (and so checked: names only, no more than a few hundred) before the names are sorted, so a
        # bad declaration raises a clear error where it is written, and calls read it ready.
        rule: KeyArguments | None = None
        if self.key_arguments is not None:
            if self.ignore_arguments:
                raise ValueError("give key_arguments or ignore_arguments, not both")
            rule = KeyArguments.keep(self.key_arguments)
        elif self.ignore_arguments != ():  # the default needs no check: the gateway builds a policy per call
            ignored = KeyArguments.drop(self.ignore_arguments)
            rule = ignored if ignored.ignore else None
        if rule is not None and rule.only is not None:
            object.__setattr__(self, "key_arguments", tuple(sorted(rule.only)))
        object.__setattr__(self, "ignore_arguments", tuple(sorted(rule.ignore)) if rule is not None else ())
        object.__setattr__(self, "_key_rule", rule)

    @property
    def key_rule(self) -> KeyArguments | None:
        """Which arguments name the answer; None: every argument."""
        return self._key_rule

    def keyed(self, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        """The arguments that name the answer (all of them, unless the declaration says otherwise)."""
        rule = self._key_rule
        return arguments if rule is None else rule.project(arguments)

    def declaration_block(self) -> dict[str, Any]:
        """The wire form of this declaration: what a tool's `meta` and its `tools/list` entry carry under
        the cache key. The validator is code and stays on the server."""
        block: dict[str, Any] = {"ttlMs": self.ttl_ms, "cacheScope": self.scope}
        if self.kind is not None:
            block["kind"] = self.kind
        if not self.etag:
            block["etag"] = False
        if not self.deltas and self.etag:  # without tags there are no deltas to turn off
            block["deltas"] = False
        if self.stale_while_revalidate_ms:
            block[STALE_WHILE_REVALIDATE_KEY] = self.stale_while_revalidate_ms
        if self.stale_if_error_ms:
            block[STALE_IF_ERROR_KEY] = self.stale_if_error_ms
        rule = self.key_rule
        if rule is not None:
            block.update(rule.block())
        return block


class DeclarationError(ValueError):
    """A declaration block in a tool's `meta` that cannot be read; the tool is left undeclared."""


def policy_from_block(block: object) -> CachePolicy:
    """The `CachePolicy` a declaration block states. Raises DeclarationError (one line, naming the field)
    when it is not one: a declaration is the server author's own, so a typo is reported, never guessed."""
    if not isinstance(block, Mapping):
        raise DeclarationError(f"the declaration is a {type(block).__name__}, not an object")
    unknown = sorted(str(key) for key in block if key not in _BLOCK_FIELDS)
    if unknown:
        raise DeclarationError(f"unknown field(s) {', '.join(unknown)} (known: {', '.join(_BLOCK_FIELDS)})")
    etag = block.get("etag", True)
    if etag not in (True, False):
        raise DeclarationError(f"etag must be false (or absent), not {etag!r}")
    deltas = block.get("deltas", True)
    if deltas not in (True, False):
        raise DeclarationError(f"deltas must be false (or absent), not {deltas!r}")
    rule = key_arguments_of(block)
    if isinstance(rule, MalformedKeyArguments):
        raise DeclarationError(rule.reason)
    try:
        return CachePolicy(
            ttl_ms=block.get("ttlMs", 0),
            scope=block.get("cacheScope", "private"),
            kind=block.get("kind"),
            etag=etag,
            deltas=deltas,
            stale_while_revalidate_ms=block.get(STALE_WHILE_REVALIDATE_KEY, 0),
            stale_if_error_ms=block.get(STALE_IF_ERROR_KEY, 0),
            key_arguments=tuple(rule.only) if rule is not None and rule.only is not None else None,
            ignore_arguments=tuple(rule.ignore) if rule is not None else (),
        )
    except (TypeError, ValueError) as exc:
        raise DeclarationError(str(exc)) from None


_BLOCK_FIELDS = (
    "ttlMs",
    "cacheScope",
    "kind",
    "etag",
    "deltas",
    STALE_WHILE_REVALIDATE_KEY,
    STALE_IF_ERROR_KEY,
    KEY_ARGUMENTS_FIELD,
    IGNORE_ARGUMENTS_FIELD,
)


def _names_given(value: Sequence[str], what: str) -> tuple[str, ...]:
    # tuple("query") would be five one-letter names: keys that name nothing, so every call one key.
    if isinstance(value, str | bytes):
        raise TypeError(f"{what} is a list of argument names, not a string: write [{value!r}]")
    return tuple(value)


def _declared_policy(
    ttl_ms: int,
    scope: Scope,
    kind: str | None,
    etag: bool,
    validator: Validator | None,
    deltas: bool,
    stale_while_revalidate_ms: int,
    stale_if_error_ms: int,
    key_arguments: Sequence[str] | None,
    ignore_arguments: Sequence[str],
) -> CachePolicy:
    """The policy `cache_meta` and `cacheable` declare, from their keyword arguments."""
    return CachePolicy(
        ttl_ms=ttl_ms,
        scope=scope,
        kind=kind,
        etag=etag,
        validator=validator,
        deltas=deltas,
        stale_while_revalidate_ms=stale_while_revalidate_ms,
        stale_if_error_ms=stale_if_error_ms,
        key_arguments=None if key_arguments is None else _names_given(key_arguments, "key_arguments"),
        ignore_arguments=_names_given(ignore_arguments, "ignore_arguments"),
    )


def cache_meta(
    *,
    ttl_ms: int = 0,
    scope: Scope = "private",
    kind: str | None = None,
    etag: bool = True,
    deltas: bool = True,
    stale_while_revalidate_ms: int = 0,
    stale_if_error_ms: int = 0,
    key_arguments: Sequence[str] | None = None,
    ignore_arguments: Sequence[str] = (),
    meta_key: str = META_KEY,
) -> dict[str, Any]:
    """The tool `meta` that declares a tool cacheable, for `@mcp.tool(meta=cache_meta(ttl_ms=5000))`.

    Checked now (a bad value raises here, at declaration time), and merged with other meta with `|`.
    The validator, being code, is handed to the adapter instead (`install(..., validators={...})`).
    The stale windows are `CachePolicy`'s (docs/server.md, "Serving stale"), and so are `key_arguments` and
    `ignore_arguments` (docs/server.md, "Key arguments").
    """
    policy = _declared_policy(
        ttl_ms,
        scope,
        kind,
        etag,
        None,
        deltas,
        stale_while_revalidate_ms,
        stale_if_error_ms,
        key_arguments,
        ignore_arguments,
    )
    return {meta_key: policy.declaration_block()}


class ToolPolicies:
    """The declarations of one server, by tool name."""

    def __init__(self, policies: Mapping[str, CachePolicy] | None = None) -> None:
        self._by_name: dict[str, CachePolicy] = {}
        # The functions `cacheable` registered, by declared name: a framework that registers the same
        # function under another name (`@mcp.tool(name="read")`) can still be matched to its declaration.
        self._functions: dict[str, Callable[..., Any]] = {}
        for name, policy in (policies or {}).items():
            self.declare(name, policy)

    def declare(self, name: str, policy: CachePolicy) -> None:
        if not isinstance(policy, CachePolicy):
            raise TypeError(f"expected a CachePolicy for {name!r}, got {type(policy).__name__}")
        self._by_name[name] = policy

    def cacheable(
        self,
        *,
        name: str | None = None,
        ttl_ms: int = 0,
        scope: Scope = "private",
        kind: str | None = None,
        etag: bool = True,
        validator: Validator | None = None,
        deltas: bool = True,
        stale_while_revalidate_ms: int = 0,
        stale_if_error_ms: int = 0,
        key_arguments: Sequence[str] | None = None,
        ignore_arguments: Sequence[str] = (),
    ) -> Callable[[F], F]:
        """Decorator form of `declare`; put it below `@mcp.tool(...)` and give `name=` if the tool is renamed.

        The function is returned unchanged, so it works under any tool decorator, sync or async.
        """
        policy = _declared_policy(
            ttl_ms,
            scope,
            kind,
            etag,
            validator,
            deltas,
            stale_while_revalidate_ms,
            stale_if_error_ms,
            key_arguments,
            ignore_arguments,
        )

        def register(fn: F) -> F:
            tool_name = name or getattr(fn, "__name__", None)
            if not tool_name:
                raise TypeError("cannot tell the tool's name; pass name=")
            self.declare(tool_name, policy)
            self._functions[tool_name] = fn
            return fn

        return register

    def get(self, name: str) -> CachePolicy | None:
        return self._by_name.get(name)

    def for_function(self, fn: object) -> tuple[str, CachePolicy] | None:
        """The declaration `cacheable` made for `fn` (its declared name and policy), if any."""
        for name, registered in self._functions.items():
            if registered is fn:
                policy = self._by_name.get(name)
                return None if policy is None else (name, policy)
        return None

    def registered_function(self, name: str) -> Callable[..., Any] | None:
        """The function `cacheable` registered under `name`, if that is how it was declared."""
        return self._functions.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)
