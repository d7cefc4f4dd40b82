"""`CacheSettings`: one frozen value for how a `ToolCache` behaves, checked when it is made."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.stores import MemoryStore


@pytest.mark.parametrize(
    ("given", "error", "words"),
    [
        ({"max_answer_bytes": 0}, ValueError, "max_answer_bytes"),
        ({"max_answer_bytes": True}, ValueError, "max_answer_bytes"),
        ({"decoded_tier_bytes": -1}, ValueError, "decoded_tier_bytes"),
        ({"background_revalidations": 1.5}, ValueError, "background_revalidations"),
        ({"keep_stale_s": -1}, ValueError, "keep_stale_s"),
        ({"store_deadline_s": 0}, ValueError, "store deadline"),
        ({"deltas": "yes"}, TypeError, "deltas"),
        ({"keep_private": None}, TypeError, "keep_private"),
        ({"meta_key": ""}, TypeError, "meta_key"),
        ({"key_arguments": {"read": "path"}}, TypeError, "list of argument names"),
        ({"key_arguments": {"read": ["path"]}, "ignore_arguments": {"read": ["id"]}}, ValueError, "not both"),
    ],
)
def test_a_bad_setting_raises_when_the_settings_are_made(given: dict[str, Any], error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        CacheSettings(**given)


def test_settings_are_a_frozen_value_shared_by_caches_and_varied_by_replace() -> None:
    names = ["path"]
    settings = CacheSettings(trusted=True, key_arguments={"read": names})
    names.append("id")  # the caller's list changes: the settings keep what they were given
    assert settings.key_arguments == {"read": ("path",)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.trusted = False  # type: ignore[misc]
    store = MemoryStore()
    first, second = ToolCache(store, settings, partition="a"), ToolCache(store, settings, partition="b")
    assert first.settings is second.settings
    anonymous = dataclasses.replace(settings, keep_private=False)
    assert (anonymous.trusted, anonymous.keep_private, settings.keep_private) == (True, False, True)
    assert hash(settings) == hash(CacheSettings(trusted=True, key_arguments={"read": ["path"]}))


def test_the_cache_takes_settings_or_none_and_nothing_else() -> None:
    assert ToolCache(MemoryStore()).settings == CacheSettings()
    with pytest.raises(TypeError, match="CacheSettings"):
        ToolCache(MemoryStore(), {"trusted": True})  # type: ignore[arg-type]
