"""Delta replies a well-behaved server never sends, from a server that sends them on purpose.

The lab's SDK server answers a conditional request that accepts deltas with an honest delta reply (its
server half is mcpcache's); its hostile layer (tests/client/lab.py) then damages that reply on the wire, or
makes up a delta nobody asked for. Each case must end the same way: the call is asked again without a tag
and without `acceptDelta`, the caller gets the server's whole current answer (equal to a stock client's
full read), the answer is stored, and the outcome and the totals say a delta could not be used. Never an
exception in the caller's path, never a wrong answer; a server that insists gets an error result that says
what happened.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from support.transports import ERAS, MODERN, Era, ServerTarget

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.delta import FORMAT, FORMATS, MAX_OPS, diff
from mcpcache.etag import answer_digest
from mcpcache.protocol import ACCEPT_DELTA_KEY, DELTA_KEY, META_KEY, NOT_MODIFIED_KEY
from mcpcache.stores import MemoryStore

from .harness import VIEW_KINDS, FakeClock, ViewKind, assert_full_answer, connect, plain
from .lab import Lab, Rewrite, build_lab

pytestmark = pytest.mark.anyio

KEY = {"key": "k"}
OTHER_TAG = 'W/"00000000000000000000000000000000"'
LONG = " ".join(f"line {n}: the quick brown fox jumps over the lazy dog" for n in range(150))
Damage = Callable[[dict[str, Any]], None]
"""Changes a delta reply's wire form in place (its `delta` block is `reply["_meta"][META_KEY]["delta"]`)."""


def edition(n: int) -> str:
    return f"{LONG}\nedition {n}"


def sent(meta: dict[str, Any] | None) -> tuple[bool, object]:
    """(whether a request carried a tag, what it listed under acceptDelta)."""
    inner = (meta or {}).get(META_KEY)
    if not isinstance(inner, dict):
        return (False, None)
    return ("etag" in inner, inner.get(ACCEPT_DELTA_KEY))


def delta_of(reply: dict[str, Any]) -> dict[str, Any]:
    delta: dict[str, Any] = reply["_meta"][META_KEY][DELTA_KEY]
    return delta


def is_delta(reply: dict[str, Any]) -> bool:
    block = (reply.get("_meta") or {}).get(META_KEY)
    return isinstance(block, dict) and DELTA_KEY in block


