"""The server half of the suite, as data: the calls made to each tool (`PROBES`) and the core proposal's
scenarios judged on what came back (`CORE_SCENARIOS`; the follow-ups' are in `mcpcache.check.sep_rules`,
and `mcpcache.check.suite` puts them together).

Every judge is a pure function of a `ToolObservations`: the raw results of the probe calls, their sizes on
the wire, the tool's `tools/list` entry. `mcpcache.check.probe` makes the calls; nothing here does I/O.
The rules are docs/protocol.md's; each scenario names the section it checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

from jsonschema import exceptions as jsonschema_exceptions  # type: ignore[import-untyped]
from jsonschema import validators
from referencing import Registry

from mcpcache import delta
from mcpcache.check.core import BLOCK, META_COVERED, REPLY, TAG, Judged, Scenario
from mcpcache.check.observations import Exchange, ToolObservations
from mcpcache.check.wire import (
    block_dict,
    claims_not_modified,
    differences,
    is_error,
    meta_only_differences,
    other_meta,
    plural,
    raw_block,
    sent_tag,
    short,
)
from mcpcache.protocol import (
    DELTA_KEY,
    MAX_TTL_MS,
    STALE_IF_ERROR_KEY,
    STALE_WHILE_REVALIDATE_KEY,
    parse_etag,
    weak_equal,
)

STALE_KEYS = (STALE_WHILE_REVALIDATE_KEY, STALE_IF_ERROR_KEY)

NOT_MODIFIED_BOUND = 1024
"""Bytes on the wire a not-modified reply may take: it carries no answer, only the block and `{kind}`
(mcpcache's is 258-362 B), so its size must not grow with the answer."""

OTHER_TAG = 'W/"mcpcache-check-a-tag-never-issued"'
"""A well-formed tag no server minted: a conditional call with it must get the full answer."""

UNKNOWN_FORMAT = "mcpcache-check/no-such-format"
"""A delta format nobody sends: a request accepting only it must not get a delta."""


# -- probes ----------------------------------------------------------------------------------------

TagChoice = Callable[[ToolObservations], object]
"""The `etag` to send, from what was seen so far; `SKIP` leaves the probe out (no tag to build it from)."""
SKIP = object()


def _current(obs: ToolObservations) -> object:
    return obs.current_tag if obs.current_tag is not None else SKIP


def _with_current(make: Callable[[str], object]) -> TagChoice:
    return lambda obs: make(obs.current_tag) if obs.current_tag is not None else SKIP


def _other_form(tag: str) -> str:
    """The same opaque tag in the other form: strong for a weak tag, weak for a strong one."""
    return tag.removeprefix("W/") if tag.startswith("W/") else f"W/{tag}"


MALFORMED: dict[str, Callable[[str], object]] = {
    "malformed-unquoted": lambda tag: tag.replace('"', ""),
    "malformed-junk": lambda tag: tag + " x",
    "malformed-number": lambda tag: 12345,
}
"""Forms of the current tag that are not entity tags: each equals nothing, not even the tag it came from."""


@dataclass(frozen=True)
class Probe:
    """One call the suite makes to every tool it checks, in order."""

    name: str
    purpose: str
    phase: Literal["before", "after"] = "before"
    """"after": made only after the user's mutating calls."""
    tag: TagChoice | None = None
    """None: an ordinary call."""
    invalid: bool = False
    """Send arguments the tool's input schema refuses, to get an error result."""
    shown: object = None
    """The `etag` this probe sends, as a suite written elsewhere would describe it (a literal, or a
    `<placeholder>`); None for an ordinary call."""
    accept_delta: tuple[str, ...] = ()
    """The delta formats the request lists beside its tag (`acceptDelta`); empty: none."""


CURRENT = "<the tag of the second answer>"
MALFORMED_SHOWN = {
    "malformed-unquoted": "<that tag with its quotes removed>",
    "malformed-junk": "<that tag followed by ' x'>",
    "malformed-number": 12345,
}

PROBES: tuple[Probe, ...] = (
    Probe("first", "an ordinary call"),
    Probe("second", "the same call again"),
    Probe("current", "conditional, with the current tag", tag=_current, shown=CURRENT),
    Probe(
        "wrong",
        "conditional, with a tag the server never issued",
        tag=_with_current(lambda tag: OTHER_TAG),
        shown=OTHER_TAG,
    ),
    *(
        Probe(
            name,
            f"conditional, with a malformed tag ({name[10:]})",
            tag=_with_current(make),
            shown=MALFORMED_SHOWN[name],
        )
        for name, make in MALFORMED.items()
    ),
    Probe(
        "other-form",
        "conditional, with the current tag in its other (strong/weak) form",
        tag=_with_current(_other_form),
        shown="<that tag without W/ if it is weak, with W/ if it is strong>",
    ),
    Probe(
        "delta-unknown",
        "conditional, with a tag the server never issued, accepting deltas",
        tag=_with_current(lambda tag: OTHER_TAG),
        shown=OTHER_TAG,
        accept_delta=(delta.FORMAT,),
    ),
    Probe("error", "an ordinary call with invalid arguments", invalid=True),
    Probe("error-conditional", "a conditional call with invalid arguments", tag=_current, invalid=True, shown=CURRENT),
    Probe("after", "an ordinary call after the mutating calls", phase="after"),
    Probe(
        "old-after",
        "conditional, with the tag from before the mutating calls",
        phase="after",
        tag=_current,
        shown=CURRENT,
    ),
    Probe(
        "delta-after",
        "conditional, with the tag from before the mutating calls, accepting deltas",
        phase="after",
        tag=_current,
        shown=CURRENT,
        accept_delta=delta.FORMATS,  # the tree digest's format first: its digest is checked when it is sent
    ),
    Probe(
        "delta-format",
        "conditional, with the tag from before the mutating calls, accepting only a format nobody sends",
        phase="after",
        tag=_current,
        shown=CURRENT,
        accept_delta=(UNKNOWN_FORMAT,),
    ),
)


# -- judges ----------------------------------------------------------------------------------------


def _first_failure(obs: ToolObservations) -> str | None:
    """Why the tool could not be checked at all: the ordinary call itself failed."""
    first = obs.get("first")
    if first is None or first.result is None:
        return f"the call failed: {first.error if first is not None else 'not made'}"
    if is_error(first.result):
        return f"the call answered an error: {_error_text(first.result)}; give arguments that succeed (--args)"
    return None


def _error_text(result: Mapping[str, Any]) -> str:
    content = result.get("content")
    if isinstance(content, list) and content and isinstance(content[0], Mapping):
        return short(content[0].get("text"), 80)
    return "no text"


def _is_int(value: object) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def duration_problems(block: Mapping[str, Any], names: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(problems, notes) of the duration fields `names` of a block, where present: integers >= 0 (in
    milliseconds; one over 24 h is noted, clients clamp it)."""
    problems: list[str] = []
    notes: list[str] = []
    for name in names:
        value = block.get(name)
        if name not in block:
            continue
        if not _is_int(value):
            problems.append(f"{name} {short(value)} is not an integer")
        elif value < 0:  # type: ignore[operator]  # an int or whole float here
            problems.append(f"{name} {value} is negative")
        elif value > MAX_TTL_MS:  # type: ignore[operator]
            notes.append(f"{name} {value} is over 24 h; clients clamp it")
    return problems, notes


def block_problems(block: object, *, not_modified: bool) -> tuple[list[str], list[str]]:
    """(problems, notes) of a cache block as sent; `not_modified` says which reply it came on. The core
    proposal's fields only: the follow-ups' (the stale windows, `delta`) are judged by their own scenarios."""
    if block is None:
        return ["no cache block"], []
    if not isinstance(block, Mapping):
        return [f"the block is not an object: {short(block)}"], []
    problems, notes = duration_problems(block, ("ttlMs",))
    scope = block.get("cacheScope")
    if "cacheScope" not in block:
        problems.append("cacheScope is missing (clients read it as private)")
    elif scope not in ("public", "private"):
        problems.append(f"cacheScope {short(scope)} is neither 'public' nor 'private' (clients read it as private)")
    if "etag" in block:
        etag = block["etag"]
        if parse_etag(etag) is None:
            problems.append(f'etag {short(etag)} is not an entity tag (W/"...")')
        elif isinstance(etag, str) and not etag.startswith("W/"):
            notes.append("the tag is strong; weak tags say what is meant")
    if "ttlMs" not in block and "etag" not in block:
        problems.append("neither ttlMs nor etag: clients never store the answer")
    claim = block.get("notModified")
    if not_modified and claim is not True:
        problems.append(f"notModified is {short(claim)}, not true")
    if not not_modified and "notModified" in block and claim is not False:
        problems.append(f"notModified {short(claim)} on a full answer")
    unknown = sorted(set(block) - {"ttlMs", "cacheScope", "etag", "notModified", DELTA_KEY, *STALE_KEYS})
    if unknown:
        notes.append(f"unknown fields {', '.join(unknown)}")
    return problems, notes


def judge_block(obs: ToolObservations) -> Judged:
    if (why := _first_failure(obs)) is not None:
        return Judged.not_applicable(why)
    problems: list[str] = []
    notes: list[str] = []
    for probe in ("first", "second"):
        result = obs.result(probe)
        if result is None:
            continue
        found, noted = block_problems(raw_block(result, obs.meta_key), not_modified=False)
        problems += [f"{probe} answer: {p}" for p in found if f"{probe} answer: {p}" not in problems]
        notes += [n for n in noted if n not in notes]
    if problems:
        return Judged.broken("; ".join(problems))
    block = block_dict(obs.result("first") or {}, obs.meta_key) or {}
    fields = ", ".join(f"{k}={short(block[k], 44)}" for k in ("ttlMs", "cacheScope", "etag") if k in block)
    return Judged.ok("; ".join([fields, *notes]))


def _tag_or_na(obs: ToolObservations) -> Judged | None:
    if (why := _first_failure(obs)) is not None:
        return Judged.not_applicable(why)
    if sent_tag(obs.result("first") or {}, obs.meta_key) is None:
        return Judged.not_applicable("the answer carries no (well-formed) tag")
    return None


def judge_same_tag(obs: ToolObservations) -> Judged:
    if (skip := _tag_or_na(obs)) is not None:
        return skip
    first, second = obs.result("first") or {}, obs.result("second")
    if second is None:
        return Judged.broken(f"the second call failed: {(obs.get('second') or Exchange(None, None)).error}")
    a, b = sent_tag(first, obs.meta_key), sent_tag(second, obs.meta_key)
    if b is None:
        return Judged.broken("the second answer carries no tag")
    if weak_equal(a, b):
        return Judged.ok(f"{b} both times")
    changed = differences(first, second, obs.meta_key)
    what = f"; what changed: {', '.join(changed)}" if changed else "; the answers were identical"
    return Judged.broken(f"{a} then {b}{what}")


ORDINARY_CALLS = ("first", "second", "after")


def judge_ordinary_never_not_modified(obs: ToolObservations) -> Judged:
    if (why := _first_failure(obs)) is not None:
        return Judged.not_applicable(why)
    ordinary = [name for name, exchange in obs.exchanges.items() if exchange.sent is None and name in ORDINARY_CALLS]
    ordinary += [name for name in obs.exchanges if name.startswith("between-")]  # between two mutating calls
    claimed = [p for p in ordinary if claims_not_modified(obs.result(p) or {}, obs.meta_key)]
    if claimed:
        return Judged.broken(f"the {', '.join(claimed)} call carried no tag and was answered not-modified")
    return Judged.ok("ordinary calls got full answers")


def _current_reply(obs: ToolObservations) -> tuple[Mapping[str, Any] | None, Judged | None]:
    if (skip := _tag_or_na(obs)) is not None:
        return None, skip
    current = obs.get("current")
    if current is None:
        return None, Judged.not_applicable("the second call gave no tag to send back")
    if current.result is None:
        return None, Judged.broken(f"the conditional call failed: {current.error}")
    return current.result, None


def _has_structured_output(obs: ToolObservations) -> bool:
    second = obs.result("second") or {}
    return obs.output_schema is not None or second.get("structuredContent") is not None


def _answer_kind(result: Mapping[str, Any]) -> object:
    structured = result.get("structuredContent")
    return structured.get("kind") if isinstance(structured, Mapping) else None


def _stub_kind(obs: ToolObservations) -> str:
    """The K a not-modified reply would name: the answer's own string `kind`, else the declared one, else
    the tool's name (docs/protocol.md section 4)."""
    own = _answer_kind(obs.result("second") or {})
    if isinstance(own, str):
        return own
    meta = obs.entry.get("_meta")
    declared = meta.get(obs.meta_key) if isinstance(meta, Mapping) else None
    kind = declared.get("kind") if isinstance(declared, Mapping) else None
    return kind if isinstance(kind, str) else obs.tool


def _stub_refusal(obs: ToolObservations) -> str | None:
    """Why the tool's output schema refuses the stub `{"kind": K}` (None: it has none, or accepts it)."""
    schema = obs.output_schema
    if schema is None or not _has_structured_output(obs):
        return None
    return _schema_error(schema, {"kind": _stub_kind(obs)})


def _full_under(reply: Mapping[str, Any], obs: ToolObservations) -> bool:
    """The full answer, stamped with the current tag: what a tool whose schema refuses the stub sends."""
    tag = obs.current_tag
    block = block_dict(reply, obs.meta_key) or {}
    etag = block.get("etag")
    return (
        tag is not None
        and not is_error(reply)
        and not claims_not_modified(reply, obs.meta_key)
        and isinstance(etag, str)
        and parse_etag(etag) is not None
        and weak_equal(etag, tag)
    )


def judge_not_modified_shape(obs: ToolObservations) -> Judged:
    reply, skip = _current_reply(obs)
    if skip is not None or reply is None:
        return skip or Judged.not_applicable("no reply")
    tag = obs.current_tag
    if is_error(reply):
        return Judged.broken(f"answered an error to its own current tag: {_error_text(reply)}")
    if not claims_not_modified(reply, obs.meta_key):
        refused = _stub_refusal(obs)
        if refused is not None and _full_under(reply, obs):
            return Judged.ok(
                f'the full answer under the current tag: the output schema refuses {{"kind": "{_stub_kind(obs)}"}} '
                f"({refused}), so no not-modified reply may go"
            )
        return Judged.broken(f"answered in full to its own current tag {tag}")
    problems, _ = block_problems(raw_block(reply, obs.meta_key), not_modified=True)
    block = block_dict(reply, obs.meta_key) or {}
    if "etag" in block and parse_etag(block["etag"]) is not None and not weak_equal(block["etag"], tag):
        problems.append(f"the block names {block['etag']}, not the tag sent ({tag})")
    if "etag" not in block:
        problems.append("the block carries no tag")
    content = reply.get("content")
    if content != []:
        problems.append(
            f"content is {short(content)}, not []"
            if not isinstance(content, list)
            else f"content carries {plural(len(content), 'block')}"
        )
    structured = reply.get("structuredContent")
    if _has_structured_output(obs):
        answer_kind = _answer_kind(obs.result("second") or {})
        if (
            not isinstance(structured, Mapping)
            or set(structured) != {"kind"}
            or not isinstance(structured.get("kind"), str)
        ):
            problems.append(f'structuredContent is {short(structured, 60)}, not {{"kind": K}}')
        elif isinstance(answer_kind, str) and structured["kind"] != answer_kind:
            problems.append(f"kind {structured['kind']!r} is not the answer's own kind {answer_kind!r}")
    elif structured is not None:
        problems.append(f"structuredContent {short(structured)} on a tool without structured output")
    if problems:
        return Judged.broken("; ".join(problems))
    extra = sorted(other_meta(reply, obs.meta_key))
    note = f"; other _meta keys sent too: {', '.join(extra)}" if extra else ""
    kind = f", structuredContent {structured}" if structured is not None else ", no structuredContent"
    return Judged.ok(f"notModified: true, content []{kind}{note}")


def _schema_error(schema: Mapping[str, Any], instance: object) -> str | None:
    try:
        # As the MCP SDK's client validates a reply: the schema checked against its metaschema first (a
        # schema that fails it makes the client refuse every reply), `$ref`s resolved within the schema only.
        validator_class = validators.validator_for(schema)
        validator_class.check_schema(schema)
        validator = validator_class(schema, registry=Registry())
        error = jsonschema_exceptions.best_match(validator.iter_errors(instance))
    except Exception as exc:  # an invalid or unresolvable schema: report it, never raise
        return f"the output schema cannot be used: {short(str(exc), 80)}"
    return None if error is None else error.message


def judge_not_modified_schema(obs: ToolObservations) -> Judged:
    reply, skip = _current_reply(obs)
    if skip is not None or reply is None:
        return skip or Judged.not_applicable("no reply")
    schema = obs.output_schema
    if schema is None:
        return Judged.not_applicable("the tool declares no output schema")
    if not claims_not_modified(reply, obs.meta_key):
        if _stub_refusal(obs) is not None and _full_under(reply, obs):
            return Judged.ok("the schema refuses the stub, and the full answer went instead")
        return Judged.not_applicable("no not-modified reply to validate")
    error = _schema_error(schema, reply.get("structuredContent"))
    if error is None:
        return Judged.ok('{"kind": K} passes the output schema')
    return Judged.broken(
        f"{error}: a server MUST NOT send a stub the output schema refuses, and a client that validates every "
        "reply against it (the MCP SDK's call_tool does) rejects it; send the full answer instead, or require "
        "only `kind` in the schema"
    )


def _full_answers_to(obs: ToolObservations, probes: tuple[str, ...], what: str) -> Judged:
    if (skip := _tag_or_na(obs)) is not None:
        return skip
    problems: list[str] = []
    seen: list[str] = []
    for probe in probes:
        exchange = obs.get(probe)
        if exchange is None:
            continue
        seen.append(probe)
        if exchange.result is None:
            problems.append(f"{probe}: the call failed ({exchange.error})")
        elif claims_not_modified(exchange.result, obs.meta_key):
            problems.append(f"{probe}: answered not-modified to {short(exchange.sent, 48)}")
        elif is_error(exchange.result):
            problems.append(f"{probe}: answered an error ({_error_text(exchange.result)})")
    if not seen:
        return Judged.not_applicable("no tag to build the conditional calls from")
    if problems:
        return Judged.broken("; ".join(problems))
    return Judged.ok(f"full answer to {what}")


def judge_other_tag(obs: ToolObservations) -> Judged:
    return _full_answers_to(obs, ("wrong",), f"{OTHER_TAG}")


def judge_malformed_tag(obs: ToolObservations) -> Judged:
    return _full_answers_to(obs, tuple(MALFORMED), "each of " + ", ".join(name[10:] for name in MALFORMED))


def judge_other_form(obs: ToolObservations) -> Judged:
    if (skip := _tag_or_na(obs)) is not None:
        return skip
    exchange = obs.get("other-form")
    if exchange is None:
        return Judged.not_applicable("no tag to build the conditional call from")
    if exchange.result is None:
        return Judged.broken(f"the call failed: {exchange.error}")
    if claims_not_modified(exchange.result, obs.meta_key):
        return Judged.ok(f"{exchange.sent} is weakly equal to {obs.current_tag}: not modified")
    if _stub_refusal(obs) is not None and _full_under(exchange.result, obs):
        return Judged.ok(f"{exchange.sent} matched: the full answer under the tag (the schema refuses the stub)")
    return Judged.broken(
        f"answered in full to {exchange.sent}: tags are compared as strings, not weakly (RFC 9110 8.8.3.2); "
        "clients that send back the exact string they stored are not affected"
    )


ERROR_NEEDED = "a checked tool that answers an error to arguments its input schema refuses"


def judge_error_unstamped(obs: ToolObservations) -> Judged:
    if obs.invalid_arguments is None:
        return Judged.untried("no arguments the input schema refuses could be built", ERROR_NEEDED)
    problems: list[str] = []
    answered: list[str] = []
    for probe in ("error", "error-conditional"):
        exchange = obs.get(probe)
        if exchange is None:
            continue
        if exchange.result is None:
            answered.append(f"{probe}: a protocol error")
            continue
        result = exchange.result
        if claims_not_modified(result, obs.meta_key):
            problems.append(f"{probe}: answered not-modified to invalid arguments {short(dict(obs.invalid_arguments))}")
        elif not is_error(result):
            answered.append(f"{probe}: not an error")
        elif raw_block(result, obs.meta_key) is not None:
            problems.append(f"{probe}: the error carries a cache block {short(raw_block(result, obs.meta_key), 60)}")
        else:
            answered.append(f"{probe}: an error, unstamped")
    if problems:
        return Judged.broken("; ".join(problems))
    if all(item.endswith("not an error") for item in answered):
        return Judged.untried(
            f"the tool accepted arguments its schema refuses ({short(dict(obs.invalid_arguments))})", ERROR_NEEDED
        )
    return Judged.ok("; ".join(answered))


def judge_not_modified_size(obs: ToolObservations) -> Judged:
    reply, skip = _current_reply(obs)
    if skip is not None or reply is None:
        return skip or Judged.not_applicable("no reply")
    if not claims_not_modified(reply, obs.meta_key):
        return Judged.not_applicable("no not-modified reply")
    current, second = obs.get("current"), obs.get("second")
    nm = current.reply_bytes if current is not None else None
    full = second.reply_bytes if second is not None else None
    if nm is None or full is None:
        return Judged.not_applicable("sizes on the wire were not measured")
    if full <= NOT_MODIFIED_BOUND:
        return Judged.untried(
            f"the full answer is only {full:,} B (not-modified {nm:,} B); no margin to show",
            f"arguments that make an answer larger than {NOT_MODIFIED_BOUND:,} B on the wire",
        )
    if nm <= NOT_MODIFIED_BOUND:
        return Judged.ok(f"{nm:,} B against {full:,} B for the answer (at most {NOT_MODIFIED_BOUND:,} B)")
    return Judged.broken(f"{nm:,} B against {full:,} B for the answer: over {NOT_MODIFIED_BOUND:,} B")


MUTATE = "a mutating call that changes what the probed tools read (--mutate NAME --args JSON)"
MUTATE_AGAIN = "a mutating call that changes the answers' content (the --mutate calls given did not)"
MUTATE_META = (
    "a mutating call that changes only the `_meta` of an answer (--mutate; e.g. a cell deleted and the same one "
    "inserted again, under a new id)"
)


def mutation_needed(obs: ToolObservations) -> str:
    """What would exercise a rule that needs the answer to change: a first --mutate, or another one."""
    return MUTATE_AGAIN if obs.mutations else MUTATE


def judge_mutation(obs: ToolObservations) -> Judged:
    if not obs.mutations:
        return Judged.untried("no mutating call named (--mutate NAME --args JSON)", MUTATE)
    if (skip := _tag_or_na(obs)) is not None:
        return skip
    before, after = obs.result("second") or {}, obs.result("after")
    if after is None:
        return Judged.broken(f"the call after the mutation failed: {(obs.get('after') or Exchange(None, None)).error}")
    changed = differences(before, after, obs.meta_key)
    if not changed:
        return Judged.untried(
            f"the mutating calls ({'; '.join(obs.mutations)}) did not change this answer", MUTATE_AGAIN
        )
    if meta_only_differences(before, after, obs.meta_key):
        return Judged.untried("only _meta changed; see the `_meta` row", MUTATE_AGAIN)
    problems = []
    old, new = obs.current_tag, sent_tag(after, obs.meta_key)
    if new is None:
        problems.append("the new answer carries no tag")
    elif weak_equal(old, new):
        problems.append(f"the tag stayed {new} though {', '.join(changed)} changed")
    old_after = obs.get("old-after")
    if old_after is not None and old_after.result is not None and claims_not_modified(old_after.result, obs.meta_key):
        problems.append("the old tag got not-modified: a client would keep serving the old answer")
    if problems:
        return Judged.broken("; ".join(problems))
    return Judged.ok(f"{', '.join(changed)} changed: {old} -> {new}; the old tag got the full answer")


def judge_meta_covered(obs: ToolObservations) -> Judged:
    if (skip := _tag_or_na(obs)) is not None:
        return skip
    full = [
        (probe, exchange.result)
        for probe, exchange in obs.exchanges.items()
        if exchange.result is not None
        and not is_error(exchange.result)
        and not claims_not_modified(exchange.result, obs.meta_key)
        and sent_tag(exchange.result, obs.meta_key) is not None
    ]
    varied = False
    for (pa, a), (pb, b) in combinations(full, 2):
        changed = differences(a, b, obs.meta_key)
        if not changed or not meta_only_differences(a, b, obs.meta_key):
            continue
        varied = True
        ta, tb = sent_tag(a, obs.meta_key), sent_tag(b, obs.meta_key)
        if weak_equal(ta, tb):
            detail = f"the tag stayed {tb} while {', '.join(changed)} ({pa} -> {pb})"
            old_after = obs.get("old-after")
            if (
                old_after is not None
                and old_after.result is not None
                and claims_not_modified(old_after.result, obs.meta_key)
            ):
                detail += "; the old tag got not-modified after the mutation"
            return Judged.broken(detail + ": a client serving its stored copy keeps the old value")
    if not varied:
        if not any(other_meta(result, obs.meta_key) for _, result in full):
            # A tag that left `_meta` out could serve no old `_meta`: there is none.
            return Judged.not_applicable("its answers carry no `_meta` of their own (beside the block and serverInfo)")
        return Judged.untried("_meta never varied alone between answers", MUTATE_META)
    return Judged.ok("when only _meta changed, the tag changed")


def judge_wire_size(obs: ToolObservations) -> Judged:
    second, current = obs.get("second"), obs.get("current")
    if second is None or second.reply_bytes is None:
        return Judged.not_applicable("nothing measured")
    parts = [f"full answer {second.reply_bytes:,} B"]
    if current is not None and current.reply_bytes is not None and current.result is not None:
        label = "not-modified" if claims_not_modified(current.result, obs.meta_key) else "reply to the current tag"
        share = 100 * current.reply_bytes / second.reply_bytes
        parts.append(f"{label} {current.reply_bytes:,} B ({share:.3g} %)")
        if current.request_bytes is not None and second.request_bytes is not None:
            parts.append(f"a conditional request costs {current.request_bytes - second.request_bytes:+,} B")
    return Judged.ok("; ".join(parts))


BLOCK_AT = '`_meta["io.modelcontextprotocol/cache"]`'

CORE_SCENARIOS: tuple[Scenario[ToolObservations], ...] = (
    Scenario(
        "block",
        "The cache block is well-formed",
        BLOCK,
        "required",
        judge_block,
        expects=f'each full answer\'s {BLOCK_AT} is an object with `cacheScope` "public" or "private", '
        "`ttlMs` an integer >= 0 and/or `etag` an entity tag, and no `notModified`",
        sends=("first", "second"),
    ),
    Scenario(
        "same-tag",
        "The same call twice gives the same tag",
        TAG,
        "required",
        judge_same_tag,
        expects="the two answers carry weakly equal tags",
        sends=("first", "second"),
    ),
    Scenario(
        "ordinary",
        "An ordinary call never gets not-modified",
        REPLY,
        "required",
        judge_ordinary_never_not_modified,
        expects="no answer to a call without a tag says `notModified`",
        sends=("first", "second", "after"),
    ),
    Scenario(
        "not-modified",
        "The current tag gets a not-modified reply of the right shape",
        REPLY,
        "required",
        judge_not_modified_shape,
        expects=f"not an error; {BLOCK_AT} with `notModified: true` and a tag weakly equal to the one sent; "
        '`content: []`; `structuredContent` exactly `{"kind": K}` (K the answer\'s own string `kind` if it has '
        "one) when the tool answers with structured content, absent when it does not",
        sends=("first", "second", "current"),
    ),
    Scenario(
        "nm-schema",
        "The not-modified reply passes the output schema",
        REPLY,
        "required",
        judge_not_modified_schema,
        expects="the not-modified reply's `structuredContent` validates against the tool's `outputSchema`; "
        'where the schema refuses `{"kind": K}`, the current tag gets the full answer instead',
        sends=("second", "current"),
    ),
    Scenario(
        "other-tag",
        "A tag never issued gets the full answer",
        REPLY,
        "required",
        judge_other_tag,
        expects="the full answer: not an error, no `notModified`",
        sends=("second", "wrong"),
    ),
    Scenario(
        "malformed-tag",
        "A malformed tag gets the full answer",
        REPLY,
        "required",
        judge_malformed_tag,
        expects="the full answer to each: not an error, no `notModified`",
        sends=("second", *MALFORMED),
    ),
    Scenario(
        "weak-compare",
        "The tag in its other form is weakly equal",
        TAG,
        "recommended",
        judge_other_form,
        expects="a not-modified reply: weak comparison ignores `W/`",
        sends=("second", "other-form"),
    ),
    Scenario(
        "error",
        "An error is never stamped nor not-modified",
        REPLY,
        "required",
        judge_error_unstamped,
        expects="an error result (`isError: true`) with no cache block, to both calls; never `notModified`",
        sends=("error", "error-conditional"),
    ),
    Scenario(
        "nm-size",
        "The not-modified reply does not grow with the answer",
        REPLY,
        "required",
        judge_not_modified_size,
        expects=f"when the full answer's message is over {NOT_MODIFIED_BOUND} bytes on the wire, the not-modified "
        f"reply's is at most {NOT_MODIFIED_BOUND}",
        sends=("second", "current"),
    ),
    Scenario(
        "mutation",
        "After a change, a new tag; the old one gets the full answer",
        TAG,
        "required",
        judge_mutation,
        expects="when the answer changed, a tag not weakly equal to the old one, and the full answer to the old tag",
        sends=("second", "after", "old-after"),
    ),
    Scenario(
        "meta",
        "The tag covers `_meta`",
        META_COVERED,
        "required",
        judge_meta_covered,
        expects="two answers that differ only in `_meta` (the cache block and serverInfo aside) carry tags that "
        "are not weakly equal, and the old tag gets the full answer",
        sends=("first", "second", "after", "old-after"),
    ),
    Scenario(
        "wire",
        "Size on the wire",
        REPLY,
        "info",
        judge_wire_size,
        expects="figures only: the full answer, the not-modified reply and what a conditional request adds, in bytes",
        sends=("second", "current"),
    ),
)
