"""The follow-up proposals' server scenarios: delta replies (docs/seps/deltas.md), the stale windows
(docs/seps/stale-serving.md) and key arguments (docs/seps/key-arguments.md).

Each is judged on the same probe calls as the core proposal's (`mcpcache.check.server_rules.PROBES`) and
the tool's `tools/list` entry, by pure functions; `mcpcache.check.suite` puts all the scenarios together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as mt
from pydantic import ValidationError

from mcpcache import delta
from mcpcache.canonical import CanonicalizationError
from mcpcache.check.core import DELTA, KEY_DECLARATION, STALE_BLOCK, Judged, Scenario
from mcpcache.check.observations import ToolObservations
from mcpcache.check.server_rules import (
    MALFORMED,
    _error_text,
    _first_failure,
    _tag_or_na,
    duration_problems,
    mutation_needed,
)
from mcpcache.check.wire import (
    answer_of,
    block_dict,
    claims_not_modified,
    differences,
    is_error,
    plural,
    raw_block,
    sent_tag,
    short,
)
from mcpcache.etag import answer_digest
from mcpcache.key_arguments import MalformedKeyArguments, key_arguments_of
from mcpcache.protocol import (
    STALE_IF_ERROR_KEY,
    STALE_WHILE_REVALIDATE_KEY,
    DeltaBlock,
    MalformedDelta,
    parse_delta,
    weak_equal,
)

# -- delta replies ---------------------------------------------------------------------------------

NOT_ASKED = ("first", "second", "current", "wrong", *MALFORMED, "other-form", "after", "old-after")
"""Probes whose request lists no delta format: none of their replies may carry a delta."""


def _has_delta(result: Mapping[str, Any] | None, meta_key: str) -> bool:
    block = block_dict(result or {}, meta_key)
    return block is not None and "delta" in block


def judge_delta_only_when_asked(obs: ToolObservations) -> Judged:
    if (why := _first_failure(obs)) is not None:
        return Judged.not_applicable(why)
    carried = [name for name in (*NOT_ASKED, "delta-format") if _has_delta(obs.result(name), obs.meta_key)]
    if carried:
        return Judged.broken(
            f"a delta answered the {', '.join(carried)} call{'s' if len(carried) > 1 else ''}, which accepted "
            "no delta format (or only one nobody sends)"
        )
    return Judged.ok("no reply to a call that accepted no format the server sends carried a delta")


def judge_delta_base_unknown(obs: ToolObservations) -> Judged:
    if (skip := _tag_or_na(obs)) is not None:
        return skip
    exchange = obs.get("delta-unknown")
    if exchange is None:
        return Judged.not_applicable("the second call gave no tag")
    reply = exchange.result
    if reply is None:
        return Judged.broken(f"the conditional call failed: {exchange.error}")
    if _has_delta(reply, obs.meta_key):
        return Judged.broken("a delta against a tag the server never issued: it cannot hold that answer")
    if claims_not_modified(reply, obs.meta_key):
        return Judged.broken("answered not-modified to a tag it never issued")
    if is_error(reply):
        return Judged.broken(f"answered an error: {_error_text(reply)}")
    return Judged.ok("the full answer")


def _rebuilt(held: Mapping[str, Any], found: DeltaBlock, meta_key: str) -> mt.CallToolResult | str:
    """The answer a client builds from the answer it held and the delta, or why it cannot."""
    try:
        copy = mt.CallToolResult.model_validate(dict(held))
        return delta.result_of(delta.apply(delta.document_of(copy, meta_key), found.ops))
    except delta.DeltaError as exc:
        return f"the ops do not apply to the answer sent under the base tag: {short(str(exc), 160)}"
    except ValidationError as exc:
        return f"the answer held is not a tool result: {short(str(exc), 120)}"


def judge_delta(obs: ToolObservations) -> Judged:
    if (skip := _tag_or_na(obs)) is not None:
        return skip
    exchange, held, current = obs.get("delta-after"), obs.result("second"), obs.result("after")
    if exchange is None or held is None or current is None:
        return Judged.untried("no older answer to ask a delta against (no --mutate call)", mutation_needed(obs))
    reply = exchange.result
    if reply is None:
        return Judged.broken(f"the conditional call failed: {exchange.error}")
    if not _has_delta(reply, obs.meta_key):
        if claims_not_modified(reply, obs.meta_key) or is_error(reply):
            return Judged.not_applicable("no full answer and no delta to the old tag (the mutation row judges it)")
        return Judged.not_applicable("the full answer (a server MAY send a delta; this one did not)")
    block = block_dict(reply, obs.meta_key) or {}
    found = parse_delta(block.get("delta"))
    if isinstance(found, MalformedDelta):
        return Judged.broken(f"the delta is malformed: {found.reason}")
    sent = obs.current_tag
    problems = []
    if found.format not in delta.FORMATS:
        problems.append(f"format {short(found.format)} was not asked for")
    if not weak_equal(found.base, sent):
        problems.append(f"its base {short(found.base, 44)} is not the tag sent")
    if reply.get("content") != []:
        problems.append("content is not empty")
    if claims_not_modified(reply, obs.meta_key):
        problems.append("it also claims notModified")
    if is_error(reply):
        problems.append("it is an error")
    if problems:
        return Judged.broken("; ".join(problems))
    answer = _rebuilt(held, found, obs.meta_key)
    if isinstance(answer, str):
        return Judged.broken(answer)
    try:
        if found.format == delta.TREE_FORMAT:
            digest = delta.tree_digest(delta.document_of(answer, obs.meta_key))
        else:
            digest = answer_digest(answer.content, answer.structured_content, answer.meta, meta_key=obs.meta_key)
    except CanonicalizationError as exc:
        return Judged.broken(f"the answer built has no digest form ({exc}): no delta should have been sent")
    if digest != found.digest:
        return Judged.broken(f"the digest of the answer built is {digest}, the delta says {found.digest}")
    rebuilt = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
    if answer_of(rebuilt, obs.meta_key) != answer_of(current, obs.meta_key):
        if not weak_equal(sent_tag(reply, obs.meta_key), sent_tag(current, obs.meta_key)):
            return Judged.not_applicable("the answer changed between the full read and the delta")
        changed = differences(rebuilt, current, obs.meta_key)
        return Judged.broken(f"the answer built differs from the full answer under the same tag: {', '.join(changed)}")
    size = f"{plural(exchange.reply_bytes, 'byte')} on the wire" if exchange.reply_bytes is not None else "sent"
    full = obs.get("after")
    of = f" (the full answer: {plural(full.reply_bytes, 'byte')})" if full and full.reply_bytes else ""
    form = "tree digest" if found.format == delta.TREE_FORMAT else "digest"
    return Judged.ok(f"{plural(len(found.ops), 'op')}, {size}{of}; rebuilds the full answer; the {form} matches")


# -- the stale windows -----------------------------------------------------------------------------

STALE_KEYS = (STALE_WHILE_REVALIDATE_KEY, STALE_IF_ERROR_KEY)


def judge_stale_windows(obs: ToolObservations) -> Judged:
    if (why := _first_failure(obs)) is not None:
        return Judged.not_applicable(why)
    problems: list[str] = []
    notes: list[str] = []
    granted: dict[str, object] = {}
    for probe in ("first", "second", "current"):
        result = obs.result(probe)
        block = raw_block(result, obs.meta_key) if result is not None else None
        if not isinstance(block, Mapping):
            continue
        found, noted = duration_problems(block, STALE_KEYS)
        problems += [f"{probe} reply: {p}" for p in found if f"{probe} reply: {p}" not in problems]
        notes += [n for n in noted if n not in notes]
        granted.update({key: block[key] for key in STALE_KEYS if key in block})
    if problems:
        return Judged.broken("; ".join(problems) + " (a client reads a window nobody meant as absent)")
    if not granted:
        return Judged.not_applicable("its answers grant no stale window")
    return Judged.ok("; ".join([", ".join(f"{k}={v}" for k, v in granted.items()), *notes]))


# -- key arguments ---------------------------------------------------------------------------------


def judge_key_declaration(obs: ToolObservations) -> Judged:
    meta = obs.entry.get("_meta")
    declared = meta.get(obs.meta_key) if isinstance(meta, Mapping) else None
    found = key_arguments_of(declared)
    if found is None:
        return Judged.not_applicable("its tools/list entry declares no key arguments")
    if isinstance(found, MalformedKeyArguments):
        return Judged.broken(f"the declaration is malformed: {found.reason} (a client keys on every argument)")
    properties = (
        obs.entry.get("inputSchema", {}).get("properties")
        if isinstance(obs.entry.get("inputSchema"), Mapping)
        else None
    )
    named = found.only if found.only is not None else found.ignore
    unknown = sorted(name for name in named if isinstance(properties, Mapping) and name not in properties)
    note = f"; not in the input schema: {', '.join(unknown)}" if unknown else ""
    return Judged.ok(f"{short(found.block(), 80)}{note}")


STALE_WINDOWS_SCENARIO = Scenario(
    "stale-windows",
    "The stale windows are well-formed",
    STALE_BLOCK,
    "required",
    judge_stale_windows,
    expects="where an answer's or a not-modified reply's block carries `staleWhileRevalidateMs` or "
    "`staleIfErrorMs`, each is an integer >= 0 (n/a when no answer grants one)",
    sends=("first", "second", "current"),
)

KEY_DECLARATION_SCENARIO = Scenario(
    "key-declaration",
    "A key-arguments declaration is well-formed",
    KEY_DECLARATION,
    "required",
    judge_key_declaration,
    expects="where the tool's `tools/list` entry declares `keyArguments` or `ignoreArguments` under "
    '`_meta["io.modelcontextprotocol/cache"]`, it declares one of them, as an array of at most 256 non-empty '
    "strings (n/a when it declares neither)",
)


DELTA_SCENARIOS: tuple[Scenario[ToolObservations], ...] = (
    Scenario(
        "delta-asked",
        "A delta only when asked",
        DELTA,
        "required",
        judge_delta_only_when_asked,
        expects="no reply to a call whose request lists no delta format the server sends (no `acceptDelta`, or "
        "only an unknown format) carries a `delta` in its block",
        sends=(*NOT_ASKED, "delta-format"),
    ),
    Scenario(
        "delta-base",
        "A base the server never sent gets the full answer",
        DELTA,
        "required",
        judge_delta_base_unknown,
        expects="the full answer to a tag never issued, even when the request accepts deltas: not an error, no "
        "`notModified`, no `delta`",
        sends=("second", "delta-unknown"),
    ),
    Scenario(
        "delta",
        "A delta rebuilds the current answer, and its digest matches",
        DELTA,
        "required",
        judge_delta,
        expects="when the reply to the old tag with `acceptDelta` is a delta: the format asked for, `base` weakly "
        "equal to the tag sent, `content: []`, no `notModified`; its ops applied to the answer held under that "
        "tag give an answer whose digest is the delta's and which is the full answer the server now sends "
        "(a full answer instead is not applicable: deltas are optional)",
        sends=("second", "after", "delta-after"),
    ),
)
STALE_SCENARIOS: tuple[Scenario[ToolObservations], ...] = (STALE_WINDOWS_SCENARIO,)
KEY_ARGUMENT_SCENARIOS: tuple[Scenario[ToolObservations], ...] = (KEY_DECLARATION_SCENARIO,)
