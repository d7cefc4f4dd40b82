"""Which calls the server check makes, decided from the `tools/list` entries alone (no I/O).

By default the check probes every tool that declares a cache block in its `tools/list` entry's `_meta`,
and every tool annotated read-only (its first answer tells whether it stamps one). A tool that is neither
is never called unasked: calling a tool that writes, to see whether it caches, would write. Arguments
come from the user (`--args`, or `--args-from FILE` for tools chosen by default), else from the input
schema's examples (`examples`, then each required property's `examples`, `default`, `const` or single
`enum`). A tool that still needs arguments is `Wanting`: the probe looks for them in what the tools it
called answered (`mcpcache.check.harvest`), and reports it as not checked, naming them, if they are not
there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_NO_VALUE = object()


@dataclass(frozen=True)
class ToolCall:
    """A tool and the arguments to call it with (None: find them in its input schema)."""

    name: str
    arguments: Mapping[str, Any] | None = None

    def describe(self) -> str:
        return f"{self.name}({json.dumps(dict(self.arguments or {}), sort_keys=True)})"


@dataclass(frozen=True)
class Wanting:
    """A tool the check would call but for arguments nobody gave."""

    entry: Mapping[str, Any]
    """Its tools/list entry."""
    arguments: Mapping[str, Any]
    """What the schema's examples gave."""
    missing: tuple[str, ...]
    """The required properties still without a value."""
    declared: bool
    """Probed once its arguments are found (it declares a cache block, or the user named it); otherwise a
    read-only tool, probed only if its first answer carries a block."""

    @property
    def name(self) -> str:
        return str(self.entry.get("name"))

    def hint(self) -> str:
        """Why it was not checked, and what to add so that it is."""
        return needs_arguments(self.name, self.entry.get("inputSchema"), self.missing)


@dataclass(frozen=True)
class Selection:
    """What to probe, and what was left out with why."""

    probe: tuple[tuple[ToolCall, Mapping[str, Any]], ...]
    """(the call, its tools/list entry)."""
    candidates: tuple[tuple[ToolCall, Mapping[str, Any]], ...] = ()
    """Read-only tools with arguments: probed only if their first answer carries a cache block."""
    skipped: tuple[tuple[str, str], ...] = field(default=())
    wanting: tuple[Wanting, ...] = ()


def declares_cache(entry: Mapping[str, Any], meta_key: str) -> bool:
    """The tool's `tools/list` entry carries a cache declaration under `meta_key` in its `_meta`."""
    meta = entry.get("_meta")
    return isinstance(meta, Mapping) and isinstance(meta.get(meta_key), Mapping)


def read_only(entry: Mapping[str, Any]) -> bool:
    annotations = entry.get("annotations")
    return isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True


def _example_of(schema: object) -> object:
    if not isinstance(schema, Mapping):
        return _NO_VALUE
    examples = schema.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    for key in ("default", "const"):
        if key in schema:
            return schema[key]
    enum = schema.get("enum")
    if isinstance(enum, list) and len(enum) == 1:
        return enum[0]
    return _NO_VALUE


def properties_of(schema: object) -> Mapping[str, Any]:
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return properties if isinstance(properties, Mapping) else {}


def partial_arguments(schema: object) -> tuple[dict[str, Any], list[str]]:
    """(the arguments the input schema's examples give, the required properties they leave without a value)."""
    if not isinstance(schema, Mapping):
        return {}, []
    whole = schema.get("examples")
    if isinstance(whole, list) and whole and isinstance(whole[0], Mapping):
        return dict(whole[0]), []
    properties = properties_of(schema)
    required = schema.get("required")
    required = [name for name in required if isinstance(name, str)] if isinstance(required, list) else []
    arguments: dict[str, Any] = {}
    missing: list[str] = []
    for name in required:
        value = _example_of(properties.get(name))
        if value is _NO_VALUE:
            missing.append(name)
        else:
            arguments[name] = value
    return arguments, missing


def arguments_from_schema(schema: object) -> tuple[dict[str, Any] | None, list[str]]:
    """(arguments built from the input schema's examples, the required properties nobody gave a value for)."""
    arguments, missing = partial_arguments(schema)
    return (None, missing) if missing else (arguments, [])


