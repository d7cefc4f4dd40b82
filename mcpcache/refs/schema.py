"""Tool schemas a model can pass references through, without any change to the servers.

For every object or array argument `X` of a tool, the schema handed to the model gains a sibling
`X_uri` that takes an `mcp+cache://` reference (or a list of them), and `X` stops being required: the
host resolves `X_uri` into `X` before the call is sent (`References.resolve`), so the server only ever
sees `X`. Tools with nothing to pass by reference are returned unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from mcpcache.refs.references import URI_SUFFIX
from mcpcache.refs.uri import URI_PATTERN

_BULKY = {"object", "array"}


def _is_bulky(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return False
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _BULKY:
        return True
    if isinstance(kind, list) and any(k in _BULKY for k in kind):
        return True
    return any(_is_bulky(option) for key in ("anyOf", "oneOf") for option in schema.get(key, []) or [])


def uri_property(name: str) -> dict[str, Any]:
    reference = {"type": "string", "pattern": URI_PATTERN}
    return {
        "anyOf": [reference, {"type": "array", "items": reference, "minItems": 1}],
        "description": (
            f"Instead of `{name}`: the `_cache_uri` of an earlier tool result (or a list of them), optionally "
            f"with a `#/json/pointer` naming a part of it, as a marker in that result says. Give either "
            f"`{name}` or `{name}_uri`, not both."
        ),
    }


def with_uri_arguments(input_schema: Mapping[str, Any]) -> dict[str, Any]:
    """`input_schema` with an `X_uri` sibling for every object or array property `X`."""
    schema = copy.deepcopy(dict(input_schema))
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return schema
    bulky = [name for name, prop in properties.items() if _is_bulky(prop) and name + URI_SUFFIX not in properties]
    if not bulky:
        return schema
    for name in bulky:
        properties[name + URI_SUFFIX] = uri_property(name)
    required = schema.get("required")
    if isinstance(required, list):
        schema["required"] = [name for name in required if name not in bulky]
    return schema
