"""A key-argument declaration written wrong raises where it is written, with a clear error.

`key_arguments="query"` (a string, not a list) was read as the names "q", "u", "e", "r", "y": keys naming no
argument, so every call of the tool had one key (its validator tag, its delta history, and a trusting
client's entry shared across queries: a wrong answer). A name that is not a string raised a bare
comparison error from sorting."""

from __future__ import annotations

from typing import Any

import pytest

from mcpcache.server import CachePolicy, cache_meta
from mcpcache.server.policies import ToolPolicies


@pytest.mark.parametrize("field", ["key_arguments", "ignore_arguments"])
def test_a_string_is_not_a_list_of_names(field: str) -> None:
    with pytest.raises(TypeError, match="not a string"):
        cache_meta(ttl_ms=1000, **{field: "query"})
    policies = ToolPolicies()
    with pytest.raises(TypeError, match="not a string"):
        policies.cacheable(ttl_ms=1000, **{field: "query"})


@pytest.mark.parametrize("field", ["key_arguments", "ignore_arguments"])
@pytest.mark.parametrize("names", [["query", 1], ["query", None], ["query", ""]])
def test_names_that_are_not_strings_get_a_clear_error(field: str, names: list[Any]) -> None:
    with pytest.raises(ValueError, match="non-empty strings"):
        CachePolicy(ttl_ms=1000, **{field: tuple(names)})
    with pytest.raises(ValueError, match="non-empty strings"):
        cache_meta(ttl_ms=1000, **{field: names})


def test_good_declarations_are_sorted_and_deduplicated() -> None:
    assert CachePolicy(key_arguments=("b", "a", "b")).key_arguments == ("a", "b")
    assert CachePolicy(ignore_arguments=("z", "y")).ignore_arguments == ("y", "z")
    assert CachePolicy(ignore_arguments=()).ignore_arguments == ()
    assert cache_meta(ttl_ms=1, key_arguments=["q"])["io.modelcontextprotocol/cache"]["keyArguments"] == ["q"]