def _placeholder(schema: object) -> str:
    kinds = schema_types(schema)
    return "<" + ("|".join(sorted(kinds)) if kinds else "value") + ">"


def schema_types(schema: object) -> set[str]:
    """The JSON types a property's schema allows (`type`, or the types of its `anyOf`/`oneOf`), null left
    out; empty when it does not say."""
    if not isinstance(schema, Mapping):
        return set()
    found: set[str] = set()
    kind = schema.get("type")
    for item in kind if isinstance(kind, list) else [kind]:
        if isinstance(item, str) and item != "null":
            found.add(item)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            for option in options:
                found |= schema_types(option)
    return found


def needs_arguments(name: str, schema: object, missing: Sequence[str]) -> str:
    """The line that says a tool was not called for want of arguments, with what to add."""
    properties = properties_of(schema)
    template = ", ".join(f'"{prop}": {_placeholder(properties.get(prop))}' for prop in missing)
    return (
        f"needs arguments ({', '.join(missing)}) that no schema example or listing answer gave; "
        f"add --tool {name} --args '{{{template}}}', or put it in --args-from FILE"
    )


_WRONG_TYPE: dict[str, object] = {
    "string": 12345,
    "integer": "not a number",
    "number": "not a number",
    "boolean": "not a boolean",
    "array": "not an array",
    "object": "not an object",
}


def invalid_arguments(schema: object, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
    """Arguments the input schema refuses, to make the tool answer an error: a required property left out,
    else a property of the wrong type. None when the schema refuses nothing that can be built."""
    if not isinstance(schema, Mapping):
        return None
    required = schema.get("required")
    if isinstance(required, list):
        for name in required:
            if isinstance(name, str):
                return {k: v for k, v in arguments.items() if k != name}
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, prop in properties.items():
            kind = prop.get("type") if isinstance(prop, Mapping) else None
            if isinstance(kind, str) and kind in _WRONG_TYPE:
                return {**arguments, name: _WRONG_TYPE[kind]}
    return None


def select(
    entries: Sequence[Mapping[str, Any]],
    meta_key: str,
    requested: Sequence[ToolCall] = (),
    known: Mapping[str, Mapping[str, Any]] | None = None,
) -> Selection:
    """The calls to probe. `requested` (the user's `--tool`s) wins: exactly those are probed. `known`
    (`--args-from`) gives arguments by tool name to any tool chosen without `--args`."""
    by_name = {entry.get("name"): entry for entry in entries if isinstance(entry.get("name"), str)}
    known = known or {}
    probe: list[tuple[ToolCall, Mapping[str, Any]]] = []
    candidates: list[tuple[ToolCall, Mapping[str, Any]]] = []
    skipped: list[tuple[str, str]] = []
    wanting: list[Wanting] = []

    def with_arguments(call: ToolCall, entry: Mapping[str, Any], declared: bool) -> ToolCall | None:
        if call.arguments is not None:
            return call
        if call.name in known:
            return ToolCall(call.name, dict(known[call.name]))
        arguments, missing = partial_arguments(entry.get("inputSchema"))
        if missing:
            wanting.append(Wanting(entry, arguments, tuple(missing), declared))
            return None
        return ToolCall(call.name, arguments)

    if requested:
        for call in requested:
            entry = by_name.get(call.name)
            if entry is None:
                skipped.append((call.name, "not in tools/list"))
            elif (chosen := with_arguments(call, entry, True)) is not None:
                probe.append((chosen, entry))
        return Selection(tuple(probe), (), tuple(skipped), tuple(wanting))

    for name, entry in by_name.items():
        assert isinstance(name, str)
        if declares_cache(entry, meta_key):
            if (chosen := with_arguments(ToolCall(name), entry, True)) is not None:
                probe.append((chosen, entry))
        elif read_only(entry):
            if (chosen := with_arguments(ToolCall(name), entry, False)) is not None:
                candidates.append((chosen, entry))
        else:
            skipped.append((name, "neither declares a cache block nor is annotated read-only; name it with --tool"))
    return Selection(tuple(probe), tuple(candidates), tuple(skipped), tuple(wanting))
