"""Which of a tool's arguments name its answer (docs/protocol.md section 8, "Key arguments").

A tool whose calls carry a volatile argument (a request id, a timestamp) that does not change its answer may
say so: `keyArguments` (only these name the answer) or `ignoreArguments` (these never do), in its cache
declaration. Keys (the client's entries, the server's and the gateway's delta histories, single flight) are
then computed over the projection of the arguments, so two calls that differ only in a volatile argument
share one answer. The call itself always goes out with every argument.

Pure: no I/O, no client or server imports (both sides and the gateway use it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = [
    "IGNORE_ARGUMENTS_FIELD",
    "KEY_ARGUMENTS_FIELD",
    "KeyArguments",
    "MalformedKeyArguments",
    "key_arguments_of",
]

KEY_ARGUMENTS_FIELD = "keyArguments"
IGNORE_ARGUMENTS_FIELD = "ignoreArguments"
MAX_NAMES = 256
"""More names than this in one declaration is not a declaration anybody meant: malformed."""


def _names(value: object, what: str) -> frozenset[str]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ValueError(f"{what} must be a list of argument names, not {type(value).__name__}")
    names = list(value)
    if len(names) > MAX_NAMES:
        raise ValueError(f"{what} names {len(names)} arguments (at most {MAX_NAMES})")
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what} must hold non-empty strings (top-level argument names), not {name!r}")
    return frozenset(names)


@dataclass(frozen=True)
class KeyArguments:
    """Which top-level arguments name a tool's answer: exactly those in `only` (when given), or all but
    those in `ignore`. Build one with `KeyArguments.keep([...])` or `KeyArguments.drop([...])`."""

    only: frozenset[str] | None = None
    ignore: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.only is not None:
            object.__setattr__(self, "only", _names(self.only, KEY_ARGUMENTS_FIELD))
        object.__setattr__(self, "ignore", _names(self.ignore, IGNORE_ARGUMENTS_FIELD))
        if self.only is not None and self.ignore:
            raise ValueError(f"give {KEY_ARGUMENTS_FIELD} or {IGNORE_ARGUMENTS_FIELD}, not both")

    @classmethod
    def keep(cls, names: Iterable[str]) -> KeyArguments:
        """Only these arguments name the answer (`keyArguments`)."""
        return cls(only=_names(names, KEY_ARGUMENTS_FIELD))

    @classmethod
    def drop(cls, names: Iterable[str]) -> KeyArguments:
        """These arguments never name the answer (`ignoreArguments`)."""
        return cls(ignore=_names(names, IGNORE_ARGUMENTS_FIELD))

    @property
    def trivial(self) -> bool:
        """Keys on every argument (an empty `ignoreArguments`): the same keys as no declaration."""
        return self.only is None and not self.ignore

    def project(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments that name the answer. An argument absent from the call stays absent and one sent as
        null stays null: a tool may treat the two differently, so they never share an answer."""
        if self.only is not None:
            return {name: value for name, value in arguments.items() if name in self.only}
        if not self.ignore:
            return dict(arguments)
        return {name: value for name, value in arguments.items() if name not in self.ignore}

    def block(self) -> dict[str, list[str]]:
        """The declaration's fields (names sorted), as a tool's cache declaration carries them."""
        if self.only is not None:
            return {KEY_ARGUMENTS_FIELD: sorted(self.only)}
        if self.ignore:
            return {IGNORE_ARGUMENTS_FIELD: sorted(self.ignore)}
        return {}

    def label(self) -> str:
        """What a key carries of the rule: entries keyed by a projection never meet entries keyed on every
        argument (a cache that does not trust the declaration), nor those of another projection (the server
        changed its declaration)."""
        return orjson.dumps(self.block()).decode() if not self.trivial else ""


@dataclass(frozen=True)
class MalformedKeyArguments:
    """A declaration whose key fields cannot be read: the client keys on every argument (never a wrong answer)."""

    reason: str


def key_arguments_of(block: object) -> KeyArguments | MalformedKeyArguments | None:
    """What a cache declaration (a tool's `tools/list` block, or its `meta` block) says of its key arguments:
    None when it names neither field (or is not an object: not a declaration at all)."""
    if not isinstance(block, Mapping):
        return None
    has_only, has_ignore = KEY_ARGUMENTS_FIELD in block, IGNORE_ARGUMENTS_FIELD in block
    if not has_only and not has_ignore:
        return None
    if has_only and has_ignore:
        return MalformedKeyArguments(f"both {KEY_ARGUMENTS_FIELD} and {IGNORE_ARGUMENTS_FIELD} are given")
    try:
        if has_only:
            return KeyArguments.keep(_listed(block[KEY_ARGUMENTS_FIELD], KEY_ARGUMENTS_FIELD))
        return KeyArguments.drop(_listed(block[IGNORE_ARGUMENTS_FIELD], IGNORE_ARGUMENTS_FIELD))
    except ValueError as exc:
        return MalformedKeyArguments(str(exc))


def _listed(value: object, what: str) -> list[Any]:
    # On the wire only a JSON array will do (a string is iterable, an object's keys would be read as names).
    if not isinstance(value, list):
        raise ValueError(f"{what} must be an array of argument names, not {type(value).__name__}")
    return value
