"""A quick yes for the output-schema check the client makes of every answer it serves from the server.

The MCP SDK checks structured content with `jsonschema` (a compiled validator, then `best_match` over its
errors): about 25-45 ms for a 5 MB notebook's answer on this project's 2-core machine, as much as the
stock client's whole parse of it, and paid again by the cache for each answer it patches from a delta
reply or fetches whole. `fastjsonschema` compiles a schema to Python code and checks the same answer in
under a millisecond.

It is used for one answer only: *valid*. Whenever it says no, or cannot be trusted to say yes for a schema,
the SDK's own check runs and decides, with the SDK's own error, so a caller never sees a different verdict
or message than without the cache. Trusted means: `fastjsonschema` implements drafts 4 to 7, the MCP SDK
2020-12, and the two agree on what this module lets through (`_why_not`). Left to the SDK are schemas with
keywords whose meaning changed between the drafts (`$ref` beside other assertions, which draft 7 ignores;
array-form `items`; `dependencies`; `prefixItems`, `unevaluated*`, `minContains`/`maxContains`, the
`dependent*` pair), keywords draft 7 does not know and 2020-12 asserts, references that leave the document
(`fastjsonschema` would fetch them over the network), `$id`/anchors (they move the base of references),
`multipleOf` (float division, where the two libraries' edge cases differ), schemas whose `$schema` names
draft 4 or 3 (the SDK checks them by that draft: 1.0 is no integer in draft 4), and schemas the SDK's
metaschema check refuses (the SDK raises on every call for those; `fastjsonschema` compiles many).
Formats are not asserted, as the SDK's validator does not assert them; defaults are never filled in
(`fastjsonschema` would write them into the answer). tests/client/test_schemas.py checks the agreement
with Hypothesis against `jsonschema`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from cachetools import LRUCache

__all__ = ["SCHEMAS", "FastSchemas"]

logger = logging.getLogger("mcpcache.client")

_SUBSCHEMA = frozenset({"additionalProperties", "items", "contains", "propertyNames", "not", "if", "then", "else"})
_SUBSCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf"})
_SUBSCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})
_CHANGED_MEANING = frozenset(
    {
        "$id",
        "id",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "$vocabulary",
        "dependencies",
        "dependentRequired",
        "dependentSchemas",
        "prefixItems",
        "additionalItems",
        "unevaluatedItems",
        "unevaluatedProperties",
        "minContains",
        "maxContains",
        "contentSchema",
        "multipleOf",
    }
)
_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$comment",
        "title",
        "description",
        "default",
        "examples",
        "readOnly",
        "writeOnly",
        "deprecated",
        "format",
        "contentMediaType",
        "contentEncoding",
    }
)
_DEPTH = 64


def _why_not(schema: Any, depth: int = 0) -> str | None:
    """Why `fastjsonschema` cannot be trusted to accept for `schema` (None: it can)."""
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return f"a schema that is a {type(schema).__name__}"
    if depth > _DEPTH:
        return "a schema nested too deeply"
    for keyword, value in schema.items():
        if keyword in _CHANGED_MEANING:
            return f"the keyword {keyword!r}"
        if keyword == "$ref":
            if not isinstance(value, str) or not value.startswith("#"):
                return "a reference outside the document"
            if any(other not in _ANNOTATIONS and other not in ("$ref", "$defs", "definitions") for other in schema):
                return "a reference beside other assertions (draft 7 ignores them)"
        elif keyword in _SUBSCHEMA:
            if keyword == "items" and not isinstance(value, dict | bool):
                return "array-form items"
            if (why := _why_not(value, depth + 1)) is not None:
                return why
        elif keyword in _SUBSCHEMA_LISTS:
            if not isinstance(value, list):
                return f"{keyword} that is not a list"
            for part in value:
                if (why := _why_not(part, depth + 1)) is not None:
                    return why
        elif keyword in _SUBSCHEMA_MAPS:
            if not isinstance(value, dict):
                return f"{keyword} that is not an object"
            for part in value.values():
                if (why := _why_not(part, depth + 1)) is not None:
                    return why
    return None


_Validate = Callable[[Any], Any]


class FastSchemas:
    """Compiled quick checks, one per output schema (held by identity: the SDK keeps one dict per tool until
    it lists the tools again), at most `max_schemas` of them."""

    def __init__(self, max_schemas: int = 256) -> None:
        self._compiled: LRUCache[int, tuple[object, _Validate | None]] = LRUCache(max_schemas)

    def accepts(self, schema: Mapping[str, Any] | bool, instance: Any) -> bool:
        """True when `instance` certainly fits `schema`; False when that is not known this way (the SDK's
        check then decides). Never raises."""
        check = self._check_for(schema)
        if check is None:
            return False
        try:
            check(instance)
        except Exception:  # JsonSchemaException, or anything a compiled check trips on: not known
            return False
        return True

    def _check_for(self, schema: Mapping[str, Any] | bool) -> _Validate | None:
        held = self._compiled.get(id(schema))
        if held is not None and held[0] is schema:
            return held[1]
        check = _compile(schema)
        self._compiled[id(schema)] = (schema, check)
        return check


SCHEMAS = FastSchemas()
"""The process's compiled checks (schemas are few, and held by identity)."""


def _sdk_would_check(schema: Mapping[str, Any] | bool) -> str | None:
    """Why the SDK's own check of `schema` differs from the 2020-12 one `_why_not` is written for (None: it
    does not). The SDK picks its validator by `$schema` (draft 4 counts 1.0 as no integer, draft 3 has
    `required: true`) and refuses, on every call, a schema its metaschema refuses (`fastjsonschema` compiles
    many of those, `{"maxLength": 1.5}` or a `title` that is no string, and would say valid)."""
    try:
        from jsonschema import validators  # type: ignore[import-untyped]

        with warnings.catch_warnings():  # an unknown `$schema`: the SDK warns of it on its own check
            warnings.simplefilter("ignore", DeprecationWarning)
            cls = validators.validator_for(schema)
        if cls not in (
            validators.Draft202012Validator,
            validators.Draft201909Validator,
            validators.Draft7Validator,
            validators.Draft6Validator,
        ):
            return f"a schema of {cls.__name__}"
        cls.check_schema(schema)
    except Exception as error:  # an unusable `$schema`, or a schema its metaschema refuses: the SDK's to say
        return f"a schema the SDK refuses or reads otherwise ({type(error).__name__})"
    return None


def _compile(schema: Mapping[str, Any] | bool) -> _Validate | None:
    why = _why_not(schema) or _sdk_would_check(schema)
    if why is not None:
        logger.debug("output schema checked by the SDK alone: %s", why)
        return None
    try:
        import fastjsonschema
    except ImportError:
        return None
    definition: Any = schema
    if isinstance(schema, Mapping) and "$schema" in schema:
        # fastjsonschema picks its draft by `$schema` and refuses the ones it does not know (2020-12).
        definition = {key: value for key, value in schema.items() if key != "$schema"}
    try:
        compiled: _Validate = fastjsonschema.compile(
            definition, use_default=False, use_formats=False, detailed_exceptions=False
        )
    except Exception:  # a schema it cannot compile is the SDK's to judge
        logger.debug("output schema checked by the SDK alone: fastjsonschema could not compile it", exc_info=True)
        return None
    return compiled
