"""Tool schemas a model can pass references through, without any change to the servers.

For every object or array argument `X` of a tool (directly, through a local `$ref` as pydantic writes
for a model-typed argument, or as one option of anyOf/oneOf/allOf), the schema handed to the model
gains a sibling `X_uri` that takes an `mcp+cache://` reference (or a list of them), and `X` stops being
required: the host resolves `X_uri` into `X` before the call is sent (`References.resolve`), so the
server only ever sees `X`. Tools with nothing to pass by reference are returned unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from mcpcache.refs.references import URI_SUFFIX
from mcpcache.refs.uri import URI_PATTERN

_BULKY = {"object", "array"}


def _local_target(ref: Any, root: Mapping[str, Any]) -> Any:
    """What a local `$ref` ("#/$defs/Row", as pydantic writes for a model argument) points at, or None."""
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return None
    target: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, Mapping) or part not in target:
            return None
        target = target[part]
    return target


def _is_bulky(schema: Any, root: Mapping[str, Any], depth: int = 0) -> bool:
    if not isinstance(schema, Mapping) or depth > 16:  # the depth bound ends reference cycles
        return False
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _BULKY:
        return True
    if isinstance(kind, list) and any(k in _BULKY for k in kind):
        return True
    if "$ref" in schema and _is_bulky(_local_target(schema["$ref"], root), root, depth + 1):
        return True
    options = [option for key in ("anyOf", "oneOf", "allOf") for option in schema.get(key, None) or []]
    return any(_is_bulky(option, root, depth + 1) for option in options)


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
    bulky = [
        name for name, prop in properties.items() if _is_bulky(prop, schema) and name + URI_SUFFIX not in properties
    ]
    if not bulky:
        return schema
    for name in bulky:
        properties[name + URI_SUFFIX] = uri_property(name)
    required = schema.get("required")
    if isinstance(required, list):
        schema["required"] = [name for name in required if name not in bulky]
    return schema
