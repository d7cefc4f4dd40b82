"""The chunks of a text block in the tree digest (`mcpcache.delta.chunks`): the rule against a byte-by-byte
reading of docs/protocol.md, and the update after splices against chunking the new text from scratch."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mcpcache.delta.chunks as chunks
from mcpcache.canonical import CanonicalizationError
from mcpcache.delta import apply
from mcpcache.delta.chunks import MAX_BYTES, chunks_of, rechunked
from mcpcache.delta.tree import leaves_of, root_of, tree_digest, updated
from tests.support import second_canonical

_ALPHABET = 'abcdefghijklmnopqrstuvwxyz      ,.:{}[]"\\\n0123456789\u00e9\u6f22\U0001f600'


def _text(rng: random.Random, length: int) -> str:
    kind = rng.random()
    if kind < 0.15:
        return rng.choice("a\u00e9\u6f22") * length  # no pattern anywhere: cut every MAX_BYTES
    return "".join(rng.choices(_ALPHABET, k=length))


def _hashes(text: str) -> list[bytes]:
    found = chunks_of(text).hashes
    return [found[i : i + 32] for i in range(0, len(found), 32)]


def test_the_rule_is_the_one_the_text_describes() -> None:
    rng = random.Random(11)
    texts = ["", "x", _text(rng, 30_000), "\u00e9" * 70_000, "a" * (MAX_BYTES + 1), "\u6f22" * 50_000]
    texts += ["a" * (MAX_BYTES - 1) + "\u00e9" + _text(rng, 9_000)]
    for text in texts:
        second = second_canonical.text_chunks(text)
        assert b"".join(second) == text.encode()
        assert _hashes(text) == [chunks._hash(chunk) for chunk in second]
        assert list(chunks_of(text).ends) == [len(b"".join(second[: i + 1]).decode()) for i in range(len(second))]


def test_a_lone_surrogate_has_no_chunks() -> None:
    with pytest.raises(CanonicalizationError):
        chunks_of("ab\ud800cd")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.sampled_from([0, 3, 900, 12_000, 140_000]), st.integers(1, 4))
def test_splices_rechunk_to_the_chunks_from_scratch(seed: int, length: int, count: int) -> None:
    rng = random.Random(seed)
    text = _text(rng, length)
    base = chunks_of(text)
    splices = []
    for _ in range(count):
        offset = rng.randint(0, len(text))
        removed = rng.randint(0, min(len(text) - offset, rng.choice([0, 4, 3_000, 70_000])))
        insert = _text(rng, rng.choice([0, 1, 9, 2_000, 70_000]))
        text = text[:offset] + insert + text[offset + removed :]
        splices.append((offset, removed, len(insert)))
    assert rechunked(base, splices, text) == chunks_of(text)


def test_splices_that_do_not_fit_give_none() -> None:
    text = _text(random.Random(3), 20_000)
    assert rechunked(chunks_of(text), [(19_999, 5, 0)], text[:-4]) is None
    assert rechunked(chunks_of(text), [(0, 0, 3)], text) is None


def test_a_splice_in_a_long_text_rehashes_a_few_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the chunks are for: a one-line edit of a 1 MB text block costs its neighbourhood, not 2 MB."""
    rng = random.Random(5)
    text = "".join(rng.choices(_ALPHABET[:40], k=1_000_000))
    document: dict[str, Any] = {"content": [{"type": "text", "text": text}], "structuredContent": {"n": 1}}
    base = leaves_of(document)
    ops = [{"op": "splice", "path": "/content/0/text", "offset": 500_000, "remove": 7, "insert": "x = 2\n"}]
    edited = apply(document, ops)
    hashed: list[int] = []
    inner = chunks._hash

    def counted(data: Any) -> bytes:
        hashed.append(len(data))
        return inner(data)

    monkeypatch.setattr(chunks, "_hash", counted)
    leaves = updated(base, ops, edited, strict=True)
    assert len(hashed) <= 3
    assert sum(hashed) <= 3 * MAX_BYTES
    monkeypatch.undo()
    assert root_of(leaves) == tree_digest(edited)