def damaging(damage: Damage) -> Rewrite:
    """Damage every delta reply; pass everything else through."""

    def rewrite(reply: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
        if not is_delta(reply):
            return reply
        damaged = copy.deepcopy(reply)
        damage(damaged)
        return damaged

    return rewrite


def set_delta(**fields: Any) -> Damage:
    def damage(reply: dict[str, Any]) -> None:
        delta_of(reply).update(fields)

    return damage


def set_block(**fields: Any) -> Damage:
    def damage(reply: dict[str, Any]) -> None:
        block = reply["_meta"][META_KEY]
        for name, value in fields.items():
            if value is ...:
                block.pop(name, None)
            else:
                block[name] = value

    return damage


def flip_an_inserted_character(reply: dict[str, Any]) -> None:
    """One character of what the ops put in changed (a byte flipped on the way): they still apply."""
    for op in delta_of(reply)["ops"]:
        for member in ("insert", "value"):
            if isinstance(op.get(member), str) and op[member]:
                text = op[member]
                op[member] = text[:-1] + chr(ord(text[-1]) ^ 1)
                return
    raise AssertionError("no string in the honest ops to damage")


def copy_bomb(reply: dict[str, Any]) -> None:
    """A few ops that would double the answer again and again: far past what a delta may put in."""
    delta_of(reply)["ops"] = [
        {"op": "copy", "from": "/structuredContent", "path": f"/structuredContent/again{n}"} for n in range(24)
    ]


def oversized() -> Damage:
    def damage(reply: dict[str, Any]) -> None:
        delta_of(reply)["ops"] = [{"op": "test", "path": ""}] * (MAX_OPS + 1)

    return damage


def malformed(value: Any) -> Damage:
    def damage(reply: dict[str, Any]) -> None:
        reply["_meta"][META_KEY][DELTA_KEY] = value

    return damage


def without(member: str) -> Damage:
    def damage(reply: dict[str, Any]) -> None:
        del delta_of(reply)[member]

    return damage


def marked_as_error(reply: dict[str, Any]) -> None:
    reply["isError"] = True


DAMAGED: dict[str, tuple[Damage, str]] = {
    "digest of another answer": (set_delta(digest="sha256:" + "0" * 64), "digest"),
    "a character of the ops flipped": (flip_an_inserted_character, "digest"),
    "ops that do not apply": (set_delta(ops=[{"op": "remove", "path": "/structuredContent/nothing"}]), "do not apply"),
    "an op nobody defined": (set_delta(ops=[{"op": "frobnicate", "path": ""}]), "do not apply"),
    "a splice out of range": (
        set_delta(ops=[{"op": "splice", "path": "/content/0/text", "offset": 10**9, "remove": 0, "insert": "x"}]),
        "do not apply",
    ),
    "ops that make something other than an answer": (
        set_delta(ops=[{"op": "add", "path": "/isError", "value": True}]),
        "do not apply",
    ),
    "ops that grow the answer past the bound": (copy_bomb, "do not apply"),
    "more ops than a delta may hold": (oversized(), "more than"),
    "a base that is not the tag sent": (set_delta(base=OTHER_TAG), "base"),
    "a format nobody asked for": (set_delta(format="json-patch+splice/99"), "did not accept"),
    "a delta that is not an object": (malformed("ops"), "malformed"),
    "a delta that is null": (malformed(None), "malformed"),
    "a delta without a digest": (without("digest"), "malformed"),
    "a delta without ops": (without("ops"), "malformed"),
    "a delta marked as an error": (marked_as_error, "error"),
    "a delta that also says not modified": (set_block(**{NOT_MODIFIED_KEY: True}), "not-modified"),
    "a delta that names no new tag": (set_block(etag=...), "no tag"),
}


async def honest_then_edited(conn: Any, lab: Lab, clock: FakeClock) -> None:
    """An answer stored honestly and gone stale, and the document changed since."""
    lab.docs.write("k", edition(1))
    first = await conn.call("read", KEY)
    assert first.outcome.stored
    lab.docs.write("k", edition(2))
    clock.advance(6)


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
@pytest.mark.parametrize("case", list(DAMAGED))
async def test_a_delta_that_cannot_be_used_is_a_repeat_in_full(
    case: str, view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    damage, why = DAMAGED[case]
    lab = Lab()
    async with connect(view_kind, ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        await honest_then_edited(conn, lab, clock)
        lab.rewrite = damaging(damage)
        lab.seen_meta.clear()
        mark = conn.mark()
        call = await conn.call("read", KEY)
        assert conn.tool_calls(mark) == 2
        assert [sent(meta) for meta in lab.seen_meta] == [(True, list(FORMATS)), (False, None)]
        lab.rewrite = None
        stock = await conn.direct("read", KEY)

    assert_full_answer(call.result)
    assert plain(call.result) == plain(stock)
    assert call.result.structured_content["text"] == edition(2)  # type: ignore[index]
    assert (call.outcome.status, call.outcome.stored) == ("miss", True)
    assert why in (call.outcome.delta_unused or ""), call.outcome.delta_unused
    assert "asked again without a tag" in call.outcome.reason
    assert (cache.stats.deltas_unused, cache.stats.patched, cache.stats.misses) == (1, 0, 2)


def made_up_delta(previous: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """A correct delta reply (ops and digest) from the answer `previous` to the full answer `reply`."""

    def document(answer: dict[str, Any]) -> dict[str, Any]:
        rest = {k: v for k, v in (answer.get("_meta") or {}).items() if k != META_KEY}
        return {"content": answer["content"], "structuredContent": answer["structuredContent"], "_meta": rest}

    ops = diff(document(previous), document(reply), max_bytes=1 << 30)
    assert ops is not None
    digest = answer_digest(reply["content"], reply["structuredContent"], reply.get("_meta"))
    block = dict(reply["_meta"][META_KEY])
    base = previous["_meta"][META_KEY]["etag"]
    block[DELTA_KEY] = {"base": base, "format": FORMAT, "ops": ops, "digest": digest}
    return {**reply, "content": [], "structuredContent": {"kind": "doc"}, "_meta": {**reply["_meta"], META_KEY: block}}


def unasked_deltas(*, to_untagged: bool) -> Rewrite:
    """Correct deltas against the last answer sent whole, to every conditional request (which never asked:
    the cache's deltas are off), and with `to_untagged` to ordinary calls as well."""
    previous: list[dict[str, Any]] = []

    def rewrite(reply: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
        tagged, _ = sent(meta)
        if previous and (tagged or to_untagged):
            return made_up_delta(previous[-1], reply)
        previous.append(reply)
        return reply

    return rewrite


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_delta_nobody_asked_for_is_a_repeat_in_full(view_kind: ViewKind, era: Era, clock: FakeClock) -> None:
    cache = ToolCache(MemoryStore(clock=clock), CacheSettings(deltas=False), clock=clock)
    lab = Lab()
    lab.rewrite = unasked_deltas(to_untagged=False)
    async with connect(view_kind, ServerTarget.memory(build_lab("sdk", lab)), era, cache) as conn:
        await honest_then_edited(conn, lab, clock)
        lab.seen_meta.clear()
        call = await conn.call("read", KEY)
        assert [sent(meta) for meta in lab.seen_meta] == [(True, None), (False, None)]
        lab.rewrite = None
        stock = await conn.direct("read", KEY)
    assert plain(call.result) == plain(stock)
    assert (call.outcome.status, call.outcome.stored) == ("miss", True)
    assert "accepted none" in (call.outcome.delta_unused or "")
    assert cache.stats.deltas_unused == 1


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_server_that_answers_only_with_deltas_gets_an_error_result(
    view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    """A call that asks for the whole answer (no tag) gets a delta, and so does its repeat: there is no answer,
    and the caller is told so, never handed the stub as if it were one."""
    lab = Lab()
    lab.rewrite = unasked_deltas(to_untagged=True)
    lab.docs.write("k", edition(1))
    async with connect(view_kind, ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        await conn.direct("read", KEY)  # the answer the server makes its deltas against
        lab.docs.write("k", edition(2))
        lab.seen_meta.clear()
        failed = await conn.call("read", KEY)
        assert [sent(meta) for meta in lab.seen_meta] == [(False, None), (False, None)]
    assert failed.result.is_error
    assert "delta" in failed.result.content[0].text  # type: ignore[union-attr]
    assert failed.result.structured_content is None, "never the stub's {'kind': ...}"
    assert (failed.outcome.status, failed.outcome.stored) == ("miss", False)
    assert "delta reply to a request that carried no tag" in (failed.outcome.delta_unused or "")
    assert cache.stats.deltas_unused == 1
