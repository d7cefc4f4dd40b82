"""Per-tool cache declarations: which tools a server stamps, and how.

One registry serves both server adapters (FastMCP middleware, MCP SDK extension), keyed by the name
the tool is called by. Tools that are not declared are left exactly as they were.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from mcpcache.protocol import MAX_TTL_MS, Scope

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
    """

    ttl_ms: int = 0
    scope: Scope = "private"
    kind: str | None = None
    etag: bool = True
    validator: Validator | None = None

    def __post_init__(self) -> None:
        if isinstance(self.ttl_ms, bool) or not isinstance(self.ttl_ms, int):
            raise TypeError(f"ttl_ms must be an int of milliseconds, not {type(self.ttl_ms).__name__}")
        if not 0 <= self.ttl_ms <= MAX_TTL_MS:
            raise ValueError(f"ttl_ms must be between 0 and {MAX_TTL_MS} (24 h), got {self.ttl_ms}")
        if self.scope not in ("private", "public"):
            raise ValueError(f'scope must be "private" or "public", got {self.scope!r}')
        if self.kind is not None and not isinstance(self.kind, str):
            raise TypeError("kind must be a string")
        if self.validator is not None and not callable(self.validator):
            raise TypeError("validator must be callable")
        if self.validator is not None and not self.etag:
            raise ValueError("a validator only serves tags; it makes no sense with etag=False")


class ToolPolicies:
    """The declarations of one server, by tool name."""

    def __init__(self, policies: Mapping[str, CachePolicy] | None = None) -> None:
        self._by_name: dict[str, CachePolicy] = {}
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
    ) -> Callable[[F], F]:
        """Decorator form of `declare`; put it below `@mcp.tool(...)` and give `name=` if the tool is renamed.

        The function is returned unchanged, so it works under any tool decorator, sync or async.
        """
        policy = CachePolicy(ttl_ms=ttl_ms, scope=scope, kind=kind, etag=etag, validator=validator)

        def register(fn: F) -> F:
            tool_name = name or getattr(fn, "__name__", None)
            if not tool_name:
                raise TypeError("cannot tell the tool's name; pass name=")
            self.declare(tool_name, policy)
            return fn

        return register

    def get(self, name: str) -> CachePolicy | None:
        return self._by_name.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)
