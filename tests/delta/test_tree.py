"""The tree digest (`mcpcache.delta.tree`, docs/protocol.md "The tree digest"): the form against its
vectors and a second implementation written from the text, and the update from a base's leaves and the
ops against computing from scratch, over random documents and edits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpcache.canonical import CanonicalizationError
from mcpcache.delta import apply, diff
from mcpcache.delta.tree import TREE_DIGEST_PREFIX, leaves_of, root_of, tree_digest, updated
from tests.delta.strategies import documents, edited_pairs, notebook_pairs, table_pairs
from tests.support import second_canonical

VECTORS = Path(__file__).parents[2] / "docs" / "vectors" / "tree-digest.json"


def _result(document: dict[str, Any]) -> dict[str, Any]:
    """The answer a document describes, in wire form (what the second implementation reads)."""
    return dict(document)


def _second(document: dict[str, Any]) -> str | None:
    try:
        return second_canonical.tree_digest(_result(document))
    except second_canonical.NoCanonicalForm:
        return None


def _ours(document: dict[str, Any]) -> str | None:
    try:
        return tree_digest(document)
    except CanonicalizationError:
        return None


def test_the_vectors_hold() -> None:
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))
    assert len(vectors["answers"]) >= 5
    for vector in vectors["answers"]:
        document = vector["document"]
        assert tree_digest(document) == vector["digest"], vector["name"]
        assert second_canonical.tree_digest(document) == vector["digest"], vector["name"]
        if "editedDocument" in vector:
            ops = vector["ops"]
            assert apply(document, ops) == vector["editedDocument"]
            assert root_of(updated(leaves_of(document), ops, vector["editedDocument"])) == vector["editedDigest"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_the_form_is_the_one_the_text_describes(document: dict[str, Any]) -> None:
    ours = _ours(document)
    assert ours == _second(document)
    if ours is not None:
        assert ours.startswith(TREE_DIGEST_PREFIX)
        assert len(ours) == len(TREE_DIGEST_PREFIX) + 64


def _check_update(old: dict[str, Any], new: dict[str, Any]) -> None:
    ops = diff(old, new, max_bytes=1 << 30)
    assert ops is not None
    try:
        base = leaves_of(old)
        whole = leaves_of(new)
    except CanonicalizationError:
        return
    patched = apply(old, ops)
    assert updated(base, ops, patched) == whole
    assert root_of(updated(base, ops, patched)) == root_of(whole)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edited_pairs())
def test_the_update_from_a_base_s_leaves_is_the_digest_from_scratch(
    pair: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    _check_update(*pair)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(notebook_pairs() | table_pairs())
def test_the_update_follows_notebook_edits(pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _check_update(*pair)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(), st.data())
def test_any_op_list_updates_to_the_digest_from_scratch(document: dict[str, Any], data: st.DataObject) -> None:
    """Ops a peer might send (moves, copies, tests, whole parts replaced), not only the ones `diff` writes."""
    paths = ["/content/0", "/content/-", "/structuredContent", "/_meta", ""]
    for key, value in (document.get("structuredContent") or {}).items():
        token = key.replace("~", "~0").replace("/", "~1")
        paths.append(f"/structuredContent/{token}")
        if isinstance(value, list) and value:
            paths += [f"/structuredContent/{token}/0", f"/structuredContent/{token}/{len(value) - 1}"]
    ops: list[dict[str, Any]] = []
    for _ in range(data.draw(st.integers(1, 4))):
        name = data.draw(st.sampled_from(["add", "remove", "replace", "move", "copy", "test"]))
        op: dict[str, Any] = {"op": name, "path": data.draw(st.sampled_from(paths))}
        if name in ("move", "copy"):
            op["from"] = data.draw(st.sampled_from(paths))
        if name in ("add", "replace", "test"):
            op["value"] = data.draw(st.sampled_from([1, "x", [1, 2], {"a": None}]))
        ops.append(op)
    try:
        patched = apply(document, ops)
    except Exception:  # ops that do not apply are refused before any digest
        return
    if not isinstance(patched.get("content"), list):
        return
    try:  # a document with a number no double holds has no digest, before or after the ops
        before, whole = leaves_of(document), leaves_of(patched)
    except CanonicalizationError:
        return
    assert updated(before, ops, patched) == whole


def test_strict_updates_read_only_what_the_ops_touched() -> None:
    old = {"content": [{"type": "text", "text": "a"}], "structuredContent": {"cells": [1, 2, 3], "n": 3}}
    new = {"content": [{"type": "text", "text": "b"}], "structuredContent": {"cells": [1, 9, 3], "n": 3}}
    ops = [
        {"op": "splice", "path": "/content/0/text", "offset": 0, "remove": 1, "insert": "b"},
        {"op": "replace", "path": "/structuredContent/cells/1", "value": 9},
    ]
    sparse = {"content": new["content"], "structuredContent": {"cells": [None, 9, None], "n": None}}
    assert updated(leaves_of(old), ops, sparse, strict=True) == leaves_of(new)
    with pytest.raises(ValueError, match="leaf by leaf"):
        updated(leaves_of(old), [{"op": "replace", "path": "", "value": new}], sparse, strict=True)
