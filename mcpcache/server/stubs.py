"""Whether the stub of a not-modified or delta reply, `{"kind": K}`, passes a tool's output schema.

The tools specification says a server MUST send structured results that conform to the tool's output
schema, and the stub is the reply's structuredContent: docs/protocol.md section 4 therefore forbids the
stub when the schema refuses it (the full answer goes instead). A `StubCheck` is what the decisions
(`mcpcache.server.decisions`) are handed about one tool's schema: none (`NO_OUTPUT_SCHEMA`), one to check
the stub against, or one the adapter cannot see (`StubCheck.unknown`: the stub goes unchecked, as in
earlier versions). The check compiles the schema once, the first time a stub is checked, and remembers
each kind's verdict, so an adapter that keeps one `StubCheck` per tool and schema (`StubChecks`) pays
for the validation once, not per call. `jsonschema` (a dependency of the MCP SDK) is imported only then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["NO_OUTPUT_SCHEMA", "StubCheck", "StubChecks"]


class StubCheck:
    """One tool's output schema, as far as the stub `{"kind": K}` is concerned."""

    __slots__ = ("_validator", "_verdicts", "hint", "known", "schema")

    def __init__(self, schema: Mapping[str, Any] | None, *, known: bool = True, hint: str = "") -> None:
        """`schema`: the tool's output schema (None: it declares none). `known`: False when the adapter
        cannot see the schema; `hint` then says how to let it."""
        self.schema = schema
        self.known = known
        self.hint = hint
        self._validator: Any = None
        self._verdicts: dict[str, str | None] = {}

    @classmethod
    def unknown(cls, hint: str) -> StubCheck:
        """A tool whose schema this adapter cannot see: the stub goes unchecked."""
        return cls(None, known=False, hint=hint)

    def refusal(self, kind: str) -> str | None:
        """Why the schema refuses `{"kind": kind}` (a reason a person can read), or None when it accepts it,
        when there is no schema, or when the schema is not known."""
        if self.schema is None:
            return None
        verdict = self._verdicts.get(kind, ...)
        if verdict is ...:
            verdict = self._judge(kind)
            if len(self._verdicts) < 64:  # kinds are few; a tool that makes up a new one per answer is not kept
                self._verdicts[kind] = verdict
        return verdict

    def _judge(self, kind: str) -> str | None:
        assert self.schema is not None
        stub = {"kind": kind}
        try:
            if self._validator is None:
                # As the MCP SDK's client validates answers: the schema checked first, `$ref`s resolved
                # within the schema document only.
                from jsonschema.validators import validator_for  # type: ignore[import-untyped]
                from referencing import Registry

                validator_class = validator_for(self.schema)
                validator_class.check_schema(self.schema)
                self._validator = validator_class(self.schema, registry=Registry())
            from jsonschema.exceptions import best_match  # type: ignore[import-untyped]

            error = best_match(self._validator.iter_errors(stub))
        except Exception as exc:  # an invalid or unresolvable schema: no stub can be shown to pass it
            return f"the output schema cannot be used to check the stub ({str(exc).splitlines()[0][:120]})"
        if error is None:
            return None
        return f'the stub {{"kind": "{kind}"}} fails the tool\'s output schema ({error.message[:160]})'


NO_OUTPUT_SCHEMA = StubCheck(None)
"""A tool that declares no output schema: any stub goes."""


class StubChecks:
    """One `StubCheck` per tool, made again only when the tool's schema changes."""

    def __init__(self) -> None:
        self._checks: dict[str, StubCheck] = {}

    def get(self, tool: str, schema: Mapping[str, Any] | None) -> StubCheck:
        if schema is None:
            self._checks.pop(tool, None)
            return NO_OUTPUT_SCHEMA
        check = self._checks.get(tool)
        if check is None or (check.schema is not schema and check.schema != schema):
            check = StubCheck(schema)
            if len(self._checks) >= 4096:  # tools come and go on some servers: keep the memory bounded
                self._checks.clear()
            self._checks[tool] = check
        return check
